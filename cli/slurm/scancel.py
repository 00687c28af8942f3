"""scancel: cancel or signal jobs, as Slurm 22.05 does: job ids (`17`, an element `17_3`), or every
job of the caller's (or `-u` user's) that `-n`, `-t`, `-p` choose. `-s KILL|TERM|INT` cancels,
`-s STOP` suspends, `-s CONT` resumes; other signals are refused. Silent when it succeeds; and, as
Slurm 22.05's, when a job to KILL (the default) is unknown or has ended already (rc 0): those are said
with `-v` alone ("scancel: Terminating job N" first), every other failure always (rc 1)."""

from __future__ import annotations

import argparse
import re
import sys

from cli.slurm import squeue
from client.channel import Client, XceError
from xce.printable import shown
from xce.v1 import api_pb2 as api

ERRORS = {"NOT_FOUND": "Invalid job id specified", "INVALID_ARGUMENT": "Invalid job id specified",
          "PERMISSION_DENIED": "Access/permission denied"}
ENDED = "Job/step already completing or completed"  # (Slurm's ESLURM_ALREADY_DONE)
SIGNALS = {"KILL": api.KILL, "TERM": api.KILL, "INT": api.KILL, "9": api.KILL, "15": api.KILL,
           "STOP": api.STOP, "19": api.STOP, "CONT": api.RESUME, "18": api.RESUME}
NUMBERS = {"KILL": 9, "TERM": 15, "INT": 2, "STOP": 19, "CONT": 18}
# A job id as Slurm's scancel reads one (17, 17_3, 17_[1-3], 17.0, 17+1); another word is refused.
JOB_ID = re.compile(r"\d+(?:_(?:\d+|\[[\d,%-]+\]))?(?:\.(?:\d+|batch|extern))?(?:\+\d+)?")


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
    p.add_argument("-v", "--verbose", dest="verbose", action="count", default=0)
    p.add_argument("ids", nargs="*", metavar="job_id[_array_id]")


def prepare(args: argparse.Namespace) -> bool:
    name = (args.signal or "KILL").upper().removeprefix("SIG")
    if name not in SIGNALS:
        raise ValueError(f"Invalid signal name: {args.signal} (XCE sends KILL, TERM, INT, STOP and CONT)")
    args.action = SIGNALS[name]
    args.number = NUMBERS.get(name, int(name) if name.isdecimal() else 9)
    bad = next((ref for ref in args.ids if not JOB_ID.fullmatch(ref)), None)
    if bad is not None:
        raise ValueError(f"Invalid job id {bad}")
    if not (args.ids or args.users or args.me or args.names or args.states or args.partitions):
        raise ValueError("No job identification provided")
    args.wanted_states = squeue.states_wanted(args.states)
    return True


def run(client: Client, args: argparse.Namespace) -> int:
    code = 0
    if args.ids:
        refs = list(args.ids)
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
        if args.verbose:
            said = "Terminating job" if args.number == 9 else f"Signal {args.number} to job"
            print(f"scancel: {said} {shown(ref)}", file=sys.stderr)
        try:
            client.control(ref.replace("_", "[") + "]" if "_" in ref else ref, args.action)
        except XceError as exc:
            words = words_of(exc)
            # Slurm 22.05 (scancel.c): a KILL of a job unknown or ended is no failure, said with -v alone.
            ignored = args.number == 9 and words in (ERRORS["NOT_FOUND"], ENDED)
            if not args.quiet and (args.verbose or not ignored):
                print(f"scancel: error: Kill job error on job id {shown(ref)}: {shown(words)}",
                      file=sys.stderr)
            code = code if ignored else 1
    return code


def words_of(exc: XceError) -> str:
    """Slurm's words for XCE's refusal: an unknown id, a job that has ended ("cannot kill job 9 in state
    DONE"), one that is not running yet (STOP of a pending job), permission; else XCE's own."""
    if exc.code_name == "FAILED_PRECONDITION":
        state = exc.message.rpartition(" in state ")[2]
        being_killed = state in ("RUN", "USUSP", "SSUSP", "UNKWN") and " kill " in exc.message
        if state in ("DONE", "EXIT") or being_killed:
            return ENDED  # (ended, or being killed already: Slurm's completing)
        if state in ("PEND", "PSUSP"):
            return "Job is pending execution"
        return exc.message
    return ERRORS.get(exc.code_name, exc.message)
