"""bkill, bstop, bresume, brequeue: act on jobs as LSF 10.1 does, one line per job.

Jobs are ids (`17`, an array; `17[3]` one element), or `0` with `-u`, `-q`,
`-J` or `-m` for every job they select; without `0` those options act on
the most recent job they select, as LSF's do. `bkill -s SIG` sends a signal
as far as XCE carries it: KILL, TERM and INT end the job, STOP and CONT are
bstop and bresume; others are refused. Each job gets LSF's line (`Job <17> is
being terminated`, `Job <99>: No matching job found`, `Job <17>: Job has
already finished`); the exit status is 255 if any job failed.
"""

from __future__ import annotations

import argparse
import sys

from cli.lsf import formats
from cli.lsf.bjobs import name_matches
from client.channel import Client, XceError
from xce.printable import shown
from xce.rules import job_groups
from xce.v1 import api_pb2 as api

GETOPT = ("rlh", "suqJmCg", ())
ACTIONS = {"bkill": (api.KILL, "terminated"), "bstop": (api.STOP, "stopped"),
           "bresume": (api.RESUME, "resumed"), "brequeue": (api.REQUEUE, "requeued")}
SIGNALS = {"KILL": "bkill", "TERM": "bkill", "INT": "bkill", "STOP": "bstop", "TSTP": "bstop",
           "CONT": "bresume"}
NUMBERS = {"9": "KILL", "15": "TERM", "2": "INT", "19": "STOP", "20": "TSTP", "18": "CONT"}


def declare(p: argparse.ArgumentParser, name: str) -> None:
    if name == "bkill":
        p.add_argument("-s", dest="signal", metavar="signal_value", help="send this signal instead")
        p.add_argument("-r", dest="remove", action="store_true", help="remove the job (as a kill here)")
        p.add_argument("-l", dest="list_signals", action="store_true", help="the signals -s takes")
        p.add_argument("-C", dest="comment", metavar="kill_reason", help="why (recorded by LSF; not here)")
    p.add_argument("-u", dest="user", metavar="user_name|all", help="this user's jobs")
    p.add_argument("-q", dest="queue", metavar="queue_name", help="jobs of this queue")
    p.add_argument("-J", dest="name", metavar="job_name", help="jobs of this name (* matches any text)")
    p.add_argument("-m", dest="host", metavar="host_name", help="jobs running on this host")
    p.add_argument("-g", dest="group", metavar="job_group_name", help="jobs of this group and those under it")
    p.add_argument("ids", nargs="*", metavar="job_ID", help='job ids, "17[3]", or 0: every job selected')


def prepare(args: argparse.Namespace) -> bool:
    if getattr(args, "list_signals", False):
        print(" ".join(sorted(SIGNALS)))
        return False
    args.action_command = args.command
    signal = getattr(args, "signal", None)
    if signal is not None:
        name = NUMBERS.get(signal, signal.upper().removeprefix("SIG"))
        if name not in SIGNALS:
            raise ValueError(f"-s {signal[:20]}: XCE sends a job KILL, TERM, INT (ending it), STOP or CONT")
        args.action_command = SIGNALS[name]
    if not args.ids and not (args.user or args.queue or args.name or args.host or args.group):
        raise ValueError(f"{args.command}: a job id, 0, or -u/-q/-J/-m/-g is needed")
    return True


def _targets(client: Client, args: argparse.Namespace) -> tuple[list[str], bool]:
    """The job refs to act on, and whether a selection found none."""
    explicit = [ref for ref in args.ids if ref != "0"]
    if explicit and not (args.user or args.queue or args.name or args.host or args.group):
        return explicit, False
    every = "0" in args.ids
    filters = []
    user = args.user or client.who_am_i().name
    if user != "all":
        filters.append(f"user:eq:{user}")
    if args.queue:
        filters.append(f"queue:eq:{args.queue}")
    jobs = [j for j in client.list_jobs(filters)
            if j.state in formats.UNFINISHED and not j.spec.HasField("array")
            and (not args.name or name_matches(args.name, j))
            and (not args.host or j.host == args.host and j.state not in (api.PEND, api.PSUSP))
            and (not args.group or job_groups.within(j.spec.job_group, args.group))
            and (not explicit or formats.job_ref(j) in explicit or str(j.array_id or j.id) in explicit)]
    jobs.sort(key=lambda j: (j.submit_time_ms, j.id))
    if not every and jobs:
        jobs = jobs[-1:]  # LSF: without 0, the most recent job selected
    return [formats.job_ref(j) for j in jobs], not jobs


def run(client: Client, args: argparse.Namespace) -> int:
    action, doing = ACTIONS[args.action_command]
    refs, none = _targets(client, args)
    if none:
        print("No matching job found", file=sys.stderr)
        return 255
    failed = False
    for ref in refs:
        try:
            client.control(ref, action)
        except XceError as exc:
            if exc.code_name in ("UNAVAILABLE", "DEADLINE_EXCEEDED"):
                raise
            failed = True
            print(f"Job <{shown(ref)}>: {formats.refusal_words(exc)}", file=sys.stderr)
            continue
        signaled = getattr(args, "signal", None) is not None
        print(f"Job <{shown(ref)}> is being {'signaled' if signaled else doing}", flush=True)
    return 255 if failed else 0


def refused(args: argparse.Namespace, exc: XceError) -> str:
    return f"{args.command}: {shown(exc.message)}"
