"""Advance reservations, as LSF 10.1's commands handle them: brsvadd, brsvdel, brsvs.

`brsvadd -n slots -m "host ..." -u "user|group ..." -b begin -e end [-N name]`
keeps slots on those hosts (taken in their order) for those users' jobs
(`bsub -U name`) from begin to end; a user group is its members
([user_groups]). The name is `-N`'s, else LSF's `user#N` (the first user,
and the first number free). `brsvdel name ...` deletes; `brsvs` lists them
with what their jobs use. Who may close hosts may make and delete them (LSF:
administrators). xce/rules/reservations.py says how they hold.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from collections import Counter

from cli.lsf import times
from client.channel import Client, XceError
from xce.printable import shown
from xce.rules import reservations
from xce.v1 import api_pb2 as api


def declare(p: argparse.ArgumentParser, name: str) -> None:
    if name == "brsvadd":
        p.add_argument("-n", dest="slots", metavar="job_slots", type=int, required=True,
                       help="the slots kept, taken from the hosts in their order")
        p.add_argument("-m", dest="hosts", metavar='"host_name ..."', required=True, help="the hosts")
        p.add_argument("-u", dest="users", metavar='"user_name | user_group ..."', required=True,
                       help="whose jobs may run in it (bsub -U)")
        p.add_argument("-b", dest="begin", metavar="[[[year:]month:]day:]hour:minute", required=True)
        p.add_argument("-e", dest="end", metavar="[[[year:]month:]day:]hour:minute", required=True)
        p.add_argument("-N", dest="name", metavar="reservation_name", help="its name (else user#N)")
    elif name == "brsvdel":
        p.add_argument("names", nargs="+", metavar="reservation_ID")
    else:
        p.add_argument("-l", dest="long", action="store_true", help="with its jobs")


def prepare(args: argparse.Namespace) -> bool:
    if args.command != "brsvadd":
        for name in getattr(args, "names", ()):
            reservations.check_name(name)
        return True
    if not 1 <= args.slots <= 1 << 30:
        raise ValueError(f"-n {args.slots}: at least one slot")
    if not args.users.split():
        raise ValueError("-u: at least one user or user group")
    if not args.hosts.split():
        raise ValueError("-m: at least one host or host group")
    if args.name:
        reservations.check_name(args.name)
    # Both read as from now (this minute counts), as LSF reads them: an end that comes before the begin
    # is refused, not taken for the next day's.
    now = datetime.datetime.now() - datetime.timedelta(minutes=1)
    args.begin_ms = times.epoch_ms(times.parse(args.begin, now))
    args.end_ms = times.epoch_ms(times.parse(args.end, now))
    if args.end_ms <= args.begin_ms:
        raise ValueError(f"-e {args.end}: the end time must come after the begin time (-b {args.begin})")
    return True


def run(client: Client, args: argparse.Namespace) -> int:
    if args.command == "brsvs":
        return _list(client, args)
    if args.command == "brsvdel":
        for name in args.names:
            client.put_reservation(api.Reservation(name=name), delete=True)
            print(f"Reservation {shown(name)} is being deleted")
        return 0
    groups = {g.name: list(g.members) for g in client.list_queues().user_groups}
    users: list[str] = []
    for name in args.users.split():
        users.extend(groups.get(name, [name]))
    listed = client.list_hosts()
    name = args.name or _next_name(args.users.split()[0], [r.name for r in listed.reservations])
    wanted = api.Reservation(name=name, users=sorted(set(users)), begin_ms=args.begin_ms, end_ms=args.end_ms,
                             hosts=[api.HostSlots(host=h) for h in _hosts(args.hosts, listed)])
    client.put_reservation(wanted, slots=args.slots)
    print(f'Reservation "{shown(name)}" is created')
    return 0


def _hosts(asked: str, listed: api.ListHostsResponse) -> list[str]:
    """-m's names, host groups as their members, each once, in order."""
    groups = {g.name: list(g.members) for g in listed.groups}
    found: list[str] = []
    for name in asked.split():
        for host in groups.get(name, [name]):
            if host not in found:
                found.append(host)
    return found


def _next_name(user: str, taken: list[str]) -> str:
    """LSF's user#N: the first number free (the user's name cut to what a name may hold)."""
    user = "".join(c for c in user if c.isascii() and (c.isalnum() or c in "_-."))[:reservations.MAX_NAME - 6]
    number = 0
    while f"{user}#{number}" in taken:
        number += 1
    return f"{user}#{number}"


def _list(client: Client, args: argparse.Namespace) -> int:
    listed = client.list_hosts()
    if not listed.reservations:
        print("No reservation found", file=sys.stderr)
        return 255
    jobs = [j for j in client.list_jobs() if j.spec.reservation] if args.long else []
    used: Counter[tuple[str, str]] = Counter()
    for host in listed.hosts:
        for name, free in host.rsv_free.items():
            used[(name, host.spec.name)] = -free
    print("RSVID                 TYPE   USER                  NCPUS     RSV_HOSTS              TIME_WINDOW")
    for reservation in listed.reservations:
        parts = [(p.host, p.slots, p.slots + used[(reservation.name, p.host)] if reservation.active else 0)
                 for p in reservation.hosts]
        total = sum(slots for _, slots, _ in parts)
        busy = sum(taken for _, _, taken in parts)
        window = f"{_when(reservation.begin_ms)}-{_when(reservation.end_ms)}"
        users = " ".join(reservation.users) or reservation.owner
        first, *rest = [f"{host}:{taken}/{slots}" for host, slots, taken in parts]
        print(f"{shown(reservation.name):<22}{'user':<7}{shown(users):<22}{f'{busy}/{total}':<10}"
              f"{shown(first):<23}{window}")
        for line in rest:
            print(f"{'':<61}{shown(line)}")
        if args.long:
            _long(reservation, jobs)
    return 0


def _long(reservation: api.Reservation, jobs: list[api.Job]) -> None:
    print(f"Reservation Status: {'Active' if reservation.active else 'Inactive'}")
    print(f"Creator: {shown(reservation.owner)}\nReservation Type: CLOSED")
    mine = [job for job in jobs if job.spec.reservation == reservation.name]
    for label, states in (("PEND", (api.PEND, api.PSUSP)), ("RUN", (api.RUN,)),
                          ("SUSP", (api.USUSP, api.SSUSP))):
        ids = [str(job.id) for job in mine if job.state in states]
        if ids:
            print(f"{label} Jobs: {' '.join(ids)}")
    print()


def _when(ms: int) -> str:
    """LSF's window ends: month/day/hour/minute, local time."""
    try:
        at = datetime.datetime.fromtimestamp(ms / 1000)
    except (ValueError, OverflowError, OSError):  # (apply bounds them; a record from before did not)
        return "-"
    return f"{at.month}/{at.day}/{at.hour}/{at.minute}"


def refused(args: argparse.Namespace, exc: XceError) -> str:
    if exc.code_name == "NOT_FOUND" and args.command == "brsvdel":
        return f"{args.command}: {shown(exc.message)}: Reservation does not exist"
    if exc.code_name == "PERMISSION_DENIED":
        return f"{args.command}: Permission denied: {shown(exc.message)}"
    return f"{args.command}: {shown(exc.message)}"
