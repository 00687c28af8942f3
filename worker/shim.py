"""`python -m worker.shim STATUS_FILE [--user NAME] [--stdout P] [--stderr P] -- COMMAND ARGS...`

Runs one job and records how it ended.

Each job runs under this shim, the leader of the job's process group. It
waits for the command with wait4 and writes its exit status and usage to
STATUS_FILE (atomically), so the end of a job is known even when the worker
that started it died meanwhile: a restarted worker cannot wait for processes
that are not its children, but it can read this file. The shim ignores
SIGTERM/SIGINT/SIGHUP (the command gets them, through the process group, with
default handling restored at exec) so it outlives the command; only SIGKILL
takes it down first, and then the status is unknown. With --user the shim
stays the worker's user and only the command runs as NAME (the interpreter
running the shim need not be readable by NAME), with NAME's groups; --stdout
and --stderr are then opened by NAME (through `sh`), never by the worker's
user. When the command ends, whatever it left in the process group is killed,
as Slurm does with a job step's processes.
"""

from __future__ import annotations

import json
import os
import pwd
import signal
import subprocess
import sys
import time
from pathlib import Path


def _ignore(signum: int, frame: object) -> None:
    pass  # a handler, not SIG_IGN: exec resets it to the default for the command


def write_status(path: Path, status: dict[str, object]) -> None:
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        json.dump(status, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main(argv: list[str]) -> int:
    options: dict[str, str] = {}
    while len(argv) > 3 and argv[1] in ("--user", "--stdout", "--stderr"):
        options[argv[1][2:]] = argv[2]
        argv = [argv[0], *argv[3:]]
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m worker.shim STATUS_FILE [--user NAME] [--stdout P] [--stderr P] "
              "-- COMMAND ...", file=sys.stderr)
        return 2
    status_path, command = Path(argv[0]), argv[2:]
    user = options.get("user")
    if "stdout" in options or "stderr" in options:
        # The job's user opens its own output files: sh redirects, then execs.
        streams = ((1, "XCE_OUT", "stdout"), (2, "XCE_ERR", "stderr"))
        redirect = "".join(f' {fd}>>"${var}"' for fd, var, key in streams if key in options)
        os.environ.update({"XCE_OUT": options.get("stdout", ""), "XCE_ERR": options.get("stderr", "")})
        command = ["/bin/sh", "-c", f'exec "$0" "$@"{redirect}', *command]
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _ignore)
    started = time.monotonic()
    try:
        groups: dict[str, object] = {}
        if user is not None:
            entry = pwd.getpwnam(user)
            groups = {"group": entry.pw_gid, "extra_groups": os.getgrouplist(user, entry.pw_gid)}
        proc = subprocess.Popen(command, user=user, **groups)  # type: ignore[call-overload]
    except OSError as exc:
        write_status(status_path, {"start_error": f"{command[0]}: {exc.strerror or exc}"})
        return 127
    while True:
        try:
            _, status, usage = os.wait4(proc.pid, 0)
            break
        except ChildProcessError:
            write_status(status_path, {"unknown": True})
            return 1
        except InterruptedError:
            continue
    proc.returncode = os.waitstatus_to_exitcode(status)
    write_status(status_path, {
        "exit_code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else 0,
        "term_signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0,
        "user_cpu_s": usage.ru_utime, "system_cpu_s": usage.ru_stime, "max_rss_kb": usage.ru_maxrss,
        "wall_s": time.monotonic() - started, "time_ms": int(time.time() * 1000)})
    os.killpg(0, signal.SIGKILL)  # what the command left behind, and this shim: the status is written
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
