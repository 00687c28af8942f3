"""The cluster's read commands: `xce queues` (bqueues), `xce fairshare` (bqueues -r), `xce limits`
(blimits), `xce hosts` (bhosts, `-l` in full) and `xce status` (every replica)."""

from __future__ import annotations

import argparse
import time

from cli.output import as_dict, emit, when
from cli.parser import STALE_HELP, UsageError
from client.channel import Client
from xce.printable import shown
from xce.v1 import api_pb2 as api


def _json_and_stale(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the answer as JSON")
    p.add_argument("--stale", action="store_true", help=STALE_HELP)


def declare_queues(p: argparse.ArgumentParser) -> None:
    _json_and_stale(p)


def run_queues(client: Client, args: argparse.Namespace) -> int:
    response = client.list_queues(stale=args.stale)
    return emit(args, lambda: as_dict(response), lambda: _queue_table(response))


def declare_fairshare(p: argparse.ArgumentParser) -> None:
    p.add_argument("queue", nargs="?", help="only this queue")
    _json_and_stale(p)


def declare_limits(p: argparse.ArgumentParser) -> None:
    _json_and_stale(p)


def run_limits(client: Client, args: argparse.Namespace) -> int:
    response = client.list_queues(stale=args.stale, user_bounds=True)
    return emit(args, lambda: {"limits": [as_dict(x) for x in response.limits],
                               "used": dict(response.limit_used),
                               "per_user": as_dict(response.user_bounds)}, lambda: _limit_table(response))


def declare_hosts(p: argparse.ArgumentParser) -> None:
    p.add_argument("-l", "--long", action="store_true",
                   help="each host in full: slots, memory, resources, tags (like bhosts -l)")
    _json_and_stale(p)


def run_hosts(client: Client, args: argparse.Namespace) -> int:
    hosts = client.list_hosts(stale=args.stale)
    return emit(args, lambda: as_dict(hosts), lambda: (_host_details if args.long else _host_table)(hosts))


def declare_status(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the answer as JSON")


def run_status(client: Client, args: argparse.Namespace) -> int:
    status = client.status()
    return emit(args, lambda: as_dict(status), lambda: _status_table(status))


def _queue_table(response: api.ListQueuesResponse) -> None:
    print(f"{'QUEUE_NAME':<16}{'PRIO':>5}  {'STATUS':<15}{'MAX':>6}  PICKER")
    for queue in response.queues:
        default = "  (default)" if queue.name == response.default_queue else ""
        status = f"{'Closed' if queue.closed else 'Open'}:{'Inact' if queue.inactive else 'Active'}"
        limit = str(queue.slot_limit) if queue.slot_limit else "-"
        print(f"{queue.name:<16}{queue.priority:>5}  {status:<15}{limit:>6}  "
              f"{queue.job_pick_plugin or '-'}{default}")


def run_fairshare(client: Client, args: argparse.Namespace) -> int:
    """Each fair-share queue's tree: shares, running slots, recent slots and the priority now."""
    from xce.rules import fairshare

    response = client.list_queues(stale=args.stale)
    queues = [q for q in response.queues if q.HasField("fairshare") and args.queue in (None, q.name)]
    if args.queue and not queues:
        raise UsageError(f"no fair-share queue {args.queue!r} (fairshare in the cluster's file)")
    now = int(time.time() * 1000)
    tables = {}
    for queue in queues:
        usage = {(u.project, u.user): (u.slot_ms, u.stamp_ms) for u in response.share_usage
                 if u.queue == queue.name}
        jobs = client.list_jobs([f"queue:eq:{queue.name}", "state:in:PEND,RUN,USUSP,UNKWN"],
                                stale=args.stale)
        tables[queue.name] = (queue, fairshare.report(queue.fairshare, queue.name, jobs, usage, now))

    def table() -> None:
        for name, (queue, rows) in tables.items():
            half = queue.fairshare.half_life_s or fairshare.DEFAULT_HALF_LIFE_S
            print(f"queue {shown(name)} (picker {shown(queue.job_pick_plugin or '-')}, half-life {half} s)")
            print(f"  {'NODE':<36}{'SHARES':>8}{'RUNNING':>9}{'RECENT':>9}  PRIORITY")
            for path, shares, running, recent, priority in rows:
                depth = path.count("/") + path.count(":")
                label = ("  " * depth + (path.rsplit(":", 1)[-1] if ":" in path else path.rsplit("/", 1)[-1]))
                print(f"  {shown(label):<36}{shares:>8}{running:>9.1f}{recent:>9.2f}  {priority:.4g}")

    return emit(args, lambda: {name: [dict(zip(("node", "shares", "running", "recent", "priority"), row,
                                                strict=True)) for row in rows]
                                for name, (_, rows) in tables.items()}, table)


def _limit_table(response: api.ListQueuesResponse) -> None:
    """Like blimits: per limit and consumer, what is held of each bound; first the bounds on each
    user's submits, and where the caller stands."""
    per_user = response.user_bounds
    if per_user.user:
        exempt = f" (role exempt: {', '.join(per_user.exempt_roles)})" if per_user.exempt else ""
        most = per_user.max_pend_jobs_per_user
        pend = f"{per_user.pending}/{most}" if most else f"{per_user.pending} (no limit)"
        rate = f"{per_user.submit_rate_per_user:g} jobs/s, {per_user.submit_burst_per_user} at once" \
            if per_user.submit_rate_per_user else "no bound"
        print(f"PER USER ([auth] in the cluster file), for {shown(per_user.user)}{exempt}:")
        print(f"  pending jobs     {pend:<24}max_pend_jobs_per_user")
        print(f"  submit rate      {rate:<24}submit_rate_per_user, submit_burst_per_user")
        print(f"  jobs a request   {per_user.max_jobs_per_request:<24}max_jobs_per_request")
        print(f"  array elements   {per_user.max_array_size:<24}max_array_size")
        print()
    if not response.limits:
        print("no limits ([[limits]] in the cluster's file)")
        return
    held: dict[tuple[str, str], dict[str, int]] = {}
    for counter, amount in response.limit_used.items():
        _, name, rest = counter.split("/", 2)
        key, _, metric = rest.rpartition("/")
        held.setdefault((name, key), {})[metric] = amount
    print(f"{'LIMIT':<20}{'CONSUMER':<32}USED/BOUND")
    for limit in response.limits:
        bounds = {"slots": limit.slots, "jobs": limit.jobs, **dict(limit.resources)}
        bounds = {m: b for m, b in bounds.items() if b > 0}
        rows = sorted((key, used) for (name, key), used in held.items() if name == limit.name) \
            or [("all", {})]
        for key, used in rows:
            who = "; ".join(filter(None, [", ".join(_consumer(part) for part in key.split(","))
                                          if key != "all" else "", _scope(limit)])) or "all jobs"
            shown_bounds = "  ".join(f"{m} {used.get(m, 0)}/{b}" for m, b in bounds.items())
            print(f"{shown(limit.name):<20}{shown(who):<32}{shown_bounds}")


def _consumer(part: str) -> str:
    kind, _, value = part.partition("=")
    return f"{ {'u': 'user', 'q': 'queue', 'p': 'project'}.get(kind, kind)} {value}"


def _scope(limit: api.Limit) -> str:
    named = (("users", limit.users), ("queues", limit.queues), ("projects", limit.projects))
    lists = [(w, v) for w, v in named if v]
    return "; ".join(f"{w} {','.join(v)}" for w, v in lists)


def _host_status(host: api.Host) -> str:
    """As bhosts says it: ok, unavail, closed_Adm (by an operator), closed_Full (no slots: MXJ=0)."""
    if host.status == api.HOST_UNAVAIL:
        return "unavail"
    if host.closed:
        return "closed_Adm"
    if host.status == api.HOST_OK and host.spec.slots == 0:
        return "closed_Full"
    return {api.HOST_OK: "ok"}.get(host.status, "?")


def _host_table(response: api.ListHostsResponse) -> None:
    print(f"{'HOST_NAME':<20}{'STATUS':<12}{'MAX':>5}{'USED':>6}{'RUN':>5}{'GEN':>6}  TAGS")
    for host in response.hosts:
        print(f"{host.spec.name:<20}{_host_status(host):<12}{host.spec.slots:>5}{host.slots_used:>6}"
              f"{host.running_jobs:>5}{host.generation:>6}  {','.join(map(shown, host.spec.tags)) or '-'}")


_LOAD_ORDER = ("r15s", "r1m", "r15m", "ut", "pg", "io", "ls", "it", "tmp", "swp", "mem")  # as lsload


def _host_details(response: api.ListHostsResponse) -> None:
    """`xce hosts -l`: what the resource requirement language sees of each host (resreq.py names)."""
    for n, host in enumerate(response.hosts):
        status = _host_status(host)
        since = f", since {when(host.status_time_ms)}" if host.status_time_ms else ""
        resources = " ".join(f"{shown(name)}={value:g}"
                             for name, value in sorted(host.spec.resources.items()))
        print(("\n" if n else "") + f"HOST {shown(host.spec.name)}")
        print(f"  status     {status} (generation {host.generation}{since})")
        print(f"  slots      {host.spec.slots} (used {host.slots_used}, jobs running {host.running_jobs})")
        print(f"  maxmem     {host.spec.memory_mb} MB" if host.spec.memory_mb else "  maxmem     -")
        print(f"  resources  {resources or '-'}")
        if host.reserved:
            reserved = sorted(host.reserved.items())
            print("  reserved   " + " ".join(f"{shown(name)}={amount}" for name, amount in reserved))
        print(f"  tags       {', '.join(shown(t) for t in host.spec.tags) or '-'}")
        if host.load:  # the planner's (select[r1m < 2]), committed every [hosts] load_commit_s at most
            load = " ".join(f"{name}={host.load[name]:g}" for name in _LOAD_ORDER if name in host.load)
            print(f"  load       {load} (at {when(host.load_time_ms)})")
        if host.groups:
            print(f"  groups     {', '.join(shown(g) for g in host.groups)}")
        if host.closed:
            by = f" by {shown(host.closed_by)}" if host.closed_by else ""
            print(f"  closed     {when(host.closed_time_ms)}{by}: {shown(host.closed_reason) or '-'}")
    if response.shared:
        print("\nSHARED RESOURCES")
        for resource in response.shared:
            print(f"  {shown(resource.name):<20} {response.shared_used.get(resource.name, 0)} of "
                  f"{resource.total} in use")


METRICS_ROWS_PER_KIND = 10  # of workers, say: `--json` lists every one


def _metrics_table(status: api.StatusResponse) -> None:
    """Where each daemon serves Prometheus /metrics: the replicas, and the daemons that said so on
    connecting to the leader (schedulers, gateways, workers)."""
    rows = [("replica", str(r.id), r.metrics_address) for r in status.replicas if r.metrics_address]
    shown_of: dict[str, int] = {}
    hidden_of: dict[str, int] = {}
    for daemon in status.daemons:
        if shown_of.get(daemon.kind, 0) < METRICS_ROWS_PER_KIND:
            shown_of[daemon.kind] = shown_of.get(daemon.kind, 0) + 1
            rows.append((daemon.kind, daemon.name, daemon.metrics_address))
        else:
            hidden_of[daemon.kind] = hidden_of.get(daemon.kind, 0) + 1
    if not rows:
        print("metrics: no daemon serves Prometheus metrics")
        return
    print(f"{'METRICS OF':<12}{'NAME':<24}/metrics AT")
    for kind, name, address in rows:
        print(f"{kind:<12}{shown(name):<24}http://{shown(address)}/metrics")
    for kind, hidden in sorted(hidden_of.items()):
        print(f"{kind:<12}and {hidden} more (xce status --json lists them)")


def _status_table(status: api.StatusResponse) -> None:
    print(f"cluster {status.cluster_id}")
    print(f"{'ID':>3}  {'ROLE':<12}{'TERM':>6}{'COMMIT':>9}{'APPLIED':>9}{'PID':>8}  {'GRPC':<22}{'FMT':>4}  "
          "HEALTH")
    for r in status.replicas:
        print(f"{r.id:>3}  {r.role:<12}{r.term:>6}{r.commit_index:>9}{r.applied_index:>9}{r.pid:>8}  "
              f"{r.grpc_address:<22}{r.entry_format or '-':>4}  {r.health}")
    print(f"entry kinds in use past the baseline: {', '.join(status.enabled_entry_kinds) or 'none'}")
    _metrics_table(status)
    recovery = status.recovery
    if recovery.waiting:
        wait = "the fence's wait is over" if recovery.wait_over else \
            f"the fence's wait until {when(recovery.until_ms)}" if recovery.until_ms else "the fence's wait"
        print(f"recovering ({recovery.why}): nothing is dispatched until these hosts joined again or were "
              f"given up: {', '.join(recovery.hosts) or 'none left'}; and {wait}")
    if status.bootstrap:
        # The cluster file is only where a cluster starts: the committed membership wins.
        print("members (committed): " + ", ".join(
            f"{m.id} {api.MemberRole.Name(m.role).removeprefix('MEMBER_').lower()} {m.grpc_address}"
            for m in status.members))
        print("cluster file (bootstrap): " + ", ".join(f"{m.id} {m.grpc_address}" for m in status.bootstrap))
    # During a rolling upgrade: which replicas' code still lacks what others understand.
    known = [set(r.entry_kinds) for r in status.replicas if r.entry_kinds]
    every = set().union(*known) if known else set()
    for r in status.replicas:
        missing = sorted(every - set(r.entry_kinds)) if r.entry_kinds else []
        if missing:
            print(f"replica {r.id} does not understand: {', '.join(missing)}")
