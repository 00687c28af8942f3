"""squeue: the jobs waiting and running, as Slurm 22.05 lists them.

Every user's pending, running and suspended jobs by default (Slurm's);
`-u`, `--me`, `-j`, `-t`, `-p`, `-n` choose; `-o/--format` takes Slurm's %
fields, `-O/--Format` its names (cli/slurm/job_table.py), `--json` its JSON
(cli/slurm/json_out.py); `-h` leaves out the header. An array's elements
that are jobs are listed as jobs of their own (`17_3`), its rest as one
line (`17_[5-100%5]`: cli/slurm/array_rest.py). In Slurm's default order
(`P,t,-p`: partition, state, priority; slurm_order).
"""

from __future__ import annotations

import argparse
import os
import sys

from cli.slurm import array_rest, formats, job_table, json_out
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
    p.add_argument("-O", "--Format", dest="named_format", metavar="field[:[.]size[suffix]],...")
    p.add_argument("--json", dest="json", action="store_true", help="Slurm 22.05's JSON (openapi v0.0.38)")
    p.add_argument("-M", "--clusters", dest="clusters", metavar="cluster_list",
                   help="(XCE's cluster is the one there is)")


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


def by_ids(client: Client, refs: str, history: bool = False) -> list[api.Job]:
    """The jobs `-j` names: a job, an element (`17_3`), or an array (`17`: its elements that are jobs,
    and a line for its rest: cli/slurm/array_rest.py); `history` (sacct): its elements that left the
    live tables too. An id that names none is left out."""
    jobs = []
    for ref in refs.split(","):
        ref = ref.strip().split(".", 1)[0]
        try:
            job = client.get_job(ref.replace("_", "[") + "]" if "_" in ref else ref)
        except XceError:
            continue
        if job.spec.HasField("array") and not job.array_id:
            jobs += array_members(client, job, history)
        else:
            jobs.append(job)
    return jobs


def array_members(client: Client, record: api.Job, history: bool) -> list[api.Job]:
    """An array's elements that are jobs, and lines for its rest."""
    elements = client.list_jobs([f"array:eq:{record.id}"])
    if history and len(elements) < record.array.materialized:  # some left the live tables
        seen = {j.id for j in elements}
        elements += [j for j in client.history(api.HistoryRequest(user=record.spec.user))
                     if j.array_id == record.id and j.id not in seen]
    return [*elements, *array_rest.rest(record)]


def selected(client: Client, args: argparse.Namespace, live_only: bool) -> list[api.Job]:
    """The jobs -u/--me, -j, -p and -n name: an array's elements as jobs of their own, its rest (the
    elements not yet jobs) as one line."""
    filters = [LIVE] if live_only else []
    users = (args.users or "").split(",") if args.users else []
    if args.me:
        users.append(client.who_am_i().name)
    if len(users) == 1:
        filters.append(f"user:eq:{users[0]}")
    if args.jobs:
        found = [j for j in by_ids(client, args.jobs) if not live_only or j.state not in (api.DONE, api.EXIT)]
    else:
        found = []
        for job in client.list_jobs(filters):
            found += array_rest.rest(job) if job.spec.HasField("array") and not job.array_id else [job]
        if live_only:
            found = [j for j in found if j.state not in (api.DONE, api.EXIT)]
    partitions = set(args.partitions.split(",")) if args.partitions else None
    names = set(args.names.split(",")) if args.names else None
    return sorted((j for j in found if (not j.spec.HasField("array") or array_rest.is_rest(j))
                   and (not users or j.spec.user in users)
                   and (partitions is None or j.spec.queue in partitions)
                   and (names is None or formats.name(j) in names)), key=order)


def slurm_order(jobs: list[api.Job]) -> list[api.Job]:
    """squeue's default order, Slurm's `P,t,-p`: by partition, by the state's short name (CA, CD, F, PD,
    R, ...: pending before running), by priority, highest first (a held job's is Slurm's 0: after the
    others); jobs alike by id (`order`: an array's elements by index)."""
    return sorted(sorted(jobs, key=order), key=lambda j: (j.spec.queue, formats.short_state(j),
                                                           formats.held(j), -formats.priority(j)))


def order(job: api.Job) -> tuple[int, int, int]:
    """By id; an array's elements by index after its id, its rest last."""
    if job.array_id:
        return job.array_id, 1, job.array_index if job.array_index >= 0 else 1 << 62
    return job.id, 0, 0


def prepare(args: argparse.Namespace) -> bool:
    """The input variables as Slurm reads them (under the command line): SQUEUE_FORMAT (-o),
    SQUEUE_FORMAT2 (-O; -o's wins when both are set), SQUEUE_USERS, SQUEUE_STATES,
    SQUEUE_PARTITION; a bad format is refused here."""
    environ = os.environ
    if args.format is None and args.named_format is None:
        args.format = environ.get("SQUEUE_FORMAT") or None
        args.named_format = None if args.format else environ.get("SQUEUE_FORMAT2") or None
    args.users = args.users or environ.get("SQUEUE_USERS") or None
    args.states = args.states or environ.get("SQUEUE_STATES") or None
    args.partitions = args.partitions or environ.get("SQUEUE_PARTITION") or None
    args.wanted_states = states_wanted(args.states)
    if args.format is not None or args.named_format is None:
        job_table.squeue_format(args.format or job_table.SQUEUE_DEFAULT)
    else:
        job_table.squeue_named_format(args.named_format)
    return True


def run(client: Client, args: argparse.Namespace) -> int:
    jobs = selected(client, args, live_only=args.wanted_states is None)
    if args.wanted_states is not None:
        jobs = [j for j in jobs if formats.state(j) in args.wanted_states]
    elif args.jobs and not jobs:
        print("slurm_load_jobs error: Invalid job id specified", file=sys.stderr)
        return 1
    jobs = slurm_order(jobs)
    if args.json:
        print(json_out.document(json_out.SQUEUE_PLUGIN, [json_out.squeue_job(j) for j in jobs]))
        return 0
    named = args.format is None and args.named_format is not None
    fmt = args.named_format if named else args.format or job_table.SQUEUE_DEFAULT
    for row in job_table.squeue_rows(jobs, fmt, not args.noheader, named):
        print(shown(row))
    return 0
