"""`make test`'s pytest: the tests that start real processes (marker `cluster`) and the rest, side by side.

The cluster tests mostly wait on daemons, a core often idle; the rest (the protocol simulations, the
model checks, the unit tests) mostly compute. So the cluster tests run on two pytest-xdist workers
(each test on its own ports and in its own directories; a module's tests that share one cluster stay
on one worker: tests/xdist_groups.py), and the rest runs beside them in one process, at a
lower priority (nice 10): it takes what the daemons leave, and the daemons' timings stay theirs.
Both run every test they select; the markers partition the suite. The computing tier's output is
shown when it ends (after the cluster tier's, so the two never interleave); the exit status is the
first failure's. Extra arguments go to both (`-x`, `-k ...`). XCE_TEST_WORKERS sets the number of
cluster workers (2; 0 runs them in the one pytest process).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

PYTEST = [sys.executable, "-m", "pytest", "-q", "-m"]
WORKERS = int(os.environ.get("XCE_TEST_WORKERS", "2"))


def cluster_tier(extra: list[str]) -> list[str]:
    spread = ["-n", str(WORKERS), "--dist", "loadgroup"] if WORKERS else []
    return [*PYTEST, "cluster", *spread, "--durations=15", "tests", *extra]


def main(extra: list[str]) -> int:
    started = time.monotonic()
    with tempfile.TemporaryFile("w+") as rest_output:
        rest = subprocess.Popen(["nice", "-n", "10", *PYTEST, "not cluster", "--durations=15", "tests",
                                 *extra], stdout=rest_output, stderr=subprocess.STDOUT)
        try:
            cluster, failures, cluster_cpu = _shown(cluster_tier(extra))
            cluster_s = time.monotonic() - started
            rest_code, rest_cpu = _reaped(rest)
        finally:
            if rest.poll() is None:
                rest.kill()
                rest.wait()
        rest_output.seek(0)
        print("\n===== the tests that start no cluster (beside the above, at nice 10) =====", flush=True)
        sys.stdout.write(rest_output.read())
    if failures:  # again at the end, where a CI log's tail shows them
        print("\n===== what failed in the cluster tier (its output is above) =====", *failures, sep="\n")
    # CPU seconds of each tier and what it started (what was reaped: a daemon a test left would not count).
    # The two tiers share two cores: when their sum nears twice the wall time, the suite is CPU-bound.
    print(f"\nmake test: cluster tier {cluster_s:.0f} s (exit {cluster}, {cluster_cpu:.0f} s of CPU), "
          f"the rest exit {rest_code} ({rest_cpu:.0f} s of CPU); {time.monotonic() - started:.0f} s in all",
          flush=True)
    # pytest's 5 (nothing collected) is a failure here too: a tier that lost its tests is broken.
    return cluster or rest_code


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
