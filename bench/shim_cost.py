"""What starting a short job costs its host: the server of shims, a shim and its command, per job.

    .venv/bin/python bench/shim_cost.py [--jobs 400] [--rounds 3] [--command true] [--path DIRS]

The worker's own way of starting a job (worker/process_host.py: a `RealProcessHost` and its server of
shims), without a worker or a cluster: jobs of the running user (a root worker's root jobs, or a
worker that is not root), one after another, each waited for. For each: the server's CPU (its
forks of shims, its reaping), the shims' and their commands' (the server reaps them: its children's
CPU in /proc), this process's (the worker's side: the request, the watch), and the wall time from
the request to the end heard, and the shims' and commands' page faults (a count that the machine's
speed does not move); median of --rounds. Prints; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from worker.process_host import SHIM, RealProcessHost  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"  # a job's own when its submitter sent none (worker/spawn.py)


def _cpu(pid: int) -> tuple[float, float, int]:
    """(the process's own CPU seconds, its reaped children's, their minor page faults)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    own, children = int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14])
    return own / TICK, children / TICK, int(fields[8])


def one_round(jobs: int, command: str, path: str = DEFAULT_PATH) -> dict[str, float]:
    """Microseconds a job: server, shims and commands, this process; and the wall time."""
    with tempfile.TemporaryDirectory(prefix="xce-shim-cost-") as work:
        here = Path(work)
        host = RealProcessHost()
        ended = threading.Semaphore(0)
        user = os.environ.get("USER") or "root"
        env = f"PATH={path}\0HOME={here}".encode()

        def start(number: int) -> None:
            argv = [sys.executable, "-I", "-S", SHIM, str(here / f"{number}.status"), "--cwd", str(here),
                    "--stdout", str(here / f"{number}.out"), "--stderr", str(here / f"{number}.out"),
                    "--spool-outputs", "1,2", "--", command]
            if os.geteuid() == 0:  # as a root worker starts its root jobs
                argv[5:5] = ["--user", user]
            pid = host.spawn(argv, {}, env, here / "shims.log")
            host.watch(pid, True, None, lambda signal: ended.release())

        try:
            start(-1)  # the server starts with the first job
            ended.acquire()
            assert host._server is not None
            server = host._server.process.pid
            own, children, faults = _cpu(server)
            mine, began = os.times(), time.perf_counter()
            for number in range(jobs):
                start(number)
                ended.acquire()
            wall = time.perf_counter() - began
            done, after = os.times(), _cpu(server)
        finally:
            host.close()
    worker_side = (done.user + done.system) - (mine.user + mine.system)
    return {"server": (after[0] - own) / jobs * 1e6, "shims and commands": (after[1] - children) / jobs * 1e6,
            "this process (the worker's side)": worker_side / jobs * 1e6,
            "page faults of the shims and commands (a count, not microseconds)": (after[2] - faults) / jobs,
            "wall, request to end heard": wall / jobs * 1e6}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--jobs", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--command", default="true", help="each job's command (found on the PATH)")
    ap.add_argument("--path", default=DEFAULT_PATH, help="the jobs' PATH (bsub, sbatch send the submitter's)")
    args = ap.parse_args()
    runs = [one_round(args.jobs, args.command, args.path) for _ in range(args.rounds)]
    print(f"## Starting a short job ({args.jobs} `{args.command}` one after another, "
          f"median of {args.rounds})\n")
    print("| per job | microseconds |\n|---|---|")
    for what in runs[0]:
        print(f"| {what} | {statistics.median(run[what] for run in runs):,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
