"""squeue: the jobs waiting and running, as Slurm 22.05 lists them.

Every user's pending, running and suspended jobs by default (Slurm's);
`-u`, `--me`, `-j`, `-t`, `-p`, `-n` choose; `-o/--format` takes Slurm's %
fields (cli/slurm/job_table.py), `-h` leaves out the header. An array's
elements are listed as jobs of their own (`17_3`) as far as they exist.
"""

from __future__ import annotations

import argparse
import sys

from cli.slurm import formats, job_table
from client.channel import Client, XceError
from xce.printable import shown
from xce.v1 import api_pb2 as api

LIVE = "state:in:PEND,PSUSP,RUN,USUSP,SSUSP,UNKWN"


def declare(p: argparse.ArgumentParser, name: str) -> None:
    p.add_argument("-u", "--user", dest="users", metavar="user_list")
    p.add_argument("--me", dest="me", action="store_true")
    p.add_argument("-j", "--jobs", dest="jobs", metavar="job_id_list")
    p.add_argument("-t", "--states", dest="states", metavar="state_list")
    p.add_argument("-p", "--partition", dest="partitions", metavar="partition_list")
    p.add_argument("-n", "--name", dest="names", metavar="name_list")
    p.add_argument("-o", "--format", dest="format", metavar="format")
    p.add_argument("-h", "--noheader", dest="noheader", action="store_true")
    p.add_argument("-a", "--all", dest="all", action="store_true", help="(every partition: always)")
    p.add_argument("-r", "--array", dest="array", action="store_true", help="(each element: always)")
    p.add_argument("-l", "--long", dest="long", action="store_true")


def states_wanted(text: str | None) -> set[str] | None:
    """-t: Slurm's long or short names, comma-separated (`all`: every one); None: the default."""
    if not text:
        return None
    wanted = set()
    for word in text.upper().split(","):
        if word == "ALL":
            return set(formats.SHORT)
        long = next((name for name, short in formats.SHORT.items() if word in (name, short)), None)
        if long is None:
            raise ValueError(f"Invalid job state specified: {word}")
        wanted.add(long)
    return wanted


def selected(client: Client, args: argparse.Namespace, live_only: bool) -> list[api.Job]:
    """The jobs -u/--me, -j, -p and -n name (arrays' records left out: their elements are the jobs)."""
    filters = [LIVE] if live_only else []
    users = (args.users or "").split(",") if args.users else []
    if args.me:
        users.append(client.who_am_i().name)
    if len(users) == 1:
        filters.append(f"user:eq:{users[0]}")
    if args.jobs:
        jobs = []
        for ref in args.jobs.split(","):
            try:
                jobs.append(client.get_job(ref.replace("_", "[") + "]" if "_" in ref else ref))
            except XceError:
                continue
        found = [j for j in jobs if not live_only or j.state not in (api.DONE, api.EXIT)]
    else:
        found = client.list_jobs(filters)
    partitions = set(args.partitions.split(",")) if args.partitions else None
    names = set(args.names.split(",")) if args.names else None
    return sorted((j for j in found if not j.spec.HasField("array")
                   and (not users or j.spec.user in users)
                   and (partitions is None or j.spec.queue in partitions)
                   and (names is None or j.spec.name in names)), key=lambda j: j.id)


def prepare(args: argparse.Namespace) -> bool:
    args.wanted_states = states_wanted(args.states)
    job_table.squeue_format(args.format or job_table.SQUEUE_DEFAULT)  # a bad one refused here
    return True


def run(client: Client, args: argparse.Namespace) -> int:
    jobs = selected(client, args, live_only=args.wanted_states is None)
    if args.wanted_states is not None:
        jobs = [j for j in jobs if formats.state(j) in args.wanted_states]
    elif args.jobs and not jobs:
        print("slurm_load_jobs error: Invalid job id specified", file=sys.stderr)
        return 1
    fmt = args.format or job_table.SQUEUE_DEFAULT
    for row in job_table.squeue_rows(jobs, fmt, not args.noheader):
        print(shown(row))
    return 0
