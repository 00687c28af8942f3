"""The scheduler's read-only view of the cluster, fed by the Sync stream.

Theory of operation. Every message applies idempotently, so reconnecting any
number of times, to any replica, converges on the committed state (H3):
a snapshot is built aside and swapped in whole at its end (a stream cut in
the middle leaves the old view intact); an event at or below the view's
revision is skipped; an event's changes are upserts (or deletes) by key, so a
host that re-joined with new resources replaces its record (M2) and a job
update lands in place (M4). Pure: no I/O, no clock, no threads.
"""

from __future__ import annotations

import struct
from typing import TypeVar

from google.protobuf.message import Message

from xce import fairshare
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

M = TypeVar("M", bound=Message)
TABLES = ("jobs", "queues", "hosts", "counters", "shared", "limits", "share_usage")


class View:
    def __init__(self) -> None:
        self.revision = 0
        self.cluster_id = ""
        self.tables: dict[str, dict[bytes, bytes]] = {t: {} for t in TABLES}
        self._building: dict[str, dict[bytes, bytes]] | None = None
        self.snapshots = 0  # how many snapshots were swapped in
        self.events = 0     # how many events were applied (skips not counted)
        self.last_kind = ""  # the entry kind of the last event applied
        self._cache: dict[str, dict[bytes, tuple[bytes, Message]]] = {}  # table -> key -> (raw, parsed)

    def sync_request(self) -> log.SyncRequest:
        """Where a (re)connected Sync stream resumes: after this revision, of this cluster."""
        return log.SyncRequest(from_revision=self.revision, cluster_id=self.cluster_id)

    def compacted(self) -> None:
        """The events after the view's revision are gone (OUT_OF_RANGE): start over
        with a snapshot; the old contents stay until it is complete."""
        self.revision = 0

    def apply(self, message: log.SyncMessage) -> None:
        kind = message.WhichOneof("body")
        if kind == "snapshot_begin":
            self._building = {t: {} for t in TABLES}
            self.cluster_id = message.snapshot_begin.cluster_id
        elif kind == "snapshot_chunk" and self._building is not None:
            for record in message.snapshot_chunk.records:
                if record.table in self._building:
                    self._building[record.table][record.key] = record.value
        elif kind == "snapshot_end" and self._building is not None:
            self.tables, self._building = self._building, None
            self.revision = message.snapshot_end.revision
            self.snapshots += 1
        elif kind == "event":
            self._apply_event(message.event)

    def _apply_event(self, event: log.Event) -> None:
        if event.revision <= self.revision:
            return  # already applied: a repeat after a reconnect
        for change in event.changes:
            table = self.tables.get(change.table)
            if table is None:
                continue
            if change.deleted:
                table.pop(change.key, None)
            else:
                table[change.key] = change.value
        self.revision = event.revision
        self.events += 1
        self.last_kind = event.kind

    # -------------------------------------------------------------- reading

    def jobs(self) -> list[api.Job]:
        """Every job, by id. The records are kept parsed between calls (a pass reads them all, and
        few change between passes): read them, never change them."""
        return self._parsed("jobs", api.Job)

    def job(self, job_id: int) -> api.Job | None:
        raw = self.tables["jobs"].get(struct.pack(">Q", job_id))
        return None if raw is None else api.Job.FromString(raw)

    def queues(self) -> list[api.Queue]:
        return [api.Queue.FromString(v) for _, v in sorted(self.tables["queues"].items())]

    def hosts(self) -> list[api.Host]:
        """Every host, by name; kept parsed like jobs()."""
        return self._parsed("hosts", api.Host)

    def _parsed(self, table: str, kind: type[M]) -> list[M]:
        known = self._cache.get(table, {})
        fresh: dict[bytes, tuple[bytes, Message]] = {}
        out: list[M] = []
        for key, raw in sorted(self.tables[table].items()):
            hit = known.get(key)  # the very bytes parsed before: unchanged
            record = hit[1] if hit is not None and hit[0] is raw else kind.FromString(raw)
            fresh[key] = (raw, record)
            out.append(record)  # type: ignore[arg-type]
        self._cache[table] = fresh
        return out

    def counters(self) -> dict[str, int]:
        """Cluster-wide counters in use (xce/feasibility.py), by name."""
        return {k.decode(): struct.unpack(">q", v)[0] for k, v in sorted(self.tables["counters"].items())}

    def shared(self) -> dict[str, int]:
        """Cluster-wide consumables (licenses) and their totals."""
        return {r.name: r.total for r in (api.SharedResource.FromString(v) for _, v in
                                           sorted(self.tables["shared"].items()))}

    def limits(self) -> list[api.Limit]:
        """The configured limits (xce/limits.py), by name."""
        return [api.Limit.FromString(v) for _, v in sorted(self.tables["limits"].items())]

    def share_usage(self) -> dict[str, dict[tuple[str, str], tuple[int, int]]]:
        """Fair-share usage (controller/fsm/shares.py): queue -> (project, user) -> (slot-ms, stamp)."""
        found: dict[str, dict[tuple[str, str], tuple[int, int]]] = {}
        for key, value in sorted(self.tables["share_usage"].items()):
            queue, project, user = fairshare.split_key(key)
            record = api.ShareUsage.FromString(value)
            found.setdefault(queue, {})[(project, user)] = (record.slot_ms, record.stamp_ms)
        return found

    def dump(self) -> bytes:
        """Canonical bytes of the view: equal views, equal bytes."""
        out = bytearray()
        for table in TABLES:
            for key, value in sorted(self.tables[table].items()):
                out += struct.pack(">HII", len(table), len(key), len(value)) + table.encode() + key + value
        return bytes(out)
