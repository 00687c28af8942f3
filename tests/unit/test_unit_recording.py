"""Recordings (simulator/recording_file.py), what-ifs (simulator/whatif.py) and the batch in a decisions
event."""

from __future__ import annotations

import io
import struct
from pathlib import Path

import pytest

from controller import fsm
from controller.tables import MemoryTables
from simulator import recording_file, whatif
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log


def _recording() -> recording_file.Recording:
    job = api.Job(id=7, state=api.PEND, spec=api.JobSpec(command=["true"], queue="normal", slots=2))
    rec = recording_file.Recording(4)
    rec.baseline["jobs"][struct.pack(">Q", 7)] = job.SerializeToString()
    rec.baseline["queues"][b"normal"] = api.Queue(name="normal", priority=30).SerializeToString()
    rec.baseline["counters"][b"queue/normal"] = struct.pack(">q", 2)
    running = api.Job()
    running.CopyFrom(job)
    running.state, running.host = api.RUN, "w1"
    batch = api.DecisionBatch(base_revision=4, lease_epoch=1, scheduler_id="s", planner_digest="d")
    batch.decisions.add(dispatch=api.DispatchDecision(job_id=7, host="w1"))
    event = log.Event(revision=5, kind="decisions", changes=[
        log.Change(table="jobs", key=struct.pack(">Q", 7), value=running.SerializeToString()),
        log.Change(table="history", key=b"x", value=b"not the view's")], batch=batch)
    rec.events.append(event)
    rec.events.append(log.Event(revision=9, kind="control", by=["user:ann"], changes=[
        log.Change(table="jobs", key=struct.pack(">Q", 7), deleted=True)]))
    return rec


def _text(rec: recording_file.Recording) -> str:
    out = io.StringIO()
    recording_file.write_all(out, rec)
    return out.getvalue()


def test_a_recording_round_trips_and_keeps_only_the_view_s_tables() -> None:
    rec = _recording()
    back = recording_file.parse(_text(rec).splitlines(keepends=True), "r.jsonl")
    assert back.from_revision == 4 and back.baseline == rec.baseline
    assert [e.revision for e in back.events] == [5, 9]
    assert [c.table for c in back.events[0].changes] == ["jobs"]  # history is not the scheduler's
    assert back.events[0].batch == rec.events[0].batch and back.events[1].by == ["user:ann"]
    assert back.events[1].changes[0].deleted and back.last_revision == 9


@pytest.mark.parametrize(("cut", "words"), [
    (lambda t: t[:-5], "r.jsonl:7: truncated recording: the last line is incomplete"),
    (lambda t: "".join(t.splitlines(keepends=True)[:-1]), "r.jsonl: truncated recording: no end record"),
    (lambda t: t.replace('"version":1', '"version":2'), "r.jsonl:1: recording version 2; this xce reads "
                                                         "version 1"),
    (lambda t: t.replace('"recording":"xce"', '"recording":"other"'), "r.jsonl:1: not an XCE recording"),
    (lambda t: t.replace('"revision":9', '"revision":5'), "r.jsonl:6: revision 5 is not after 5"),
    (lambda t: t.replace('"table":"jobs"', '"table":"secrets"', 1), "r.jsonl:5: unknown table 'secrets'"),
    (lambda t: t.replace('{"end"', '{"end":{"revision":9,"events":1}}\n{"end"'), "r.jsonl:7: the end record "
                                                                                    "says revision 9 and 1"),
    (lambda t: t.replace('"kind":"control"', '"kind":"control"}}'), "r.jsonl:6: not a JSON line"),
    (lambda t: "", "r.jsonl: empty"),
])
def test_a_damaged_recording_is_refused_naming_the_line(cut, words: str) -> None:  # type: ignore[no-untyped-def]
    text = cut(_text(_recording()))
    with pytest.raises(recording_file.RecordingError) as caught:
        recording_file.parse(text.splitlines(keepends=True), "r.jsonl")
    assert words in str(caught.value)


def test_read_names_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(recording_file.RecordingError, match="cannot read it"):
        recording_file.read(tmp_path / "none.jsonl")


def test_an_unknown_what_if_key_is_refused_listing_the_known_ones() -> None:
    with pytest.raises(whatif.WhatIfError) as caught:
        whatif.parse(["queue.normal.colour=blue"])
    assert "unknown key 'queue.normal.colour'" in str(caught.value)
    for known in whatif.KNOWN:
        assert known in str(caught.value)
    for bad, words in [("queue.normal.backfill=sometimes",
                        "backfill is one of any, none, easy, end_before, conservative"),
                       ("queue.normal.picker=nope", "unknown job picker 'nope'"),
                       ("scheduler.max_dispatches=0", "out of range"),
                       ("queue.normal.priority=high", "whole"),
                       ("scheduler.picker", "KEY=VALUE wanted")]:
        with pytest.raises(whatif.WhatIfError, match=words):
            whatif.parse([bad])
    changes = whatif.parse(["queue.normal.backfill=any", "queue.normal.priority=5", "scheduler.picker=lifo"])
    queue = changes.queue(api.Queue(name="normal", backfill="easy", priority=30))
    assert (queue.backfill, queue.priority) == ("", 5)
    assert changes.settings(api.PlannerSettings(default_picker="fcfs")).default_picker == "lifo"
    assert changes.queue(api.Queue(name="other", priority=1)).priority == 1


@pytest.mark.parametrize("entry_format", [14, 15])
def test_a_decisions_event_carries_its_batch_from_format_15(entry_format: int) -> None:
    tables = MemoryTables()
    init = log.Entry(init=log.InitCluster(cluster_id="c", queues=[api.Queue(name="normal")]), stamp_ms=1,
                     format=entry_format)
    fsm.apply(tables, 1, init.SerializeToString())
    lease = log.Entry(lease=log.LeaseEntry(scheduler_id="s", duration_ms=10**6), stamp_ms=2,
                      format=entry_format)
    fsm.apply(tables, 2, lease.SerializeToString())
    batch = api.DecisionBatch(lease_epoch=1, scheduler_id="s", base_revision=2, planner_digest="d",
                              planner_state=api.PlannerState(await_revision=2))
    batch.decisions.add(pend=api.PendDecision(job_id=99, reason="r"))
    entry = log.Entry(decisions=batch, stamp_ms=3, format=entry_format)
    fsm.apply(tables, 3, entry.SerializeToString())
    event = log.Event.FromString(tables.get("events", fsm.revision_key(3)) or b"")
    assert event.kind == "decisions"
    assert (event.batch == batch) if entry_format >= 15 else not event.HasField("batch")
