"""sacct: jobs' accounting as Slurm 22.05 prints it, from the live jobs and the replicated history.

The caller's jobs (`-u`, `-a` all users') submitted since midnight (`-S`, `-E`
move the window; `-j` names jobs whatever their time), `--name`, `-s`
states, `-r` partitions; `--format`/`-o` fields (cli/slurm/job_table.py),
`-P/--parsable2` (`|` between fields), `-p/--parsable` (and after the last),
`-n/--noheader`, `-X` (a job's allocation alone: XCE's jobs have no steps, so
always; `-j 17.0` names a step: none), `--json` (cli/slurm/json_out.py). An
array's elements are listed each, and its rest as `12_[5-100]`
(cli/slurm/array_rest.py). SACCT_FORMAT is `-o`'s default. Times are local,
as Slurm's.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import time

from cli.slurm import array_rest, formats, job_table, json_out, squeue
from client.channel import Client
from xce.printable import shown
from xce.v1 import api_pb2 as api


def declare(p: argparse.ArgumentParser, name: str) -> None:
    p.add_argument("-j", "--jobs", dest="jobs", metavar="job(.step)", action="append")
    p.add_argument("-o", "--format", dest="format", metavar="field[%width],...", action="append")
    p.add_argument("-u", "--user", dest="users", metavar="user_list")
    p.add_argument("-a", "--allusers", dest="all_users", action="store_true")
    p.add_argument("-S", "--starttime", dest="start", metavar="time")
    p.add_argument("-E", "--endtime", dest="end", metavar="time")
    p.add_argument("-s", "--state", dest="states", metavar="state_list")
    p.add_argument("-r", "--partition", dest="partitions", metavar="partition_list")
    p.add_argument("--name", dest="names", metavar="jobname_list", action="append")
    p.add_argument("-P", "--parsable2", dest="parsable2", action="store_true")
    p.add_argument("-p", "--parsable", dest="parsable", action="store_true")
    p.add_argument("-n", "--noheader", dest="noheader", action="store_true")
    p.add_argument("-X", "--allocations", dest="allocations", action="store_true")
    p.add_argument("-b", "--brief", dest="brief", action="store_true")
    p.add_argument("-M", "--clusters", dest="clusters", metavar="cluster_list",
                   help="(XCE's cluster is the one there is: `all` and its name are it)")
    p.add_argument("-L", "--allclusters", dest="all_clusters", action="store_true", help="(the one there is)")
    p.add_argument("--json", dest="json", action="store_true", help="Slurm 22.05's JSON (openapi dbv0.0.38)")


def window_ms(text: str | None, now: datetime.datetime, default: datetime.datetime) -> int:
    """-S/-E: YYYY-MM-DD[THH:MM[:SS]], MM/DD[/YY], HH:MM[:SS], now[-N[units]]; the default if none."""
    if not text:
        return int(default.timestamp() * 1000)
    text = text.strip()
    try:
        if text.startswith("now"):
            rest = text[3:]
            seconds = 0
            if rest:
                found = re.fullmatch(r"-(\d+)(seconds|minutes|hours|days|weeks)?", rest)
                if found is None:
                    raise ValueError(text)
                seconds = int(found[1]) * {"seconds": 1, "minutes": 60, "hours": 3600, "days": 86_400,
                                           "weeks": 604_800}[found[2] or "seconds"]
            when = now - datetime.timedelta(seconds=seconds)
        elif "/" in text:
            parts = [int(p) for p in text.split("/")]
            year = (2000 + parts[2] if parts[2] < 100 else parts[2]) if len(parts) == 3 else now.year
            when = datetime.datetime(year, parts[0], parts[1])
        elif ":" in text and "-" not in text:
            parts = [int(p) for p in text.split(":")]
            when = now.replace(hour=parts[0], minute=parts[1], second=parts[2] if len(parts) > 2 else 0,
                               microsecond=0)
        else:
            when = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"Invalid time specification (pos=0): {text[:40]}") from None
    return int(when.timestamp() * 1000)


def prepare(args: argparse.Namespace) -> bool:
    """SACCT_FORMAT is -o's default, as Slurm reads it."""
    default = os.environ.get("SACCT_FORMAT") or job_table.SACCT_DEFAULT
    args.fields = job_table.sacct_fields(",".join(args.format or [default]))
    args.jobs = ",".join(args.jobs) if args.jobs else None  # (each -j adds to the list, as Slurm's)
    args.names = ",".join(args.names) if args.names else None
    args.wanted_states = squeue.states_wanted(args.states)
    now = datetime.datetime.now()
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    args.start_ms = window_ms(args.start, now, midnight)
    args.end_ms = window_ms(args.end, now, now + datetime.timedelta(days=1))
    return True


def _jobs(client: Client, args: argparse.Namespace) -> list[api.Job]:
    if args.jobs:  # (a step, 17.0 or 17.batch: none; XCE's jobs have no steps)
        refs = ",".join(ref for ref in args.jobs.split(",") if "." not in ref)
        return squeue.by_ids(client, refs, history=True) if refs else []
    user = "" if args.all_users else (args.users or client.who_am_i().name)
    filters = [f"user:eq:{user}"] if user and "," not in user else []
    live = client.list_jobs(filters)
    seen = {j.id for j in live}
    history = client.history(api.HistoryRequest(user=user if "," not in user else ""))
    jobs = [*live, *(j for j in history if j.id not in seen)]
    jobs += [line for j in live if j.spec.HasField("array") and not j.array_id for line in array_rest.rest(j)]
    users = set(user.split(",")) if user else None
    now = int(time.time() * 1000)
    # Active in the window: submitted before its end, and not ended before its start (Slurm's rule).
    return [j for j in jobs if (users is None or j.spec.user in users)
            and args.start_ms <= (j.end_time_ms if j.state in (api.DONE, api.EXIT) and j.end_time_ms else now)
            and j.submit_time_ms <= args.end_ms]


def run(client: Client, args: argparse.Namespace) -> int:
    partitions = set(args.partitions.split(",")) if args.partitions else None
    names = set(args.names.split(",")) if args.names else None
    jobs = sorted((j for j in _jobs(client, args) if (not j.spec.HasField("array") or array_rest.is_rest(j))
                   and (partitions is None or j.spec.queue in partitions)
                   and (names is None or formats.name(j) in names)
                   and (args.wanted_states is None or formats.state(j) in args.wanted_states)),
                  key=squeue.order)
    now = int(time.time() * 1000)
    if args.json:
        print(json_out.document(json_out.SACCT_PLUGIN, [json_out.sacct_job(j, now) for j in jobs]))
        return 0
    fields = args.fields
    if args.parsable2 or args.parsable:
        tail = "|" if args.parsable and not args.parsable2 else ""
        if not args.noheader:
            print("|".join(name for name, _, _ in fields) + tail)
        for job in jobs:
            print(shown("|".join(job_table.SACCT[name](job, now) for name, _, _ in fields) + tail))
        return 0
    if not args.noheader:  # (each cell followed by a space, as Slurm's print_fields)
        print("".join(job_table.sacct_cell(name, width, left) + " " for name, width, left in fields))
        print("".join("-" * width + " " for _, width, _ in fields))
    for job in jobs:
        print(shown("".join(job_table.sacct_cell(job_table.SACCT[name](job, now), width, left) + " "
                            for name, width, left in fields)))
    return 0
