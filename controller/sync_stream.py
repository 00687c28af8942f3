"""What the Sync stream sends, read from the state tables (no I/O of its own).

Theory of operation: the list-watch model of Kubernetes and etcd. A caller
that knows revision R gets the events after R when the events table still
holds all of them (R + 1 >= the events floor) and it speaks of the same
cluster (and history: a state restored or forced from a survivor has an
incarnation of its own, `stream_id`, so a watcher of the old history whose
revision the new one reaches again still starts over); otherwise a snapshot
of the jobs, queues and hosts tables read in one read transaction at
revision S (and the counters), in chunks of at most CHUNK_BYTES, and
then the events after S. The events table is the buffer: a watcher that
falls behind is never buffered in memory; once the events it needs are
pruned, its stream ends with "resync required" and it asks for a snapshot.
"""

from __future__ import annotations

from collections.abc import Iterator

from controller import fsm
from controller.tables import Tables
from xce.errors import ServiceError
from xce.v1 import log_pb2 as log

SNAPSHOT_TABLES = ("jobs", "queues", "hosts", "counters", "shared", "limits", "share_usage")
CHUNK_BYTES = 256_000  # under the 1 MiB message limit; small, since each stream may hold two
EVENTS_PER_READ = 1000


def stream_id(cluster_id: str, meta: log.Meta) -> str:
    """What a watcher echoes to resume: the cluster id, and the incarnation after a rollback."""
    return f"{cluster_id}@{meta.incarnation}" if meta.incarnation else cluster_id


def events_available(meta: log.Meta, from_revision: int, history: bool = False) -> bool:
    """Every event after from_revision is still in the table (after 0: a history from the first)."""
    return (from_revision > 0 or history) and from_revision <= meta.applied_index and (
        meta.events_floor == 0 or from_revision + 1 >= meta.events_floor)


def compacted(meta: log.Meta, revision: int) -> ServiceError:
    return ServiceError(log.OUT_OF_RANGE, f"resync required: events after {revision} were compacted "
                                          f"(floor {meta.events_floor}: every event from it on is kept)")


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


class SyncFeed:
    """One Sync stream's sequence: nothing or a snapshot first, then the events after.

    `opening` is read once (in one read transaction); `next` is read as the
    log moves and raises OUT_OF_RANGE ("resync required") once an event the
    watcher needs was compacted. The caller sends what they return, and
    progress marks between them.
    """

    def __init__(self, request: log.SyncRequest, cluster_id: str) -> None:
        self.request = request
        self.cluster_id = cluster_id
        self.revision = request.from_revision

    def opening(self, tables: Tables) -> list[log.SyncMessage]:
        return list(self.opening_messages(tables))

    def opening_messages(self, tables: Tables) -> Iterator[log.SyncMessage]:
        """The opening one message at a time, all from `tables` (one read transaction): a stream
        sends each before the next is read, so a snapshot is never held whole (sync_reader.py)."""
        meta = fsm.read_meta(tables)
        ident = stream_id(self.cluster_id, meta)
        if self.request.history:  # a recorder: events only, or nothing
            if not events_available(meta, self.request.from_revision, history=True):
                if self.request.from_revision > meta.applied_index:
                    raise ServiceError(log.OUT_OF_RANGE, f"revision {self.request.from_revision} is ahead "
                                                         f"of this cluster's ({meta.applied_index})")
                floor, start = meta.events_floor, self.request.from_revision
                raise ServiceError(log.OUT_OF_RANGE, f"the events after revision {start} "
                                                     f"are not all kept: the events floor is {floor} (every "
                                                     "event from it on is kept)")
            return
        if self.request.cluster_id == ident and events_available(meta, self.request.from_revision):
            return
        for message in snapshot(tables, ident):
            if message.HasField("snapshot_end"):
                self.revision = message.snapshot_end.revision
            yield message

    def next(self, tables: Tables) -> tuple[list[log.SyncMessage], bool, int]:
        """(messages, whether more are ready at once, the applied revision)."""
        meta = fsm.read_meta(tables)
        history = self.request.history
        if not events_available(meta, self.revision, history) and self.revision < meta.applied_index:
            raise compacted(meta, self.revision)
        events = events_after(tables, self.revision)
        if events:
            self.revision = events[-1].revision
        return [log.SyncMessage(event=e) for e in events], len(events) == EVENTS_PER_READ, meta.applied_index
