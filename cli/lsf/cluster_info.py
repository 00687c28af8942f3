"""What LSF's information commands print of the cluster: lshosts, lsload, bmgroup, bugroup, bresources,
blimits, bacct (LSF 10.1's columns, from what XCE keeps)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterable

from client.channel import Client, XceError
from xce.printable import shown
from xce.v1 import api_pb2 as api

GETOPT = ("wlhV", "uqP", ())


def declare(p: argparse.ArgumentParser, name: str) -> None:
    p.add_argument("-w", dest="wide", action="store_true", help="wide: names not cut")
    p.add_argument("-l", dest="long", action="store_true", help="long (as the table here)")
    if name == "bacct":
        p.add_argument("-u", dest="user", metavar="user_name|all", help="this user's jobs (default: yours)")
        p.add_argument("-q", dest="queue", metavar="queue_name", help="this queue's jobs")
        p.add_argument("-P", dest="project", metavar="project_name",
                       help="this project's jobs (and its subprojects'), from the jobs' history")
    p.add_argument("names", nargs="*", metavar="name")


def run(client: Client, args: argparse.Namespace) -> int:
    return {"lshosts": _lshosts, "lsload": _lsload, "bmgroup": _bmgroup, "bugroup": _bugroup,
            "bresources": _bresources,
            "blimits": _blimits, "bacct": _bacct}[args.command](client, args)


def _hosts(client: Client, args: argparse.Namespace) -> list[api.Host]:
    hosts = [h for h in client.list_hosts().hosts if not args.names or h.spec.name in args.names]
    return sorted(hosts, key=lambda h: h.spec.name)


def _lshosts(client: Client, args: argparse.Namespace) -> int:
    print("HOST_NAME      type    model  cpuf ncpus maxmem maxswp server RESOURCES")
    for host in _hosts(client, args):
        spec = host.spec
        name = shown(spec.name) if args.wide else shown(spec.name)[:14]
        memory = f"{spec.memory_mb / 1024:.1f}G" if spec.memory_mb else "-"
        resources = " ".join(sorted(spec.tags) + sorted(spec.resources))
        print(f"{name:<14} {'X86_64':<7} {'-':<6} {1.0:>4.1f} {spec.ncpus or spec.slots:>5} {memory:>6} "
              f"{'-':>6} {'Yes':>6} ({shown(resources)})")
    return 0


def _lsload(client: Client, args: argparse.Namespace) -> int:
    print("HOST_NAME       status  r15s   r1m  r15m   ut    pg  ls    it   tmp   swp   mem")
    for host in _hosts(client, args):
        load = host.load
        status = "ok" if host.status == api.HOST_OK else "unavail"
        cells = [f"{load[k]:.1f}" if k in load else "-" for k in ("r15s", "r1m", "r15m")]
        ut = f"{load['ut'] * 100:.0f}%" if "ut" in load else "-"
        mem = f"{load['mem'] / 1024:.1f}G" if "mem" in load else "-"
        name = shown(host.spec.name) if args.wide else shown(host.spec.name)[:15]
        print(f"{name:<15} {status:<7}{cells[0]:>5} {cells[1]:>5} {cells[2]:>5} {ut:>4} {'-':>5} {'-':>3} "
              f"{'-':>5} {'-':>5} {'-':>5} {mem:>5}")
    return 0


def _bmgroup(client: Client, args: argparse.Namespace) -> int:
    return _groups("host", "HOSTS", client.list_hosts().groups, args.names)


def _bugroup(client: Client, args: argparse.Namespace) -> int:
    """LSF's bugroup: each user group and its users ([user_groups], groups inside expanded)."""
    return _groups("user", "USERS", client.list_queues().user_groups, args.names)


def _groups(kind: str, heading: str, groups: Iterable[api.HostGroup | api.UserGroup],
            names: list[str]) -> int:
    """bmgroup's and bugroup's table: each group (those named, or all) and its members."""
    wanted = [g for g in groups if not names or g.name in names]
    if not wanted:
        print(f"No {kind} group found", file=sys.stderr)
        return 255
    print(f"GROUP_NAME    {heading}")
    for group in wanted:
        print(f"{shown(group.name):<13} {' '.join(shown(m) for m in group.members)}")
    return 0


def _bresources(client: Client, args: argparse.Namespace) -> int:
    listed = client.list_hosts()
    if not listed.shared:
        print("No resource found", file=sys.stderr)
        return 255
    print("RESOURCE                TOTAL       RESERVED       LOCATION")
    for resource in listed.shared:
        used = listed.shared_used.get(resource.name, 0)
        print(f"{shown(resource.name):<20}{resource.total:>9.1f}{used:>15.1f}       all")
    return 0


