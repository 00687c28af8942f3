"""The scheduler's view applies Sync messages idempotently (H3, M2, M4)."""

from __future__ import annotations

from controller import fsm, sync_stream
from controller.tables import MemoryTables
from scheduler.view import View
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

STAMP = 1_700_000_000_000


def _state() -> tuple[MemoryTables, list[int]]:
    tables = MemoryTables()
    index = [0]

    def step(entry: log.Entry) -> None:
        index[0] += 1
        fsm.apply(tables, index[0], entry.SerializeToString())

    step(log.Entry(stamp_ms=STAMP, init=log.InitCluster(cluster_id="c", config_digest="d",
                                                        queues=[api.Queue(name="normal", priority=30)])))
    step(log.Entry(stamp_ms=STAMP, join_host=api.HostSpec(name="h1", slots=0)))
    for i in range(5):
        step(log.Entry(stamp_ms=STAMP, submit=log.SubmitBatch(requests=[
            api.SubmitJobsRequest(request_id=f"r{i}", jobs=[api.JobSpec(command=["true"])])])))
    step(log.Entry(stamp_ms=STAMP, join_host=api.HostSpec(name="h1", slots=8)))  # re-join (M2)
    step(log.Entry(stamp_ms=STAMP, modify=api.ModifyJobRequest(job_id="2", priority=9)))  # in place (M4)
    return tables, index


def _committed(tables: MemoryTables) -> View:
    view = View()
    for message in sync_stream.snapshot(tables, "c"):
        view.apply(message)
    return view


def test_events_from_zero_and_a_snapshot_give_the_same_view() -> None:
    tables, _ = _state()
    by_events = View()
    for event in sync_stream.events_after(tables, 0):
        by_events.apply(log.SyncMessage(event=event))
    assert by_events.dump() == _committed(tables).dump()
    assert [h.spec.slots for h in by_events.hosts()] == [8]
    assert by_events.job(2).spec.priority == 9 and len(by_events.jobs()) == 5


def test_replayed_and_repeated_messages_change_nothing() -> None:
    tables, _ = _state()
    view = _committed(tables)
    before = view.dump()
    for event in sync_stream.events_after(tables, 0):  # all at or below the snapshot's revision
        view.apply(log.SyncMessage(event=event))
    for message in sync_stream.snapshot(tables, "c"):
        view.apply(message)
    assert view.dump() == before and view.events == 0 and view.snapshots == 2


def test_a_snapshot_cut_short_leaves_the_old_view() -> None:
    tables, _ = _state()
    view = View()
    messages = list(sync_stream.snapshot(tables, "c"))
    for message in messages[:-1]:  # the stream broke before snapshot_end
        view.apply(message)
    assert view.dump() == View().dump() and view.revision == 0


def test_events_available_only_above_the_floor_of_a_known_revision() -> None:
    meta = log.Meta(applied_index=100, events_floor=50)
    assert sync_stream.events_available(meta, 49) and sync_stream.events_available(meta, 100)
    assert not sync_stream.events_available(meta, 48)
    assert not sync_stream.events_available(meta, 0)    # a new view wants a snapshot
    assert not sync_stream.events_available(meta, 101)  # from another history


