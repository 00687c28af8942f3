"""`make test`'s pytest: the tests that start real processes (marker `cluster`) and the rest, side by side.

The cluster tests mostly wait on daemons, a core often idle; the rest (the protocol simulations, the
model checks, the unit tests) mostly compute. So the cluster tests run on two pytest-xdist workers
(each test on its own ports and in its own directories; a module's tests that share one cluster stay
on one worker: tests/xdist_groups.py), and the rest runs beside them in two processes, at a
lower priority (nice 10): they take what the daemons leave, and the daemons' timings stay theirs.
The rest is split by files (MODEL_CHECKS: TLC's models and trace validation; and everything else),
not by pytest-xdist: TLC's long runs start when test_tlc.py is collected (tests/tlc.py), which each
xdist worker would do. In one process the rest ran ~120 s past the cluster tier with one core idle.
The markers and the split partition the suite. The computing tiers' output is shown when they end
(after the cluster tier's, so none interleave); the exit status is the first failure's. Extra
arguments go to all (`-x`, `-k ...`). XCE_TEST_WORKERS sets the number of cluster workers (2; 0 runs
them in the one pytest process).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import threading
import time
from typing import IO

PYTEST = [sys.executable, "-m", "pytest", "-q", "-m"]
WORKERS = int(os.environ.get("XCE_TEST_WORKERS", "2"))
MODEL_CHECKS = ["tests/tla"]


def cluster_tier(extra: list[str]) -> list[str]:
    spread = ["-n", str(WORKERS), "--dist", "loadgroup"] if WORKERS else []
    return [*PYTEST, "cluster", *spread, "--durations=15", "tests", *extra]


def rest_tiers(extra: list[str]) -> list[tuple[str, list[str]]]:
    """The tests that start no cluster, in two parts: (what, pytest command)."""
    common = [*PYTEST, "not cluster", "--durations=15"]
    others = [f"--ignore={path}" for path in MODEL_CHECKS]
    return [(f"the model checks ({', '.join(MODEL_CHECKS)})", [*common, *MODEL_CHECKS, *extra]),
            ("the other tests that start no cluster", [*common, *others, "tests", *extra])]


def main(extra: list[str]) -> int:
    started = time.monotonic()
    rests: list[tuple[str, subprocess.Popen[bytes], IO[str]]] = []
    ends: list[tuple[str, int, float, float]] = []  # (what, exit status, CPU seconds, ended at)
    with contextlib.ExitStack() as outputs:
        try:
            for what, command in rest_tiers(extra):
                kept: IO[str] = outputs.enter_context(tempfile.TemporaryFile("w+"))
                rests.append((what, subprocess.Popen(["nice", "-n", "10", *command], stdout=kept,
                                                     stderr=subprocess.STDOUT), kept))
            reapers = [threading.Thread(target=lambda w=what, p=proc: ends.append((w, *_reaped(p),
                                                                                 time.monotonic() - started)),
                                        daemon=True)  # (an interrupted run does not wait for them)
                       for what, proc, _ in rests]
            for reaper in reapers:
                reaper.start()
            cluster, failures, cluster_cpu = _shown(cluster_tier(extra))
            cluster_s = time.monotonic() - started
            for reaper in reapers:
                reaper.join()
        finally:
            for _, proc, _ in rests:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        for what, _, output in rests:
            output.seek(0)
            print(f"\n===== {what} (beside the above, at nice 10) =====", flush=True)
            sys.stdout.write(output.read())
    if failures:  # again at the end, where a CI log's tail shows them
        print("\n===== what failed in the cluster tier (its output is above) =====", *failures, sep="\n")
    # CPU seconds of each tier and what it started (what was reaped: a daemon a test left would not count).
    # The tiers share two cores: when their sum nears twice the wall time, the suite is CPU-bound.
    rest = "; ".join(f"{what}: exit {code} ({cpu:.0f} s of CPU, done at {at:.0f} s)"
                     for what, code, cpu, at in ends)
    print(f"\nmake test: cluster tier {cluster_s:.0f} s (exit {cluster}, {cluster_cpu:.0f} s of CPU); "
          f"{rest}; {time.monotonic() - started:.0f} s in all", flush=True)
    # pytest's 5 (nothing collected) is a failure here too: a tier that lost its tests is broken.
    return cluster or next((code for _, code, _, _ in ends if code), 0)


def _shown(command: list[str]) -> tuple[int, list[str], float]:
    """Run `command`, its output passed through as it comes; (its exit status, its FAILED and ERROR
    summary lines, its CPU seconds)."""
    failures: list[str] = []
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as proc:
        assert proc.stdout is not None
        for raw in proc.stdout:
            sys.stdout.buffer.write(raw)
            sys.stdout.buffer.flush()
            if raw.startswith((b"FAILED ", b"ERROR ")):
                failures.append(raw.decode(errors="replace").rstrip())
        code, cpu = _reaped(proc)
    return code, failures, cpu


def _reaped(proc: subprocess.Popen[bytes]) -> tuple[int, float]:
    """Wait for `proc`: (its exit status, the CPU seconds, user and system, of it and the children it
    reaped)."""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage.ru_utime + usage.ru_stime


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
