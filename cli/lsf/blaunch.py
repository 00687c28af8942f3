"""blaunch: from inside a job, run a task on hosts of its allocation (`xce launch`, cli/launch.py).

`blaunch host command ...`, or `blaunch -z "hostA hostB" command ...` for a
task on each (at once); the exit status is the first non-zero task's, else
0. Needs no connection of its own: the worker of this host carries it.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading

from client.channel import Client, XceError

LOCAL = True


def declare(p: argparse.ArgumentParser, name: str) -> None:
    p.add_argument("-z", dest="hosts", metavar='"host_name ..."', help="run the task on each of these hosts")
    p.add_argument("-n", dest="no_stdin", action="store_true", help="stdin from /dev/null (always, here)")
    p.add_argument("-no-shell", dest="no_shell", action="store_true",
                   help="run the command without a shell (always, here: the task is its words)")
    p.add_argument("-use-login-shell", dest="login", action="store_true", help="not in XCE yet")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="[host_name] command [argument ...]")


def prepare(args: argparse.Namespace) -> bool:
    missing = [n for n in ("XCE_JOB_ID", "XCE_JOB_ATTEMPT", "XCE_JOB_CREDENTIAL", "XCE_LAUNCH_SOCKET")
               if not os.environ.get(n)]
    if missing:
        raise ValueError(f"not inside a job of an XCE worker ({', '.join(missing)} unset)")
    if args.login:
        raise ValueError("-use-login-shell is not in XCE yet")
    words = list(args.cmd)
    if words and words[0] == "--":
        words = words[1:]
    if args.hosts is None:
        if len(words) < 2:
            raise ValueError("usage: blaunch host_name command [argument ...]")
        args.targets, args.task = [words[0]], words[1:]
    else:
        args.targets, args.task = args.hosts.split(), words
    if not args.targets or not args.task:
        raise ValueError("a host and a command are needed")
    return True


def run(client: Client, args: argparse.Namespace) -> int:
    from cli.launch import run_task

    if len(args.targets) == 1:
        return run_task(args.targets[0], args.task)
    codes: list[int] = [0] * len(args.targets)

    def one(i: int, host: str) -> None:
        codes[i] = run_task(host, args.task)

    threads = [threading.Thread(target=one, args=(i, h)) for i, h in enumerate(args.targets)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    sys.stdout.flush()
    return next((code for code in codes if code), 0)


def refused(args: argparse.Namespace, exc: XceError) -> str:
    return f"blaunch: {exc.message}"
