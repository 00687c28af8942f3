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
    by_job = sse.Audience("ann", jobs=True, every_job=True, cluster=True, job_ids=frozenset({1}))
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
