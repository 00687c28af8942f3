"""The event stream's messages (gateway/sse.py): types, ids, resume positions and who is sent what.
Pure: events from the real apply in the simulator, no daemon."""

from __future__ import annotations

import random

import pytest

from gateway import sse
from gateway.problems import Problem
from simulator import engine, workload
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log


class Watched(engine.Engine):
    """The simulator's engine, keeping every committed event (what a Sync stream would send)."""

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.events: list[log.Event] = []

    def _apply(self, entry: log.Entry) -> list[log.Result]:
        results = super()._apply(entry)
        raw = self.tables.get("events", engine.fsm.revision_key(self.index))
        if raw is not None:
            self.events.append(log.Event.FromString(raw))
        return results


def busy_workload(seed: int) -> workload.Workload:
    """Jobs that arrive and end at the same instants (many entries share a millisecond), run limits,
    preemption by suspension and by requeue, on a small fleet."""
    rng = random.Random(seed)
    queues = [api.Queue(name="urgent", priority=60, preemptive=["low", "scavenger"]),
              api.Queue(name="low", priority=5, preemptable=True),
              api.Queue(name="scavenger", priority=4, preemptable=True, preempt_action=api.PREEMPT_REQUEUE)]
    jobs = []
    for key in range(1, 121):
        queue = rng.choice(["urgent", "low", "low", "scavenger"])
        spec = api.JobSpec(command=["sim"], queue=queue, slots=rng.choice([1, 1, 2, 4]),
                           user=rng.choice("abc"), rerunnable=queue == "scavenger",
                           run_limit_s=rng.choice([0, 0, 30]))
        jobs.append(workload.SimJob(key, rng.randrange(0, 300) * 1000 // 10 * 10, rng.randrange(1, 60) * 1000,
                                    spec))
    jobs.sort(key=lambda j: j.submit_ms)
    return workload.Workload(jobs, workload.host_specs(3, 4), queues, f"busy {seed}")


def truth(events: list[log.Event]) -> list[str]:
    """Each job change's type, from the record before it (the whole history from revision 0)."""
    before: dict[bytes, api.Job] = {}
    types = []
    for event in events:
        for change in event.changes:
            if change.table != "jobs":
                continue
            old = before.pop(change.key, None)
            if change.deleted:
                types.append("job.deleted")
                continue
            job = api.Job.FromString(change.value)
            before[change.key] = job
            if old is None:
                types.append("job.created")
            elif job.state in sse.FINISHED and old.state not in sse.FINISHED:
                types.append("job.finished")
            else:
                types.append("job.updated")
    return types


def typed(classifier: sse.Classifier, events: list[log.Event]) -> list[str]:
    return [m.type for e in events for m in classifier.messages(e) if m.type.startswith("job.")]


@pytest.mark.parametrize("seed", range(4))
def test_types_match_what_each_change_did_to_the_state(seed: int) -> None:
    """From revision 0 (every job known), each type is what the change did to the job's record."""
    run = Watched(busy_workload(seed))
    run.run()
    expected = truth(run.events)
    assert typed(sse.Classifier(complete=True), run.events) == expected
    counts = {kind: expected.count(kind) for kind in set(expected)}
    assert counts["job.created"] == 120 and counts["job.finished"] >= 120 and counts["job.deleted"] > 0
    assert counts["job.updated"] > 3 * 120  # dispatched, started, suspended, resumed...


def test_a_replay_from_a_later_revision_types_first_records_by_the_event() -> None:
    """Resumed from the middle, without the records before: a job first met in its submit entry is
    created, one first met finished is finished, and everything after its first record is exact."""
    run = Watched(busy_workload(5))
    run.run()
    middle = len(run.events) // 2
    seeded = sse.Classifier(complete=True)
    typed(seeded, run.events[:middle])
    replayed = typed(sse.Classifier(complete=False), run.events[middle:])
    assert replayed == typed(seeded, run.events[middle:])  # (no job is written once it has finished)
    # A record first met that is not its submit: typed by its state alone.
    blind = sse.Classifier(complete=False)
    done = api.Job(id=4, state=api.DONE, spec=api.JobSpec(user="ann"))
    assert [m.type for m in blind.messages(_job_event(8, "reports", done))] == ["job.finished"]
    assert [m.type for m in blind.messages(_job_event(9, "reports", done))] == ["job.updated"]
    running = api.Job(id=5, state=api.RUN, spec=api.JobSpec(user="ann"))
    assert [m.type for m in blind.messages(_job_event(8, "decisions", running))] == ["job.updated"]
    assert [m.type for m in blind.messages(_job_event(8, "submit", api.Job(id=6)))] == ["job.created"]


