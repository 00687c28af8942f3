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
