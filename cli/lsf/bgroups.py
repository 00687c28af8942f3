"""Job groups, as LSF 10.1's commands handle them: bgadd, bgmod, bgdel, bjgroup.

`bgadd [-L limit] /group` makes a group with a limit on its running jobs
(its subgroups' included: xce/rules/job_groups.py), `bgmod -L limit | -Ln
/group` changes it, `bgdel /group` deletes it (its owner, or who may control
every job); `bsub -g /group` puts a job in a group, which needs no bgadd
unless it is to be limited. `bjgroup` lists the groups with a limit and those
that jobs name, with their jobs by state (`-s`: the group alone, not its
subgroups' jobs).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter

from client.channel import Client, XceError
from xce.printable import shown
from xce.rules import job_groups
from xce.v1 import api_pb2 as api

GETOPT = ("sh", "L", ("-Ln",))


def declare(p: argparse.ArgumentParser, name: str) -> None:
    if name in ("bgadd", "bgmod"):
        p.add_argument("-L", dest="limit", metavar="limit", type=int, help="running jobs at most")
    if name == "bgmod":
        p.add_argument("-Ln", dest="no_limit", action="store_true", help="no limit")
    if name == "bjgroup":
        p.add_argument("-s", dest="alone", action="store_true", help="each group's own jobs only")
        p.add_argument("paths", nargs="*", metavar="/job_group_name")
    else:
        p.add_argument("path", metavar="/job_group_name")


def prepare(args: argparse.Namespace) -> bool:
    for path in [args.path] if hasattr(args, "path") else args.paths:
        job_groups.check_path(path)
    if args.command == "bgmod" and args.limit is None and not args.no_limit:
        raise ValueError("bgmod: -L limit or -Ln")
    if getattr(args, "limit", None) is not None and not 0 <= args.limit <= job_groups.MAX_LIMIT:
        raise ValueError(f"-L {args.limit}: from 0 to {job_groups.MAX_LIMIT}")
    return True


def run(client: Client, args: argparse.Namespace) -> int:
    if args.command == "bjgroup":
        return _list(client, args)
    if args.command == "bgadd":
        client.put_job_group(args.path, args.limit or 0, create=True)
        print(f"Job group {shown(args.path)} was added.")
    elif args.command == "bgmod":
        client.put_job_group(args.path, 0 if args.no_limit else args.limit)
        print(f"Job group {shown(args.path)} was modified.")
    else:
        client.put_job_group(args.path, delete=True)
        print(f"Job group {shown(args.path)} was deleted.")
    return 0


def _list(client: Client, args: argparse.Namespace) -> int:
    listed = client.list_queues()
    limits = {limit.groups[0]: limit for limit in listed.limits if job_groups.is_group_limit(limit)}
    by_name = {limit.name: path for path, limit in limits.items()}
    held: dict[str, int] = {}
    for counter, amount in listed.limit_used.items():  # limit/<name>/<key>/<metric>
        _, name, rest = counter.split("/", 2)
        if name in by_name and rest.endswith("/jobs"):
            held[by_name[name]] = held.get(by_name[name], 0) + amount
    jobs = [j for j in client.list_jobs() if j.spec.job_group and not j.spec.HasField("array")]
    paths = set(limits) | {j.spec.job_group for j in jobs}
    wanted = sorted(p for p in paths if not args.paths or any(job_groups.within(p, w) for w in args.paths))
    if not wanted:
        print("No job group found", file=sys.stderr)
        return 255
    print("GROUP_NAME     NJOBS   PEND    RUN   SSUSP  USUSP  FINISH       SLA   JLIMIT  OWNER")
    for path in wanted:
        counts = Counter(api.JobState.Name(j.state) for j in jobs if _of(j, path, args.alone))
        limit = limits.get(path)
        jlimit = f"{held.get(path, 0)}/{limit.jobs}" if limit is not None and limit.jobs else "-"
        owner = limit.owner if limit is not None else "-"
        finished = counts["DONE"] + counts["EXIT"]
        print(f"{shown(path):<14}{sum(counts.values()):>6}{counts['PEND'] + counts['PSUSP']:>7}"
              f"{counts['RUN']:>7}{counts['SSUSP']:>8}{counts['USUSP']:>7}{finished:>8}{'()':>10}"
              f"{jlimit:>9}  {shown(owner)}")
    return 0


def _of(job: api.Job, path: str, alone: bool) -> bool:
    group = job.spec.job_group
    return group == path if alone else job_groups.within(group, path)


def refused(args: argparse.Namespace, exc: XceError) -> str:
    path = getattr(args, "path", "")
    if exc.code_name == "NOT_FOUND":
        return f"Job group {shown(path)} does not exist"
    if exc.code_name == "ALREADY_EXISTS":
        return f"Job group {shown(path)} already exists"
    return f"{args.command}: {shown(exc.message)}"
