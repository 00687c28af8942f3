"""Advance reservations in the state (entry kind `reservation`, format 24): brsvadd, brsvdel and the ticks.

The `reservations` table maps a name to its api.Reservation. A brsvadd is
checked here, at the entry's time, against the hosts and the reservations
whose windows overlap it (xce/rules/reservations.py: `take`, `booked`); one
whose begin has come is active at once. The leader commits a tick when the
next begin or end comes (`meta.next_reservation_ms`), and the tick's stamp
decides: the reservations due begin (each host keeps its slots: `rsv_free`,
counted in `slots_used`) or end (what they kept unused is given back, and
the record goes). A job of a reservation takes its slots from `rsv_free`
and gives them back there while it is active (controller/fsm/holdings.py).
"""

from __future__ import annotations

from controller.fsm.applier import Applier
from controller.fsm.records import read_host
from controller.fsm.requests import guarded
from controller.tables import Tables
from xce.errors import ServiceError, invalid
from xce.rules import reservations
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

TABLE = "reservations"


def read(tables: Tables, name: str) -> api.Reservation | None:
    raw = tables.get(TABLE, name.encode())
    return None if raw is None else api.Reservation.FromString(raw)


def every(tables: Tables) -> list[api.Reservation]:
    return [api.Reservation.FromString(raw) for _, raw in tables.scan(TABLE)]


def apply_reservation(applier: Applier) -> list[log.Result]:
    request = applier.entry.reservation
    if request.tick:
        _tick(applier)
        return [log.Result(code=log.OK)]

    def body() -> log.Result:
        if request.delete:
            _delete(applier, request.reservation.name)
        else:
            _add(applier, request)
        applier.meta.next_reservation_ms = reservations.next_event_ms(every(applier.tables))
        return log.Result(code=log.OK)

    return [guarded(request.request_id, applier, body)]


def _add(applier: Applier, request: api.PutReservationRequest) -> None:
    wanted = api.Reservation()
    wanted.CopyFrom(request.reservation)
    wanted.owner = applier.entry.by.name or wanted.owner
    wanted.active = False
    wanted.serial = applier.index
    try:
        reservations.check_name(wanted.name)
    except reservations.ReservationError as exc:
        raise invalid(str(exc)) from None
    if read(applier.tables, wanted.name) is not None:
        raise ServiceError(log.ALREADY_EXISTS, f"reservation {wanted.name} exists")
    capacity = {}
    for part in wanted.hosts:
        host = read_host(applier.tables, part.host)
        if host is None:
            raise ServiceError(log.NOT_FOUND, f"-m: no host {part.host[:80]!r}")
        capacity[part.host] = host.spec.slots
    others = reservations.booked(every(applier.tables), wanted.begin_ms, wanted.end_ms)
    try:
        if request.slots:  # -n: taken from the hosts in their order
            parts = reservations.take(request.slots, [p.host for p in wanted.hosts], capacity, others)
            wanted.ClearField("hosts")
            wanted.hosts.extend(parts)
        reservations.check(wanted)
        for part in wanted.hosts:
            if others.get(part.host, 0) + part.slots > capacity[part.host]:
                raise reservations.ReservationError(
                    f"host {part.host} has {capacity[part.host] - others.get(part.host, 0)} slots left in "
                    "that window (others' reservations overlap it)")
    except reservations.ReservationError as exc:
        raise invalid(str(exc)) from None
    if wanted.end_ms <= applier.stamp_ms:
        raise invalid("-e: the reservation would have ended already")
    if reservations.due(wanted, applier.stamp_ms) == "begin":
        _begin(applier, wanted)
    _put(applier, wanted)


def _put(applier: Applier, reservation: api.Reservation) -> None:
    applier.put_raw(TABLE, reservation.name.encode(), reservation.SerializeToString(deterministic=True))


def _delete(applier: Applier, name: str) -> None:
    current = read(applier.tables, name)
    if current is None:
        raise ServiceError(log.NOT_FOUND, f"no reservation {name[:80]!r}")
    if current.active:
        _end(applier, current)
    applier.delete(TABLE, name.encode())


def _tick(applier: Applier) -> None:
    """The reservations due at the entry's time begin or end."""
    now = applier.stamp_ms
    for reservation in every(applier.tables):
        step = reservations.due(reservation, now)
        if step == "begin":
            _begin(applier, reservation)
            _put(applier, reservation)
        elif step == "end":
            if reservation.active:
                _end(applier, reservation)
            applier.delete(TABLE, reservation.name.encode())
    applier.meta.next_reservation_ms = reservations.next_event_ms(every(applier.tables))


def _begin(applier: Applier, reservation: api.Reservation) -> None:
    """Each of its hosts keeps its slots: in rsv_free, and counted in slots_used."""
    reservation.active = True
    for part in reservation.hosts:
        host = read_host(applier.tables, part.host)
        if host is None:  # (hosts are never deleted: a name it was made with has a record)
            continue
        host.rsv_free[reservation.name] = part.slots
        host.slots_used += part.slots
        applier.put_host(host)


def _end(applier: Applier, reservation: api.Reservation) -> None:
    """What it kept unused is given back; its jobs still running keep theirs until they end."""
    for part in reservation.hosts:
        host = read_host(applier.tables, part.host)
        if host is None or reservation.name not in host.rsv_free:
            continue
        host.slots_used -= host.rsv_free[reservation.name]
        del host.rsv_free[reservation.name]
        applier.put_host(host)


def taken(applier: Applier, job: api.Job) -> None:
    """A job placed in its reservation's slots records which reservation it was (its serial)."""
    current = read(applier.tables, job.spec.reservation)
    job.reservation_serial = current.serial if current is not None else 0


def give_back(applier: Applier, job: api.Job, host: api.Host, slots: int) -> int:
    """A job of an active reservation ends on `host`: its slots go back to the reservation it ran in,
    as far as it keeps that many there. One made anew under the same name is another reservation:
    the job's slots go back to the host. What is left over the caller takes off slots_used."""
    name = job.spec.reservation
    current = read(applier.tables, name)
    if current is None or not job.reservation_serial or current.serial != job.reservation_serial:
        return slots
    kept = next((part.slots for part in current.hosts if part.host == host.spec.name), 0)
    back = max(0, min(slots, kept - host.rsv_free[name]))
    host.rsv_free[name] += back
    return slots - back