def test_ids_name_each_change_and_a_position_resumes_exactly() -> None:
    run = Watched(busy_workload(7))
    run.run()
    classifier = sse.Classifier(complete=True)
    sent = [m for e in run.events for m in classifier.messages(e)]
    assert len({m.id for m in sent}) == len(sent)  # every id names one message
    for cut in random.Random(1).sample(range(len(sent)), 50):
        position = sse.parse_position(sent[cut].id)
        assert [m.id for m in sent if m.after(position)] == [m.id for m in sent[cut + 1:]]
    several = next(e for e in run.events if len(sse.Classifier(True).messages(e)) > 2)
    ids = [m.id for m in sse.Classifier(True).messages(several)]
    assert ids[-1] == str(several.revision) and ids[0] == f"{several.revision}.0"
    frame = sse.Classifier(True).messages(several)[0].frame().decode()
    assert frame.startswith(f"id: {several.revision}.0\nevent: ") and frame.endswith("\n\n")


@pytest.mark.parametrize("text", ["", "x", "-1", "1.", ".1", "1.2.3", "99999999999999999999", "1e5", "٣"])
def test_a_malformed_event_id_is_refused(text: str) -> None:
    with pytest.raises(Problem):
        sse.parse_position(text)


def _job_event(revision: int, kind: str, *jobs: api.Job, deleted: tuple[int, ...] = ()) -> log.Event:
    event = log.Event(revision=revision, kind=kind)
    for job in jobs:
        event.changes.add(table="jobs", key=engine.fsm.job_key(job.id), value=job.SerializeToString())
    for job_id in deleted:
        event.changes.add(table="jobs", key=engine.fsm.job_key(job_id), deleted=True)
    return event


def test_who_is_sent_what() -> None:
    mine = api.Job(id=1, state=api.PEND, spec=api.JobSpec(user="ann", queue="normal", command=["secret"],
                                                          env={"TOKEN": "x"}))
    theirs = api.Job(id=2, state=api.PEND, spec=api.JobSpec(user="bob", queue="gpu"))
    classifier = sse.Classifier(complete=True)
    created = classifier.messages(_job_event(5, "submit", mine, theirs))
    gone = classifier.messages(_job_event(9, "clean", deleted=(1, 2)))
    host = classifier.messages(log.Event(revision=6, changes=[log.Change(table="hosts", key=b"n1",
                                                                  value=api.Host().SerializeToString())]))
    assert "secret" not in created[0].frame().decode() and "TOKEN" not in created[0].frame().decode()

    def seen(audience: sse.Audience) -> list[str]:
        return [f"{m.type}:{m.job_id}" for m in [*created, *host, *gone] if audience.admits(m)]

    everyone = sse.Audience("ann", jobs=True, every_job=True, cluster=True)
    assert seen(everyone) == ["job.created:1", "job.created:2", "host.updated:0", "job.deleted:1",
                              "job.deleted:2"]
    private = sse.Audience("ann", jobs=True, every_job=False, cluster=True)
    assert seen(private) == ["job.created:1", "host.updated:0", "job.deleted:1"]
    by_queue = sse.Audience("ann", jobs=True, every_job=True, cluster=True, queues=frozenset({"gpu"}))
    assert seen(by_queue) == ["job.created:2", "job.deleted:2"]
    by_job = sse.Audience("ann", jobs=True, every_job=True, cluster=True, job_ids=frozenset({"1"}))
    assert seen(by_job) == ["job.created:1", "job.deleted:1"]
    hosts_only = sse.Audience("ops", jobs=False, every_job=False, cluster=True)
    assert seen(hosts_only) == ["host.updated:0"]


def test_an_element_made_later_is_created_and_a_late_part_report_is_an_update() -> None:
    """What the simulator does not make: an array's element becoming a job in a decisions entry, and
    a multi-host job's part reporting after the job finished."""
    known = sse.Classifier(complete=True)
    element = api.Job(id=12, array_id=11, array_index=3, state=api.RUN, spec=api.JobSpec(user="ann"))
    assert [m.type for m in known.messages(_job_event(3, "decisions", element))] == ["job.created"]
    ended = api.Job(id=12, array_id=11, state=api.EXIT, spec=api.JobSpec(user="ann"))
    assert [m.type for m in known.messages(_job_event(4, "reports", ended))] == ["job.finished"]
    ended.parts_ended.append("n2")
    assert [m.type for m in known.messages(_job_event(5, "reports", ended))] == ["job.updated"]
    again = api.Job(id=12, state=api.PEND, attempt=1, spec=api.JobSpec(user="ann"))  # requeued
    assert [m.type for m in known.messages(_job_event(6, "control", again))] == ["job.updated"]
    again.state = api.DONE
    assert [m.type for m in known.messages(_job_event(7, "reports", again))] == ["job.finished"]