def test_records_kept_parsed_between_reads_are_what_a_fresh_parse_gives() -> None:
    """The view parses only the keys an event changed (scheduler/view.py: _Parsed): after random adds,
    changes, deletions and a snapshot, every read equals a fresh parse of the rows (the waiting
    jobs, its subset), host states and the waiting jobs' digests equal fresh ones, and a list handed
    out before is not changed by later events."""
    import random

    from scheduler import core, host_index, job_digest
    from xce.rules import feasibility

    rng = random.Random(7)
    specs = random.Random(8)  # (its own, so that the rest draws what it drew before)
    view = View()
    rows: dict[str, dict[bytes, bytes]] = {"jobs": {}, "hosts": {}}
    handed: list[tuple[list[api.Job], list[bytes]]] = []
    for revision in range(1, 400):
        changes = []
        for _ in range(rng.randint(1, 4)):
            table = rng.choice(["jobs", "hosts"])
            number = rng.randint(1, 30)
            key = number.to_bytes(8, "big") if table == "jobs" else f"h{number:02d}".encode()
            if rng.random() < 0.25:
                rows[table].pop(key, None)
                changes.append(log.Change(table=table, key=key, deleted=True))
                continue
            if table == "jobs":
                state = rng.choice([api.PEND, api.RUN, api.SSUSP, api.DONE])
                spec = api.JobSpec(queue="normal", slots=specs.randint(1, 3), priority=specs.randint(0, 2),
                                   resource_req=specs.choice(["", "", "select[gpu]"]))
                made = api.Job(id=number, attempt=rng.randint(0, 9), state=state, spec=spec)
                value = made.SerializeToString()
            else:  # (some with a consumable, which names a moving value)
                host = api.Host(spec=api.HostSpec(name=key.decode(), slots=8), status=api.HOST_OK,
                                slots_used=rng.randint(0, 8), closed=rng.random() < 0.1)
                if rng.random() < 0.2:
                    host.spec.resources[rng.choice(["gpu", "fpga"])] = 2
                if rng.random() < 0.2:  # (what a state makes of the spec and the groups alone, changed)
                    host.spec.tags.append(rng.choice(["fast", "rack=r1", "rack=r2"]))
                if rng.random() < 0.2:
                    host.groups.append(rng.choice(["gpu_nodes", "big"]))
                value = host.SerializeToString()
            rows[table][key] = value
            changes.append(log.Change(table=table, key=key, value=value))
        if revision == 200:  # a snapshot swaps every row in
            view.apply(log.SyncMessage(snapshot_begin=log.SnapshotBegin(cluster_id="c")))
            view.apply(log.SyncMessage(snapshot_chunk=log.SnapshotChunk(records=[
                log.Change(table=t, key=k, value=v) for t in rows for k, v in rows[t].items()])))
            view.apply(log.SyncMessage(snapshot_end=log.SnapshotEnd(revision=revision)))
        else:
            view.apply(log.SyncMessage(event=log.Event(revision=revision, changes=changes)))
        if rng.random() < 0.5:
            jobs = view.jobs()
            assert [j.SerializeToString() for j in jobs] == [rows["jobs"][k] for k in sorted(rows["jobs"])]
            assert [j.SerializeToString() for j in view.waiting()] == [
                j.SerializeToString() for j in jobs if j.state in core.WAITING]
            assert sorted(view.digests(), key=lambda made: made.id) == [
                job_digest.digest(j) for j in view.waiting()]
            hosts = [api.Host.FromString(rows["hosts"][k]) for k in sorted(rows["hosts"])]
            assert view.hosts() == hosts
            fresh = host_index.Fleet.of({h.spec.name: feasibility.host_state(h, load=True) for h in hosts})
            kept = view.fleet()
            assert (dict(kept.states), list(kept.free)) == (fresh.states, fresh.free)
            assert kept.moving == fresh.moving
            # A pass places jobs on the kept states (run_pass lends them), as on its own copy, and puts
            # them back as they were.
            queue = api.Queue(name="normal")
            waiting = [api.Job(id=100 + n, state=api.PEND, spec=api.JobSpec(queue="normal", slots=3))
                       for n in range(4)]
            placed = core.run_pass(waiting, [queue], hosts, core.CoreConfig(), {}, fleet=kept).decisions
            assert placed == core.run_pass(waiting, [queue], hosts, core.CoreConfig(), {}).decisions
            assert (dict(kept.states), list(kept.free)) == (fresh.states, fresh.free)
            handed.append((jobs, [j.SerializeToString() for j in jobs]))
    for jobs, then in handed:
        assert [j.SerializeToString() for j in jobs] == then


def test_a_job_change_read_through_the_view_is_the_record_the_view_keeps() -> None:
    view = View()
    key = b"\0\0\0\0\0\0\0\x07"
    first, last = (api.Job(id=7, state=api.PEND, attempt=p).SerializeToString() for p in (1, 2))
    event = log.Event(revision=1, changes=[log.Change(table="jobs", key=key, value=value)
                                           for value in (first, last)])
    view.apply_event(event)
    assert view.parsed_job(key, first).attempt == 1  # written again later in the event: its own
    kept = view.parsed_job(key, last)
    assert kept.attempt == 2 and kept is view.jobs()[0] and kept is view.waiting()[0]
