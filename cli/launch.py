"""`xce launch HOST [--] COMMAND...`: a task of the running job on a host of its allocation (LSF blaunch).

Run from inside a job: its environment names the job (XCE_JOB_ID,
XCE_JOB_ATTEMPT), the credential of its allocation (XCE_JOB_CREDENTIAL) and
the worker's launch socket (XCE_LAUNCH_SOCKET). The request goes to this
host's worker, which passes it to the leader and on to HOST's worker
(worker/launch_socket.py); the task runs there as the job's owner, with this
environment and working directory, its output appended to the job's. Like
blaunch, the command waits for the task and exits with its status (128 +
the signal if one ended it); a refusal exits 2 with the reason. If the
worker goes away meanwhile (a restart), the request is made again with the
same task id: the task runs at most once.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
import uuid

from xce.v1 import api_pb2 as api

RECONNECT_FOR_S = 120.0
MAX_ENV_BYTES = 256 << 10


def declare_launch(p: argparse.ArgumentParser) -> None:
    p.add_argument("host", help="a host of the job's allocation ($XCE_HOSTS)")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="the command (after --)")


def run_launch(args: argparse.Namespace) -> int:
    command = list(args.cmd)
    if command and command[0] == "--":
        command = command[1:]
    missing = [n for n in ("XCE_JOB_ID", "XCE_JOB_ATTEMPT", "XCE_JOB_CREDENTIAL", "XCE_LAUNCH_SOCKET")
               if not os.environ.get(n)]
    if missing:
        print(f"xce launch: not inside a job of an XCE worker ({', '.join(missing)} unset)", file=sys.stderr)
        return 2
    if not command:
        print("xce launch: no command: put it after --, as in xce launch HOST -- ./rank", file=sys.stderr)
        return 2
    return run_task(args.host, command)


def run_task(host: str, command: list[str], extra: dict[str, str] | None = None) -> int:
    """Run `command` on `host` as a task of this job (its environment, with `extra` over it, and
    working directory); its status."""
    env, size = {}, 0
    for name, value in {**os.environ, **(extra or {})}.items():
        size += len(name) + len(value) + 2
        if size > MAX_ENV_BYTES:
            break
        env[name] = value
    request = api.LaunchTask(job_id=int(os.environ["XCE_JOB_ID"]), attempt=int(os.environ["XCE_JOB_ATTEMPT"]),
                             task_id=uuid.uuid4().hex, host=host, command=command, env=env,
                             cwd=os.getcwd(), credential=os.environ["XCE_JOB_CREDENTIAL"])
    return _wait(os.environ["XCE_LAUNCH_SOCKET"], request)


def _wait(path: str, request: api.LaunchTask) -> int:
    from worker.launch_socket import read_frame, write_frame

    deadline = time.monotonic() + RECONNECT_FOR_S
    while True:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.connect(path)
                write_frame(conn, request.SerializeToString())
                while (raw := read_frame(conn)) is not None:
                    state = api.TaskState.FromString(raw)
                    if state.phase == api.TASK_REFUSED:
                        print(f"xce launch: task refused on {request.host}: {state.reason}", file=sys.stderr)
                        return 2
                    if state.phase == api.TASK_ENDED:
                        return 128 + state.term_signal if state.term_signal else state.exit_code
                    deadline = time.monotonic() + RECONNECT_FOR_S  # it runs: wait as long as it does
        except PermissionError as exc:  # not a worker restarting: nothing to wait for
            print(f"xce launch: cannot reach the worker's launch socket {path}: {exc.strerror}",
                  file=sys.stderr)
            return 2
        except OSError:
            pass
        if time.monotonic() > deadline:  # the worker is gone (for a restart, it comes back)
            print(f"xce launch: lost the worker's launch socket {path}", file=sys.stderr)
            return 2
        time.sleep(0.5)
