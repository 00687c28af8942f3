"""Advance reservations (LSF's brsvadd): slots on hosts kept for some users from a begin to an end.

Theory of operation. A reservation is a committed record (the `reservations`
table) made by `brsvadd -n N -m "h1 h2" -u "alice bob" -b BEGIN -e END`: it
takes N slots from the named hosts in order, each host at most its slots,
and the reservations whose windows overlap on a host may not book more than
the host has. Its window opens and closes by entries: the leader commits a
tick when the next begin or end comes (`next_event_ms`), and apply, at the
tick's time, makes each reservation due active or ends it (`due`).

While it is active, each of its hosts keeps its slots: the host record's
`rsv_free[name]` holds the slots its jobs do not use, and they count in the
host's `slots_used`, so no other job takes them (every check of free slots,
in the planner and at the commit barrier, reads them as used, unchanged). A
job of the reservation (`bsub -U name`) runs only there: on a host of the
reservation, in its free slots, and never more than the host has idle
(`free_in`: a reservation that began on a busy host gets its slots as the
jobs there end). When it ends, what it kept unused is given back; its jobs
still running keep their slots until they end.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from xce.v1 import api_pb2 as api

MAX_NAME = 40
MAX_USERS = 1000
MAX_HOSTS = 10_000
MAX_SPAN_MS = 10 * 365 * 86_400_000  # ten years
MAX_STAMP_MS = 253402300799999  # the end of year 9999 (a job's -b and -t are bounded alike)


class ReservationError(ValueError):
    pass


def check_name(name: str) -> None:
    if not name or len(name) > MAX_NAME or not all(c.isascii() and (c.isalnum() or c in "_-.#")
                                                   for c in name):
        raise ReservationError(f"reservation {name[:80]!r}: a name is letters, digits, _ - . # "
                               f"(1-{MAX_NAME})")


def check(reservation: api.Reservation) -> None:
    """The record's own shape (ReservationError): a name, its hosts once each with slots, a window."""
    check_name(reservation.name)
    if not reservation.hosts:
        raise ReservationError("a reservation keeps slots on at least one host")
    if len(reservation.hosts) > MAX_HOSTS or len(reservation.users) > MAX_USERS:
        raise ReservationError(f"at most {MAX_HOSTS} hosts and {MAX_USERS} users")
    if len({part.host for part in reservation.hosts}) != len(reservation.hosts):
        raise ReservationError("a host appears twice")
    if any(part.slots < 1 for part in reservation.hosts):
        raise ReservationError("each host's part is at least one slot")
    if any(not user or len(user) > 256 or "\0" in user for user in reservation.users):
        raise ReservationError("bad user name")
    if not 0 < reservation.begin_ms < reservation.end_ms <= MAX_STAMP_MS or \
            reservation.end_ms - reservation.begin_ms > MAX_SPAN_MS:
        raise ReservationError("-e: the end comes after the begin (-b), at most ten years later, before "
                               "the year 10000")


def take(slots: int, hosts: Sequence[str], capacity: Mapping[str, int],
         booked: Mapping[str, int]) -> list[api.HostSlots]:
    """brsvadd -n slots -m hosts: the slots taken from the hosts in their order, each at most what it
    has left in the window (`capacity` less `booked` by overlapping reservations); ReservationError
    naming what is short."""
    parts, left = [], slots
    for host in hosts:
        if host not in capacity:
            raise ReservationError(f"-m: no host {host[:80]!r}")
        room = capacity[host] - booked.get(host, 0)
        if left and room > 0:
            parts.append(api.HostSlots(host=host, slots=min(room, left)))
            left -= parts[-1].slots
    if left:
        raise ReservationError(f"-n {slots}: the hosts have {slots - left} slots left in that window "
                               "(others' reservations overlap it)")
    return parts


def booked(reservations: Iterable[api.Reservation], begin_ms: int, end_ms: int) -> dict[str, int]:
    """Slots the reservations whose windows overlap [begin, end) keep on each host."""
    found: dict[str, int] = {}
    for reservation in reservations:
        if reservation.begin_ms < end_ms and begin_ms < reservation.end_ms:
            for part in reservation.hosts:
                found[part.host] = found.get(part.host, 0) + part.slots
    return found


def may_use(reservation: api.Reservation, user: str) -> bool:
    return user in reservation.users if reservation.users else user == reservation.owner


def due(reservation: api.Reservation, now_ms: int) -> str:
    """What a tick at now_ms does to it: "end", "begin", or "" (nothing yet)."""
    if now_ms >= reservation.end_ms:
        return "end"
    if not reservation.active and now_ms >= reservation.begin_ms:
        return "begin"
    return ""


def next_event_ms(reservations: Iterable[api.Reservation]) -> int:
    """The next begin or end among them (0: none)."""
    times = [r.end_ms if r.active else r.begin_ms for r in reservations]
    return min(times, default=0)


def free_in(slots: int, used: int, held: Mapping[str, int], name: str) -> int:
    """What a job of reservation `name` may take on a host: its reservation's free slots there, and
    no more than the host has idle (`used` counts every reservation's free slots as used)."""
    if name not in held:
        return 0
    idle = slots - (used - sum(held.values()))
    return max(0, min(held[name], idle))
