"""Deliberate faults, for tests that must show the checks catching them.

`XCE_FAULT=<fault>[,<fault>...]` in one controller's environment builds that
replica's entry handler table (read once, in main, never while applying).
Never set in production; the replica logs a warning when one is on.

- requeue-on-success: a job that finished with exit 0 goes back to PEND
  (attempt + 1), as the seed's duplicate-dispatch bug did: it runs again.
  Set on every replica (the soak's broken build).
- raise-on-entry=KIND: applying an entry of KIND raises, as a bug in apply
  would. Set on one replica, it stops at the first such entry (fail-stop)
  while the others carry on; restarted without the fault it catches up.
- lacks-entry=KIND: this replica's code has no handler for KIND, as a build
  older than KIND would: it does not announce KIND, and it stops if it ever
  meets one (the rolling-upgrade test).
- slow-entry=KIND: every table operation of applying an entry of KIND takes
  1 ms more, as on a loaded machine: a submit of 1,000 jobs takes seconds to
  apply, longer than an election timeout (the test that replicas stay heard
  through a long apply, raft.py). The entry's effect is unchanged.
- member-pause=SECONDS: as leader, this replica waits that long before each
  step of a membership change (membership.py), so that a test can kill it
  between any two steps. Not an entry fault: `member_pause_s` reads it.

Three bugs that only the soak's linearizability check can see (soak/linear/), not entry faults
(`flags` reads them; the soak's tests show the checker finding each):
- stale-reads: any replica answers a read from its own state, leader or not, with no ReadIndex
  (as a follower read without a read barrier would).
- lease-reads: a replica that believes it leads answers reads from its own state without asking a
  majority, and never steps down for want of one (a leader lease honoured after its expiry).
- ack-before-sync: the Raft log is written without fsync (LMDB sync off; the state is always): a
  write is acknowledged before it is on disk, and a power loss of a majority loses it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping

from controller import fsm
from controller.tables import Tables
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

logger = logging.getLogger(__name__)
FAULTS = ("requeue-on-success", "raise-on-entry=KIND", "lacks-entry=KIND", "slow-entry=KIND",
          "member-pause=SECONDS", "stale-reads", "lease-reads", "ack-before-sync")
FLAGS = frozenset({"stale-reads", "lease-reads", "ack-before-sync"})
SLOW_OPERATION_S = 0.001


class FaultError(ValueError):
    pass


def handlers(spec: str) -> Mapping[str, fsm.Handler]:
    """The handler table with the faults of `spec` (XCE_FAULT's value) installed."""
    table = dict(fsm.HANDLERS)
    for fault in filter(None, (part.strip() for part in spec.split(","))):
        name, _, kind = fault.partition("=")
        if name == "requeue-on-success" and not kind:
            for body in ("report", "reports"):
                table[body] = _requeue_on_success(table[body])
        elif name == "raise-on-entry" and kind in table:
            table[kind] = _raiser(fault)
        elif name == "lacks-entry" and kind in table:
            del table[kind]
        elif name == "slow-entry" and kind in table:
            table[kind] = _slowed(table[kind])
        elif name == "member-pause" and _seconds(kind) is not None:
            pass  # the leader's, not apply's (member_pause_s)
        elif name in FLAGS and not kind:
            pass  # the replica's, not apply's (flags)
        else:
            raise FaultError(f"unknown XCE_FAULT {fault!r} (known: {', '.join(FAULTS)}; KIND one of "
                             f"{', '.join(sorted(fsm.HANDLERS))})")
        logger.warning("XCE_FAULT %s: this replica is deliberately broken (tests only)", fault)
    return table


def member_pause_s(spec: str) -> float:
    """The member-pause fault's seconds (0: not set)."""
    for fault in filter(None, (part.strip() for part in spec.split(","))):
        name, _, value = fault.partition("=")
        if name == "member-pause":
            return _seconds(value) or 0.0
    return 0.0


def flags(spec: str) -> frozenset[str]:
    """The faults of `spec` that are not apply's: stale-reads, lease-reads, ack-before-sync."""
    return frozenset(part.strip() for part in spec.split(",")) & FLAGS


def _seconds(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if 0 <= value <= 600 else None


def _raiser(fault: str) -> fsm.Handler:
    def handler(applier: fsm.Applier) -> list[log.Result]:
        raise RuntimeError(f"XCE_FAULT {fault}: a deliberate failure inside apply")

    return handler


def _requeue_on_success(handler: fsm.Handler) -> fsm.Handler:
    def requeue_on_success(applier: fsm.Applier) -> list[log.Result]:
        results = handler(applier)
        entry = applier.entry
        relayed = [entry.report] if entry.WhichOneof("body") == "report" else list(entry.reports.reports)
        for report, result in zip(relayed, results, strict=False):
            job = fsm.read_job(applier.tables, report.report.job_id)
            if result.code == log.OK and job is not None and job.state == api.DONE:
                job.state = api.PEND
                job.attempt += 1
                job.ClearField("host")
                applier.put_job(job)
        return results

    return requeue_on_success


def _slowed(handler: fsm.Handler) -> fsm.Handler:
    def slowed(applier: fsm.Applier) -> list[log.Result]:
        tables = applier.tables
        applier.tables = _SlowTables(tables)
        try:
            return handler(applier)
        finally:
            applier.tables = tables

    return slowed


class _SlowTables:
    def __init__(self, tables: Tables) -> None:
        self._tables = tables

    def get(self, table: str, key: bytes) -> bytes | None:
        time.sleep(SLOW_OPERATION_S)
        return self._tables.get(table, key)

    def put(self, table: str, key: bytes, value: bytes) -> None:
        time.sleep(SLOW_OPERATION_S)
        self._tables.put(table, key, value)

    def delete(self, table: str, key: bytes) -> None:
        time.sleep(SLOW_OPERATION_S)
        self._tables.delete(table, key)

    def first(self, table: str, start: bytes = b"") -> tuple[bytes, bytes] | None:
        return self._tables.first(table, start)

    def scan(self, table: str, start: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        return self._tables.scan(table, start)

    def scan_back(self, table: str, start: bytes) -> Iterator[tuple[bytes, bytes]]:
        return self._tables.scan_back(table, start)
