"""Bounded history: old events and remembered request ids are pruned as entries apply.

The events table keeps the last `events_kept` events (default EVENTS_KEPT),
and at most EVENTS_MAX_BYTES; request ids are remembered for
REQUEST_RETENTION_MS of proposer time. Each apply prunes at most
PRUNE_PER_APPLY of each, so no entry is slow to apply.
"""

from __future__ import annotations

import struct

from controller.tables import Tables
from xce.v1 import log_pb2 as log

# How many events the resync stream can replay; older ones are dropped and
# the floor moves up (a scheduler further behind gets a full snapshot).
EVENTS_KEPT = 100_000
EVENTS_MAX_BYTES = 64 << 20  # whichever bound is hit first
# Request ids are remembered this long (by proposer time) to dedupe retries.
REQUEST_RETENTION_MS = 24 * 3600 * 1000
# Bound on the clean-up work one apply does, so no entry is slow to apply.
PRUNE_PER_APPLY = 256


def prune_events(tables: Tables, index: int, meta: log.Meta) -> int:
    """Drop the oldest events past either bound; return the new floor: the revision after
    the newest event ever dropped (0: none yet), so every event at or above it is kept.
    Not the oldest revision kept: a revision with no event (a Raft no-op, at each
    election) lies between them, and a watcher right before it has lost nothing."""
    cutoff = index - (meta.events_kept or EVENTS_KEPT)
    floor = meta.events_floor
    for _ in range(PRUNE_PER_APPLY):  # the oldest, while it is too old (most entries: one, or none)
        oldest = tables.first("events")
        if oldest is None:
            break
        key, value = oldest
        revision = struct.unpack(">Q", key)[0]
        if not (revision <= cutoff or (meta.events_bytes > EVENTS_MAX_BYTES and revision < index)):
            break
        tables.delete("events", key)
        floor = revision + 1
        meta.events_bytes -= len(value)
    return floor


def prune_requests(tables: Tables, stamp_ms: int) -> None:
    cutoff = stamp_ms - REQUEST_RETENTION_MS
    for _ in range(PRUNE_PER_APPLY):  # the oldest, while it is past the retention
        oldest = tables.first("request_expiry")
        if oldest is None or struct.unpack(">q", oldest[0][:8])[0] >= cutoff:
            break
        key = oldest[0]
        tables.delete("request_expiry", key)
        request_id = key[8:]
        raw = tables.get("requests", request_id)
        if raw is not None and log.Result.FromString(raw).stamp_ms < cutoff:
            tables.delete("requests", request_id)