def _resumed(messages: list[sse.Message], audience: sse.Audience, last_id: str) -> list[bytes]:
    """What a client reconnecting with `last_id` is sent of `messages` (the buffer, or a catch-up)."""
    cursor = sse.Cursor(audience, sse.parse_position(last_id), 10.0, 0.0)
    return [f for m in messages if m.after(cursor.place) for f in [cursor.give(m, 0.0)] if f is not None]


def _not_deleted(frames: list[bytes]) -> list[bytes]:
    # A filtered stream is sent a deletion only of a job it was sent on the same connection (documented).
    return [f for f in frames if b"\nevent: job.deleted\n" not in f]


def test_a_bookmark_resumes_exactly_where_the_client_is() -> None:
    """A filtered client follows a busy history, taken in batches of events (the buffer) and item by
    item with a bookmark tried between any two (a catch-up); its clock runs so that bookmarks are
    often due. Resuming from any bookmark sends exactly what the first connection was sent after it:
    nothing lost (a bookmark is never inside a revision, never past a message still owed) and nothing
    repeated; and its bookmarks follow the hub's revision, not its own last matching message."""
    run = Watched(busy_workload(2))
    run.run()
    rng = random.Random(2)
    classifier = sse.Classifier(complete=True)
    # Each batch comes with the hub's revision when it was taken. Every third event stands for one
    # that changes no job, host or queue (a key, an audit row): no messages, but the revision moves.
    batches = [([m for e in run.events[i:i + 7] for m in classifier.messages(e) if e.revision % 3],
                run.events[i + 6].revision) for i in range(0, len(run.events) - 7, 7)]
    assert sum(bool(batch) and taken > batch[-1].revision for batch, taken in batches) > 10

    def audience() -> sse.Audience:
        return sse.Audience("ann", jobs=True, every_job=True, cluster=True, users=frozenset({"a"}))

    cursor, now, out = sse.Cursor(audience(), sse.Position(0), 4.0, 0.0), 0.0, []
    for batch, taken in batches:
        for message in batch:
            now += rng.choice([0.0, 0.0, 3.0])
            if (frame := cursor.give(message, now)) is not None:
                out.append(frame)
            if (mark := cursor.bookmark(now)) is not None:
                assert message.last  # only between revisions
                out.append(mark)
        cursor.reached(taken)
        if (mark := cursor.bookmark(now)) is not None:
            out.append(mark)
    cursor.reached(batches[-1][1] + 2)  # the hub took two more revisions with no messages
    out.append(cursor.bookmark(now + 4.0) or b"none")
    assert out[-1].startswith(f"id: {batches[-1][1] + 2}\nevent: bookmark\n".encode())  # where the hub is
    every = [m for batch, _ in batches for m in batch]
    marks = [i for i, f in enumerate(out) if b"\nevent: bookmark\n" in f]
    revisions = [int(_id_of(out[i])) for i in marks]
    assert len(marks) > 20 and revisions == sorted(revisions)
    assert any(b"\nevent: job." in f for f in out)
    for i in marks:
        assert out[i].endswith(f'data: {{"revision":"{_id_of(out[i])}"}}\n\n'.encode())
        after = [f for f in out[i + 1:] if b"\nevent: bookmark\n" not in f]
        assert _not_deleted(_resumed(every, audience(), _id_of(out[i]))) == _not_deleted(after)


def _id_of(frame: bytes) -> str:
    return frame.split(b"\n")[0].removeprefix(b"id: ").decode()


