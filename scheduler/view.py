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

import bisect
import copy
import struct
from collections import Counter
from collections.abc import Callable, Mapping

from google.protobuf.message import Message

from scheduler.core import WAITING
from scheduler.host_index import MOVING_ALWAYS, Entry, Fleet, free_entry
from scheduler.job_digest import Digests
from xce.rules import fairshare, feasibility
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

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
        self._jobs_written: list[tuple[bytes, bytes]] | None = None  # (apply_event's `jobs`)
        # jobs, hosts and queues kept parsed, in key order, between reads: only what changed is parsed again
        self._digests = Digests()  # of the waiting jobs, made as their records are parsed (digests())
        self._parsed_tables = {"jobs": _Parsed(api.Job, waits, digests=self._digests),
                               "hosts": _Parsed(api.Host, touches=True), "queues": _Parsed(api.Queue)}
        self._fleet: Fleet | None = None  # what a pass makes of the hosts, as the view has them
        # ... its states and its free entries, updated in place
        self._states: dict[str, feasibility.HostState] = {}
        self._free: list[Entry] = []
        self._made_of: dict[str, api.Host] = {}  # the record each state was made of
        self._totals: Counter[str] = Counter()  # consumables' names: on how many hosts

    def __deepcopy__(self, memo: dict[int, object]) -> View:
        """The rows and where the view stands; what is kept parsed is made again as it is read."""
        other = View()
        other.restore(self.tables, self.revision)
        other.cluster_id, other.snapshots, other.events = self.cluster_id, self.snapshots, self.events
        other.last_kind = self.last_kind
        other._building = copy.deepcopy(self._building, memo)
        return other

    def restore(self, tables: Mapping[str, Mapping[bytes, bytes]], revision: int) -> None:
        """Start from these rows at this revision (a recording's baseline), as a snapshot would."""
        self.tables = {t: dict(tables.get(t, {})) for t in TABLES}
        self.revision = revision
        for parsed in self._parsed_tables.values():
            parsed.reset()

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
            for parsed in self._parsed_tables.values():
                parsed.reset()
            self.revision = message.snapshot_end.revision
            self.snapshots += 1
        elif kind == "event":
            self._apply_event(message.event)

    def apply_event(self, event: log.Event, jobs: list[tuple[bytes, bytes]] | None = None) -> None:
        """apply() of an event, for a caller that has the event alone (the simulator). `jobs`: where
        to add the event's writes of job records, (key, record), in order (not its deletions)."""
        self._jobs_written = jobs
        try:
            self._apply_event(event)
        finally:
            self._jobs_written = None

    def _apply_event(self, event: log.Event) -> None:
        if event.revision <= self.revision:
            return  # already applied: a repeat after a reconnect
        tables, parsed_tables, jobs = self.tables, self._parsed_tables, self._jobs_written
        for change in event.changes:
            name, key = change.table, change.key  # (each read of a message's field makes an object)
            table = tables.get(name)
            if table is None:
                continue
            if change.deleted:
                table.pop(key, None)
            else:
                value = table[key] = change.value
                if jobs is not None and name == "jobs":
                    jobs.append((key, value))
            parsed = parsed_tables.get(name)
            if parsed is not None:
                parsed.dirty.add(key)
        self.revision = event.revision
        self.events += 1
        self.last_kind = event.kind

    # -------------------------------------------------------------- reading

    def jobs(self) -> list[api.Job]:
        """Every job, by id. The records are kept parsed between calls (a pass reads them all, and
        few change between passes): read them, never change them."""
        return self._parsed_tables["jobs"].read(self.tables["jobs"])  # type: ignore[return-value]

    def waiting(self) -> list[api.Job]:
        """The jobs a pass may act on (pending, and suspended ones it may resume: WAITING), by id; a
        subset of jobs(), kept like it (a pass over a long-running cluster need not walk every job)."""
        parsed = self._parsed_tables["jobs"]
        parsed.refresh(self.tables["jobs"])
        return parsed.kept()  # type: ignore[return-value]

    def digests(self) -> Digests:
        """What a pass derives of each waiting job (scheduler/job_digest.py), kept like waiting(): made
        again only for the jobs whose records changed. run_pass adds those it lacks."""
        parsed = self._parsed_tables["jobs"]
        parsed.refresh(self.tables["jobs"])
        return self._digests

    def parsed_job(self, key: bytes, raw: bytes) -> api.Job:
        """`raw`, the record an event wrote at `key` of the jobs, parsed: the one jobs() keeps if the
        view still holds those bytes there (the simulator reads each job change too: parsed once).
        Read it, never change it."""
        table = self.tables["jobs"]
        if table.get(key) != raw:  # (written again later in the same event)
            return api.Job.FromString(raw)
        parsed = self._parsed_tables["jobs"]
        parsed.refresh(table)
        return parsed.record(key)  # type: ignore[return-value]

    def job(self, job_id: int) -> api.Job | None:
        raw = self.tables["jobs"].get(struct.pack(">Q", job_id))
        return None if raw is None else api.Job.FromString(raw)

    def queues(self) -> list[api.Queue]:
        """Every queue, by name; kept parsed like jobs() (every pass reads them)."""
        return self._parsed_tables["queues"].read(self.tables["queues"])  # type: ignore[return-value]

    def hosts(self) -> list[api.Host]:
        """Every host, by name; kept parsed like jobs()."""
        return self._parsed_tables["hosts"].read(self.tables["hosts"])  # type: ignore[return-value]

    def fleet(self) -> Fleet:
        """What a pass makes of the hosts (scheduler/host_index.py: Fleet): each host's feasibility state
        (load included) and the order of those with free slots, made again only for the hosts whose
        records changed. Read it, never change it (but for run_pass, which puts back what it changed
        before it returns); the next call updates it in place (a pass reads it before the next pass's
        call)."""
        parsed = self._parsed_tables["hosts"]
        parsed.refresh(self.tables["hosts"])
        if parsed.reshaped or self._fleet is None:  # (hosts came or went: made again, all)
            hosts: list[api.Host] = parsed.records  # type: ignore[assignment]
            states = self._states = {h.spec.name: feasibility.host_state(h, load=True) for h in hosts}
            self._made_of = {h.spec.name: h for h in hosts}
            made = Fleet.of(states)
            self._free = list(made.free)
            self._fleet = Fleet(states, self._free, made.moving)
            self._totals = Counter(name for s in states.values() for name in s.totals)
        elif parsed.touched:
            states, free, made_of = self._states, self._free, self._made_of
            renamed = False  # a host's consumables changed (their names may have)
            for key in parsed.touched:
                host: api.Host = parsed.records[bisect.bisect_left(parsed.keys, key)]  # type: ignore[assignment]
                name = host.spec.name
                before = states[name]
                after = states[name] = feasibility.host_state(host, True, (made_of[name], before))
                made_of[name] = host
                old, new = free_entry(name, before), free_entry(name, after)
                if old != new:
                    if old is not None:
                        del free[bisect.bisect_left(free, old)]
                    if new is not None:
                        bisect.insort(free, new)
                if after.totals is not before.totals:
                    self._totals.subtract(before.totals.keys())
                    self._totals.update(after.totals.keys())
                    renamed = True
            if renamed:
                named = {n for n, count in self._totals.items() if count > 0}
                if self._fleet.moving != MOVING_ALWAYS | named:
                    self._fleet = Fleet(states, free, frozenset(MOVING_ALWAYS | named))
        parsed.touched.clear()
        parsed.reshaped = False
        return self._fleet

    def counters(self) -> dict[str, int]:
        """Cluster-wide counters in use (xce/rules/feasibility.py), by name."""
        return {k.decode(): struct.unpack(">q", v)[0] for k, v in sorted(self.tables["counters"].items())}

    def shared(self) -> dict[str, int]:
        """Cluster-wide consumables (licenses) and their totals."""
        return {r.name: r.total for r in (api.SharedResource.FromString(v) for _, v in
                                           sorted(self.tables["shared"].items()))}

    def limits(self) -> list[api.Limit]:
        """The configured limits (xce/rules/limits.py), by name."""
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