def _blimits(client: Client, args: argparse.Namespace) -> int:
    listed = client.list_queues()
    limits = [limit for limit in listed.limits if not args.names or limit.name in args.names]
    if not limits:
        print("No resource usage found.", file=sys.stderr)
        return 255
    print("INTERNAL RESOURCE LIMITS:\n")
    print(f"    {'NAME':<20}{'USERS':<10}{'QUEUES':<10}{'PROJECTS':<10}{'SLOTS':<12}JOBS")
    for limit in limits:
        held: dict[str, int] = {}
        for counter, amount in listed.limit_used.items():
            _, name, rest = counter.split("/", 2)
            if name == limit.name:
                metric = rest.rpartition("/")[2]
                held[metric] = held.get(metric, 0) + amount

        def who(names: list[str], per: bool) -> str:
            return "-" if not names and not per else ("+".join(names) or "all") + ("/" if per else "")

        slots = f"{held.get('slots', 0)}/{limit.slots}" if limit.slots else "-"
        jobs = f"{held.get('jobs', 0)}/{limit.jobs}" if limit.jobs else "-"
        print(f"    {shown(limit.name):<20}{who(list(limit.users), limit.per_user):<10}"
              f"{who(list(limit.queues), limit.per_queue):<10}"
              f"{who(list(limit.projects), limit.per_project):<10}"
              f"{slots:<12}{jobs}")
    return 0


def _bacct(client: Client, args: argparse.Namespace) -> int:
    user = args.user or client.who_am_i().name
    if args.project:
        totals = [_project_totals(client, user, args.queue or "", args.project)]
    else:
        response = client.accounting(api.AccountingRequest(user="" if user == "all" else user,
                                                           queue=args.queue or ""))
        totals = list(response.totals)
    jobs = sum(t.jobs for t in totals)
    done, exited, started = (sum(t.done for t in totals), sum(t.exited for t in totals),
                             sum(t.started for t in totals))
    cpu_s = sum(t.cpu_ms for t in totals) / 1000
    wait_s = sum(t.wait_ms for t in totals) / 1000
    run_s = sum(t.run_ms for t in totals) / 1000
    print(f"Accounting information about jobs that are: \n  - submitted by users {shown(user)}, \n"
          f"  - accounted on {'project ' + shown(args.project) if args.project else 'all projects'}.\n"
          f"  - completed normally or exited\n"
          f"  - executed on all hosts.\n"
          f"  - submitted to {shown(args.queue) if args.queue else 'all queues'}.\n"
          f"  - accounted on all service classes.\n")
    print("-" * 79 + "\n")
    print("SUMMARY:      ( time unit: second ) ")
    print(f" Total number of done jobs:   {done:>7}      Total number of exited jobs: {exited:>7}")
    print(f" Total CPU time consumed:  {cpu_s:>10.1f}      Average CPU time consumed:  "
          f"{cpu_s / max(jobs, 1):>8.1f}")
    print(f" Average wait time in queue: {wait_s / max(started, 1):>8.1f}")
    print(f" Average turnaround time:    {(wait_s + run_s) / max(started, 1):>8.1f} (seconds/job)")
    print(f" Total run time:           {run_s:>10.1f}      Average run time:        "
          f"{run_s / max(started, 1):>10.1f}")
    print(f" Accounted at {time.strftime('%a %b %e %H:%M:%S %Y')}")
    return 0


def _project_totals(client: Client, user: str, queue: str, project: str) -> api.UsageTotals:
    """The totals of a project's finished jobs (and its subprojects'), added up from their history
    (the cluster keeps its hourly totals by user and queue only)."""
    totals = api.UsageTotals(user=user, queue=queue)
    request = api.HistoryRequest(user="" if user == "all" else user, queue=queue)
    for job in client.history(request):
        mine = job.spec.project or "default"
        if mine != project and not mine.startswith(project + "/"):
            continue
        totals.jobs += 1
        totals.done += job.state == api.DONE
        totals.exited += job.state == api.EXIT
        totals.cpu_ms += round((job.usage.user_cpu_s + job.usage.system_cpu_s) * 1000)
        if job.start_time_ms:
            totals.started += 1
            totals.wait_ms += max(0, job.start_time_ms - job.submit_time_ms)
            totals.run_ms += max(0, job.end_time_ms - job.start_time_ms)
    return totals


def refused(args: argparse.Namespace, exc: XceError) -> str:
    return f"{args.command}: {shown(exc.message)}"