def test_a_bookmark_comes_after_the_clients_own_silence_however_busy_the_cluster() -> None:
    """Messages every second for a minute, none for the filtered client: a bookmark every 15 s of its
    own silence. A client sent a message is owed its next bookmark 15 s after that message."""
    classifier = sse.Classifier(complete=True)
    job = api.Job(id=3, state=api.RUN, spec=api.JobSpec(user="bob"))
    events = [_job_event(second + 1, "reports", job) for second in range(61)]
    messages = [m for e in events for m in classifier.messages(e)]
    def cursor(*job_ids: str) -> sse.Cursor:
        return sse.Cursor(sse.Audience("ann", True, True, True, job_ids=frozenset(job_ids)), sse.Position(0),
                          15.0, 0.0)

    idle, busy = cursor("99"), cursor()
    got: dict[str, list[tuple[int, str]]] = {"idle": [], "busy": []}
    for second, message in enumerate(messages):
        for name, each in (("idle", idle), ("busy", busy)):
            if each.give(message, float(second)) is not None:
                got[name].append((second, "message"))
            each.reached(message.revision)
            if each.bookmark(float(second)) is not None:
                got[name].append((second, "bookmark"))
            assert each.wait_s(float(second)) > 0  # the driver never waits for nothing
    assert got["idle"] == [(15, "bookmark"), (30, "bookmark"), (45, "bookmark"), (60, "bookmark")]
    assert [kind for _, kind in got["busy"]] == ["message"] * 61
    late = cursor("3")
    assert late.give(messages[10], 10.0) is not None and late.bookmark(24.9) is None
    assert late.wait_s(20.0) == 5.0
    assert late.bookmark(25.0) == b'id: 11\nevent: bookmark\ndata: {"revision":"11"}\n\n'


def test_a_bookmark_waits_for_the_end_of_a_revision_it_is_inside() -> None:
    """A catch-up hands a revision's messages one at a time: in the middle of one (REV.0 sent, REV.1
    owed), a bookmark at REV would skip REV.1, and one at REV-1 would repeat REV.0; it waits."""
    jobs = [api.Job(id=i, state=api.PEND, spec=api.JobSpec(user="ann")) for i in (1, 2)]
    first, second = sse.Classifier(complete=True).messages(_job_event(8, "submit", *jobs))
    cursor = sse.Cursor(sse.Audience("ann", True, True, True), sse.Position(7), 15.0, 0.0)
    assert cursor.give(first, 1.0) is not None and first.id == "8.0"
    cursor.reached(7)  # a mark from before does not move it back
    assert cursor.bookmark(20.0) is None and cursor.place == sse.Position(8, 0)
    cursor.reached(8)
    assert cursor.bookmark(20.0) == b'id: 8\nevent: bookmark\ndata: {"revision":"8"}\n\n'
    resumed = sse.Cursor(sse.Audience("ann", True, True, True), sse.Position(7, 0), 15.0, 0.0)
    resumed.reached(9)  # the buffer held nothing after 7.0 through 9: a client resumed mid-revision
    assert resumed.place == sse.Position(9) and resumed.bookmark(15.0) is not None


def test_jobs_are_named_by_number_or_readable_id() -> None:
    readable = "local-1-20261204234613-57"
    named = sse.job_ids(["007", f" {readable} ", "my-site-2-20261204234613-8[3]"])
    assert named == frozenset({"7", readable, "my-site-2-20261204234613-8[3]"})
    created = sse.Classifier(complete=True).messages(_job_event(
        5, "submit", api.Job(id=57, readable_id=readable, spec=api.JobSpec(user="ann")),
        api.Job(id=58, readable_id="other-1-20261204234613-57", spec=api.JobSpec(user="ann"))))
    by_readable = sse.Audience("ann", True, True, True, job_ids=sse.job_ids([readable]))
    by_number = sse.Audience("ann", True, True, True, job_ids=sse.job_ids(["58"]))
    assert [m.job_id for m in created if by_readable.admits(m)] == [57]
    assert [m.job_id for m in created if by_number.admits(m)] == [58]
    for bad in ("", "x", "-1", "1.5", "local-1-2026-57", "local-x-20261204234613-57", "-1-20261204234613-5",
                "local-1-20261204234613-57[", "local-1-20261204234613-57[x]", "99999999999999999999"):
        with pytest.raises(Problem) as refused:
            sse.job_ids(["1", bad])
        assert refused.value.status == 400 and repr(bad)[:20] in refused.value.detail


@pytest.mark.parametrize(("value", "seconds"), [(None, 15.0), ("", 15.0), ("0.5", 0.5), (" 60 ", 60.0)])
def test_the_bookmark_interval_is_read_from_the_environment(value: str | None, seconds: float) -> None:
    assert sse.bookmark_interval({} if value is None else {sse.BOOKMARK_ENV: value}) == seconds


@pytest.mark.parametrize("value", ["0", "-1", "x", "nan", "inf", "3601"])
def test_a_bad_bookmark_interval_is_refused(value: str) -> None:
    with pytest.raises(ValueError, match=sse.BOOKMARK_ENV):
        sse.bookmark_interval({sse.BOOKMARK_ENV: value})