def waits(job: Message) -> bool:
    return job.state in WAITING  # type: ignore[attr-defined]


class _Parsed:
    """A table's records parsed, in key order, kept between reads: a read parses only the keys
    changed since the last (an event's changes name them), and returns a new list. With `keep`, the
    records it holds true of are also kept apart, in key order (kept())."""

    def __init__(self, kind: type[Message], keep: Callable[[Message], bool] | None = None,
                 touches: bool = False, digests: Digests | None = None) -> None:
        """`digests`: the kept records' digests, kept with them (jobs only)."""
        self.kind = kind
        self.keep = keep
        self.digests = digests
        self.touches = touches  # keep `touched` (a reader clears it: View.fleet)
        self.keys: list[bytes] = []
        self.records: list[Message] = []
        self._kept: dict[bytes, Message] = {}
        self._kept_keys: list[bytes] = []
        self.dirty: set[bytes] = set()
        self.whole = True  # parse everything at the next read (a snapshot came)
        # For a reader that keeps something per record: the keys parsed again since it looked, and
        # whether keys came or went (it starts over).
        self.touched: set[bytes] = set()
        self.reshaped = True

    def reset(self) -> None:
        self.whole = True
        self.dirty.clear()

    def kept(self) -> list[Message]:
        kept = self._kept
        return [kept[key] for key in self._kept_keys]

    def record(self, key: bytes) -> Message:
        """The record at `key`, which the table has, as of the last refresh."""
        return self.records[bisect.bisect_left(self.keys, key)]

    def read(self, table: dict[bytes, bytes]) -> list[Message]:
        self.refresh(table)
        return list(self.records)

    def refresh(self, table: dict[bytes, bytes]) -> None:
        """Parse what changed since the last read (all of it after a snapshot)."""
        if self.whole:
            self.keys = sorted(table)
            self.records = [self.kind.FromString(table[k]) for k in self.keys]
            self.whole = False
            self.dirty.clear()
            self.reshaped = True
            if self.keep is not None:
                keep = self.keep
                self._kept = {k: r for k, r in zip(self.keys, self.records, strict=True) if keep(r)}
                self._kept_keys = list(self._kept)  # (in key order, as self.keys)
                if self.digests is not None:
                    self.digests.reset(self._kept.values())  # type: ignore[arg-type]
        elif self.dirty:
            keys, records = self.keys, self.records
            for key in sorted(self.dirty):
                at = bisect.bisect_left(keys, key)
                here = at < len(keys) and keys[at] == key
                raw = table.get(key)
                record = None
                if raw is None:
                    if here:
                        del keys[at], records[at]
                        self.reshaped = True
                elif here:
                    record = records[at] = self.kind.FromString(raw)
                    if self.touches:
                        self.touched.add(key)
                else:
                    record = self.kind.FromString(raw)
                    keys.insert(at, key)
                    records.insert(at, record)
                    self.reshaped = True
                if self.keep is not None:
                    self._keep(key, record)
            self.dirty.clear()

    def _keep(self, key: bytes, record: Message | None) -> None:
        kept, was = self._kept, key in self._kept
        if record is not None and self.keep is not None and self.keep(record):
            kept[key] = record
            if not was:
                bisect.insort(self._kept_keys, key)
            if self.digests is not None:
                self.digests.put(record)  # type: ignore[arg-type]
        elif was:
            del kept[key]
            del self._kept_keys[bisect.bisect_left(self._kept_keys, key)]
            if self.digests is not None:
                self.digests.drop(struct.unpack(">Q", key)[0])
