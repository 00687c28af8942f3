"""What the Sync stream sends, read from the state tables (no I/O of its own).

Theory of operation: the list-watch model of Kubernetes and etcd. A caller
that knows revision R gets the events after R when the events table still
holds all of them (R + 1 >= the events floor) and it speaks of the same
cluster; otherwise a snapshot of the jobs, queues and hosts tables read in
one read transaction at revision S, in chunks of at most CHUNK_BYTES, and
then the events after S. The events table is the buffer: a watcher that
falls behind is never buffered in memory; once the events it needs are
pruned, its stream ends with "resync required" and it asks for a snapshot.
"""

from __future__ import annotations

from collections.abc import Iterator

from controller import fsm
from controller.tables import Tables
from xce.v1 import log_pb2 as log

SNAPSHOT_TABLES = ("jobs", "queues", "hosts")
CHUNK_BYTES = 900_000  # under the 1 MiB message limit, with room for framing
EVENTS_PER_READ = 1000


def events_available(meta: log.Meta, from_revision: int) -> bool:
    """Every event after from_revision is still in the table."""
    return 0 < from_revision <= meta.applied_index and (
        meta.events_floor == 0 or from_revision + 1 >= meta.events_floor)


def snapshot(tables: Tables, cluster_id: str) -> Iterator[log.SyncMessage]:
    """Begin, chunks, end: everything at the revision of this read."""
    revision = fsm.read_meta(tables).applied_index
    yield log.SyncMessage(snapshot_begin=log.SnapshotBegin(revision=revision, cluster_id=cluster_id))
    chunk = log.SnapshotChunk()
    size = 0
    for table in SNAPSHOT_TABLES:
        for key, value in tables.scan(table):
            record = log.Change(table=table, key=key, value=value)
            if size + record.ByteSize() > CHUNK_BYTES and chunk.records:
                yield log.SyncMessage(snapshot_chunk=chunk)
                chunk, size = log.SnapshotChunk(), 0
            chunk.records.append(record)
            size += record.ByteSize() + 8
    if chunk.records:
        yield log.SyncMessage(snapshot_chunk=chunk)
    yield log.SyncMessage(snapshot_end=log.SnapshotEnd(revision=revision))


def events_after(tables: Tables, revision: int, limit: int = EVENTS_PER_READ) -> list[log.Event]:
    events = []
    for _, raw in tables.scan("events", fsm.revision_key(revision + 1)):
        events.append(log.Event.FromString(raw))
        if len(events) >= limit:
            break
    return events
