"""scancel: cancel or signal jobs, as Slurm 22.05 does: job ids (`17`, an element `17_3`), or every
job of the caller's (or `-u` user's) that `-n`, `-t`, `-p` choose. `-s KILL|TERM|INT` cancels,
`-s STOP` suspends, `-s CONT` resumes; other signals are refused. Silent when it succeeds."""

from __future__ import annotations

import argparse
import sys

from cli.slurm import squeue
from client.channel import Client, XceError
from xce.printable import shown
from xce.v1 import api_pb2 as api

ERRORS = {"NOT_FOUND": "Invalid job id specified", "INVALID_ARGUMENT": "Invalid job id specified",
          "FAILED_PRECONDITION": "Job/step already completing or completed"}
SIGNALS = {"KILL": api.KILL, "TERM": api.KILL, "INT": api.KILL, "9": api.KILL, "15": api.KILL,
           "STOP": api.STOP, "19": api.STOP, "CONT": api.RESUME, "18": api.RESUME}


def declare(p: argparse.ArgumentParser, name: str) -> None:
    p.add_argument("-s", "--signal", dest="signal", metavar="name")
    p.add_argument("-u", "--user", dest="users", metavar="user_name")
    p.add_argument("--me", dest="me", action="store_true")
    p.add_argument("-n", "--name", dest="names", metavar="job_name")
    p.add_argument("-t", "--state", dest="states", metavar="job_state")
    p.add_argument("-p", "--partition", dest="partitions", metavar="partition")
    p.add_argument("-b", "--batch", dest="batch", action="store_true", help="(the whole job: always)")
    p.add_argument("-f", "--full", dest="full", action="store_true", help="(the whole job: always)")
    p.add_argument("-Q", "--quiet", dest="quiet", action="store_true")
    p.add_argument("ids", nargs="*", metavar="job_id[_array_id]")


def prepare(args: argparse.Namespace) -> bool:
    name = (args.signal or "KILL").upper().removeprefix("SIG")
    if name not in SIGNALS:
        raise ValueError(f"Invalid signal name: {args.signal} (XCE sends KILL, TERM, INT, STOP and CONT)")
    args.action = SIGNALS[name]
    if not (args.ids or args.users or args.me or args.names or args.states or args.partitions):
        raise ValueError("No job identification provided")
    args.wanted_states = squeue.states_wanted(args.states)
    return True


def run(client: Client, args: argparse.Namespace) -> int:
    code = 0
    if args.ids:
        refs = [ref.replace("_", "[") + "]" if "_" in ref else ref for ref in args.ids]
    else:
        args.jobs, args.format = None, None
        if not (args.users or args.me):
            args.me = True  # (a filter alone: the caller's own jobs, as Slurm does for a user)
        jobs = squeue.selected(client, args, live_only=True)
        if args.wanted_states is not None:
            from cli.slurm import formats

            jobs = [j for j in jobs if formats.state(j) in args.wanted_states]
        refs = [str(j.id) for j in jobs]
    for ref in refs:
        try:
            client.control(ref, args.action)
        except XceError as exc:
            if not args.quiet:
                words = ERRORS.get(exc.code_name, exc.message)
                print(f"scancel: error: Kill job error on job id {shown(ref)}: {shown(words)}",
                      file=sys.stderr)
            code = 1
    return code
