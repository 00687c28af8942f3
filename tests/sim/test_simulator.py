"""The simulator (simulator/): the real apply and scheduler on a virtual clock, its workloads, reports,
what-ifs and determinism. Pure: no daemon (the CLI runs as a subprocess where the test says so)."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from simulator import engine, recording_file, report, swf, whatif, workload
from xce.v1 import api_pb2 as api

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT.parent / "shared" / "traces"


def _jobs(*rows: tuple[int, int, int], queue: str = "normal", user: str = "ann",
          limit_s: int = 0) -> list[workload.SimJob]:
    """(submit s, run s, slots) rows."""
    return [workload.SimJob(i + 1, submit * 1000, run * 1000, api.JobSpec(
                command=["sim"], queue=queue, slots=slots, user=user, run_limit_s=limit_s))
            for i, (submit, run, slots) in enumerate(rows)]


def _by_key(result: engine.Result) -> dict[int, engine.Finished]:
    return {f.key: f for f in result.finished}


def test_jobs_run_for_their_time_in_order_and_wait_for_room() -> None:
    w = workload.Workload(_jobs((0, 100, 2), (10, 50, 2), (20, 10, 1)), workload.host_specs(1, 3),
                          [api.Queue(name="normal", backfill="none")], "three jobs")
    done = _by_key(engine.simulate(w))
    assert (done[1].start_ms, done[1].end_ms) == (0, 100_000)
    assert (done[2].start_ms, done[2].end_ms) == (100_000, 150_000)  # 1 slot free until job 1 ends
    assert done[3].start_ms == 100_000  # strict order: not ahead of job 2, though a slot was free
    figures = report.figures(list(done.values()), 3)
    assert figures.avg_wait_s == round((0 + 90 + 80) / 3, 2) and figures.makespan_s == 150.0


def test_backfill_any_lets_a_later_job_start_in_a_free_slot() -> None:
    w = workload.Workload(_jobs((0, 100, 2), (10, 50, 2), (20, 10, 1)), workload.host_specs(1, 3),
                          [api.Queue(name="normal")], "three jobs")
    assert _by_key(engine.simulate(w))[3].start_ms == 20_000


def test_a_job_past_its_run_limit_is_killed_with_runlimit() -> None:
    w = workload.Workload(_jobs((0, 500, 1), limit_s=60), workload.host_specs(1, 1),
                          [api.Queue(name="normal")], "one job")
    result = engine.simulate(w)
    (job,) = result.finished
    assert (job.end_ms - job.start_ms, job.state, job.exit_reason) == (60_000, api.EXIT, "RUNLIMIT")
    assert report.report(result, "x")["run_limit_kills"] == 1


def test_end_before_keeps_the_head_s_reservation_from_when_it_first_waited() -> None:
    """RLScheduler's rule: the head's reservation is computed when it first waits and kept, though a
    job it waited for ends early. Four one-slot hosts: A (2, estimate 100 s, runs 10 s) and B (2, 50 s)
    run; the head H (4) waits from t=1 with its reservation at 100 s (A's estimated end). A ends at 10:
    C (2, 60 s) fits and ends at 70 < 100, so it starts at 10. Reckoned again at 10, the reservation
    would be 50 (B's end), C would wait, and H would start at 50."""
    rows = [(0, 10, 2, 100), (0, 50, 2, 50), (1, 10, 4, 10), (2, 60, 2, 60)]
    jobs = [workload.SimJob(i + 1, submit * 1000, run * 1000, api.JobSpec(
                command=["sim"], queue="normal", slots=slots, user="ann", estimate_s=estimate))
            for i, (submit, run, slots, estimate) in enumerate(rows)]
    w = workload.Workload(jobs, workload.one_slot_hosts(4), [api.Queue(name="normal", backfill="end_before")],
                          "end_before")
    done = _by_key(engine.simulate(w))
    assert done[4].start_ms == 10_000  # C, past the head, against the reservation kept from t=1
    assert done[3].start_ms == 70_000  # H, once B (50) and C (70) have ended
    easy = dataclasses.replace(w, queues=[api.Queue(name="normal", backfill="easy")])
    done = _by_key(engine.simulate(easy))  # EASY reckons the shadow time again at each pass (at 10: 50)
    assert (done[3].start_ms, done[4].start_ms) == (50_000, 60_000)


def test_preemption_suspends_a_victim_whose_clock_stops_until_it_resumes() -> None:
    queues = [api.Queue(name="urgent", priority=60, preemptive=["low"]),
              api.Queue(name="low", priority=5, preemptable=True)]
    jobs = [*_jobs((0, 100, 2), queue="low"), *_jobs((30, 20, 2), queue="urgent", user="bob")]
    jobs[1] = workload.SimJob(2, jobs[1].submit_ms, jobs[1].run_ms, jobs[1].spec)
    w = workload.Workload(jobs, workload.host_specs(1, 2), queues, "a preemption")
    result = engine.simulate(w)
    done = _by_key(result)
    assert (done[2].start_ms, done[2].end_ms) == (30_000, 50_000)  # at once, on the victim's slots
    # The victim ran 30 s, was stopped for 20 s, and ran its other 70 s after.
    assert (done[1].start_ms, done[1].end_ms, done[1].state) == (0, 120_000, api.DONE)
    assert result.unfinished == 0


def test_a_requeue_victim_runs_again_from_the_start() -> None:
    queues = [api.Queue(name="urgent", priority=60, preemptive=["scavenger"]),
              api.Queue(name="scavenger", priority=5, preemptable=True, preempt_action=api.PREEMPT_REQUEUE)]
    victim = workload.SimJob(1, 0, 100_000, api.JobSpec(command=["sim"], queue="scavenger", slots=1,
                                                        user="a", rerunnable=True))
    urgent = workload.SimJob(2, 40_000, 10_000, api.JobSpec(command=["sim"], queue="urgent", slots=1,
                                                            user="b"))
    fleet = workload.host_specs(1, 1)
    done = _by_key(engine.simulate(workload.Workload([victim, urgent], fleet, queues, "r")))
    assert (done[2].start_ms, done[2].end_ms) == (40_000, 50_000)
    assert (done[1].start_ms, done[1].end_ms, done[1].attempts) == (50_000, 150_000, 2)


@pytest.mark.parametrize("sets", [[], ["queue.low.backfill=none"], ["queue.low.backfill=easy"],
                                  ["queue.low.backfill=conservative"], ["queue.low.picker=fairshare"]])
def test_skipping_the_idle_pass_after_a_batch_changes_nothing(sets: list[str]) -> None:
    """The engine skips the pass after a batch when it cannot decide anything new (engine.one_pass):
    the same jobs end at the same times, and the history (hosts, pending reasons) is byte for byte the
    same as when it passes again after every batch and every event; preemptions (suspend and requeue),
    fair share (whose order reads what runs), -w started(...) (which a dispatch satisfies) and -W run
    limits included. The engine also leaves out a pass where nothing waits (planner.idle)."""
    w = _mixed()
    runs = []
    for skip in (True, False):
        sim = engine.Engine(w, engine.Settings(whatif=whatif.parse(sets), skip_idle_passes=skip))
        result = sim.run()
        runs.append((result.finished, list(sim.tables.scan("history")), result.passes))
    (finished, history, passes), (finished_all, history_all, passes_all) = runs
    assert len(finished) == 400 and finished == finished_all and history == history_all
    assert passes < passes_all  # (it did skip)
    preempted = [api.Job.FromString(raw) for _, raw in history if api.Job.FromString(raw).preemptions]
    assert "low" in {j.spec.queue for j in preempted}  # (victims stopped and resumed)
    if not sets:
        assert "scavenger" in {j.spec.queue for j in preempted}  # (... and requeued)


@pytest.mark.parametrize("seed", [25, 59, 66, 87, 93, 108])
def test_leaving_passes_out_changes_nothing_on_random_workloads(seed: int) -> None:
    """Random queues (preemption by suspending and requeueing, fair share or not, each backfill mode),
    -w and -W on some jobs, holds, kills, requeues and stops: the same ends with or without the passes
    the engine leaves out. These seeds once differed: a pass works out a blocked job's reservation when
    it meets it, not from what it places after it, so a queue that keeps order or reservations passes
    again after a batch that dispatched."""
    rng = random.Random(seed)
    base = workload.synthetic(120, rng.randint(3, 8), 8, rng.uniform(0.8, 2.0), seed=seed)
    modes = ("any", "none", "easy", "end_before", "conservative")
    low = api.Queue(name="low", priority=5, preemptable=True, backfill=rng.choice(modes))
    if rng.random() < 0.5:
        low.fairshare.CopyFrom(api.FairShare(users={f"u{n}": 1 + n % 3 for n in range(1, 51)}))
    urgent = api.Queue(name="urgent", priority=60, preemptive=["low", "scavenger"],
                       backfill=rng.choice(modes))
    scavenger = api.Queue(name="scavenger", priority=1, preemptable=True, preempt_action=api.PREEMPT_REQUEUE,
                          backfill=rng.choice(modes))
    queues = [urgent, low, scavenger]
    jobs, actions = [], []
    for job in base.jobs:
        spec = api.JobSpec()
        spec.CopyFrom(job.spec)
        spec.queue = rng.choice(["low", "low", "urgent", "scavenger"])
        spec.rerunnable = spec.queue == "scavenger"
        if rng.random() < 0.1 and job.key > 3:
            spec.depend = f"started({job.key - 3})"
        if rng.random() < 0.1:
            spec.run_limit_s = max(1, job.run_ms // 2000)
        jobs.append(workload.SimJob(job.key, job.submit_ms, job.run_ms, spec))
        if rng.random() < 0.08:
            action = workload.Action(job.submit_ms + rng.randint(0, 600_000), job.key,
                                     rng.choice([api.HOLD, api.KILL, api.REQUEUE, api.STOP]), by="user:u1")
            actions.append(action)
            if action.control in (api.HOLD, api.STOP):
                undo = api.RELEASE if action.control == api.HOLD else api.RESUME
                actions.append(workload.Action(action.time_ms + rng.randint(1000, 600_000), job.key, undo,
                                               by="user:u1"))
    actions.sort(key=lambda action: action.time_ms)
    w = workload.Workload(jobs, base.hosts, queues, "random", actions=actions)
    ends = [engine.Engine(w, engine.Settings(skip_idle_passes=skip)).run().finished for skip in (True, False)]
    assert ends[0] == ends[1] and len(ends[0]) > 20  # (a job too wide for the hosts waits for ever)


@pytest.mark.parametrize("sets", [[], ["queue.low.backfill=easy"], ["queue.low.backfill=conservative"],
                                  ["queue.low.picker=fairshare"]])
def test_workers_that_report_each_start_change_nothing_but_the_pid(sets: list[str]) -> None:
    """Without start reports (the default) the job's start time is its dispatch's (entry format 18),
    which is the time a start report at the same virtual instant gives: every pass decides the same
    (backfill's expected ends, preemption's newest victims and fair share read start times), the same
    jobs end at the same times, and the records differ only in the pid a worker reports."""
    w = _mixed()
    runs = []
    for reports in (False, True):
        sim = engine.Engine(w, engine.Settings(whatif=whatif.parse(sets), start_reports=reports))
        decisions: list[bytes] = []
        one_pass = sim.one_pass

        def recorded(one_pass: Callable[[], api.DecisionBatch | None] = one_pass,
                     decisions: list[bytes] = decisions) -> api.DecisionBatch | None:
            batch = one_pass()
            if batch is not None:
                decisions.append(b"".join(d.SerializeToString(deterministic=True) for d in batch.decisions))
            return batch

        sim.one_pass = recorded  # type: ignore[method-assign]
        result = sim.run()
        history, pids = [], set()
        for _, raw in sim.tables.scan("history"):
            job = api.Job.FromString(raw)
            pids.add(job.pid != 0)
            job.pid = 0
            history.append(job.SerializeToString(deterministic=True))
        assert pids == ({True} if reports else {False})
        runs.append((result.finished, history, decisions, result.entries))
    (finished, history, decisions, entries), (finished_r, history_r, decisions_r, entries_r) = runs
    assert len(finished) == 400 and finished == finished_r and history == history_r
    assert decisions == decisions_r and len(decisions) > 100
    assert entries < entries_r  # (one fewer an attempt that started)


def _mixed() -> workload.Workload:
    """400 jobs over three queues (urgent preempts low by suspending and scavenger by requeueing),
    fair share in low, -w started(...) on some, -W run limits on others."""
    base = workload.synthetic(400, 12, 8, 0.95, seed=11)
    shares = api.FairShare(users={f"u{n}": 1 + n % 3 for n in range(1, 51)})
    queues = [api.Queue(name="urgent", priority=60, preemptive=["low", "scavenger"]),
              api.Queue(name="low", priority=5, preemptable=True, fairshare=shares),
              api.Queue(name="scavenger", priority=1, preemptable=True, preempt_action=api.PREEMPT_REQUEUE)]
    jobs = []
    for job in base.jobs:
        spec = api.JobSpec()
        spec.CopyFrom(job.spec)
        spec.queue = ("low", "low", "urgent", "scavenger")[job.key % 4]
        spec.rerunnable = spec.queue == "scavenger"
        if job.key % 7 == 0:  # (job ids are the keys: arrivals in key order)
            spec.depend = f"started({job.key - 3})"
        if job.key % 11 == 0:
            spec.run_limit_s = max(1, job.run_ms // 2000)
        jobs.append(workload.SimJob(job.key, job.submit_ms, job.run_ms, spec))
    return workload.Workload(jobs, base.hosts, queues, "mixed")


@pytest.mark.parametrize("mode", ["easy", "conservative"])
def test_after_a_batch_under_fair_share_the_next_pass_is_not_skipped(mode: str) -> None:
    """Fair share orders by what runs: once A2 and A3 (user a) are placed past the reservation, a's jobs
    sink, and X (user b, long), refused before the head's reservation, comes first and fits."""
    queue = api.Queue(name="normal", job_pick_plugin="fairshare", backfill=mode,
                      fairshare=api.FairShare(users={"a": 1, "b": 1, "c": 1}))

    def job(key: int, submit_s: int, run_s: int, user: str, slots: int, estimate_s: int) -> workload.SimJob:
        return workload.SimJob(key, submit_s * 1000, run_s * 1000, api.JobSpec(
            command=["x"], queue="normal", slots=slots, user=user, estimate_s=estimate_s))

    jobs = [job(1, 0, 100, "c", 4, 100), job(2, 0, 1000, "c", 4, 1000), job(3, 10, 50, "a", 8, 100),
            job(4, 20, 500, "b", 1, 2000), job(5, 30, 5, "a", 1, 10), job(6, 40, 5, "a", 1, 10)]
    w = workload.Workload(jobs, [api.HostSpec(name="h1", slots=8)], [queue], "fair share")
    for skip in (True, False):
        done = _by_key(engine.Engine(w, engine.Settings(skip_idle_passes=skip)).run())
        assert done[4].start_ms == 100_000, (skip, done[4])


@pytest.mark.slow
def test_the_published_first_window_of_lublin_1_through_apply() -> None:
    """The same figure as the pass driven directly and the counted simulation (tests/sim/
    test_published_figures.py, which CI runs; tests/sim/test_counting.py holds the two paths equal on
    this window's first 200 jobs): 163.71."""
    trace = swf.read(TRACES / "lublin_256.swf")
    window = swf.Trace(trace.jobs[1981:1981 + 1024], trace.header)
    w = workload.from_swf(window, "lublin-1", queue=api.Queue(name="normal", backfill="end_before"))
    figures = report.report(engine.simulate(w), w.source)
    assert figures["overall"]["avg_bsld"] == 163.71 and figures["overall"]["jobs"] == 1024


def test_what_ifs_change_the_workload_and_the_policy() -> None:
    base = workload.synthetic(50, 4, 4, 0.8, seed=3)
    more = workload.more_hosts(base, 2, 8)
    assert more.slots == base.slots + 16 and [h.name for h in more.hosts][-2:] == ["added0", "added1"]
    faster = workload.scaled_arrivals(base, 2.0)
    assert faster.jobs[-1].submit_ms - faster.jobs[0].submit_ms == \
        round((base.jobs[-1].submit_ms - base.jobs[0].submit_ms) / 2)
    with pytest.raises(ValueError, match="factor"):
        workload.scaled_arrivals(base, 0)
    strict = engine.simulate(base, engine.Settings(whatif=whatif.parse(["queue.normal.backfill=none"])))
    loose = engine.simulate(base)
    conservative = whatif.parse(["queue.normal.backfill=conservative"])
    reserving = engine.simulate(base, engine.Settings(whatif=conservative))
    assert reserving.unfinished == 0 and len(reserving.finished) == 50
    waits = [report.figures(r.finished, base.slots).avg_wait_s for r in (strict, reserving, loose)]
    assert waits[0] > max(waits[1], waits[2]), waits  # (either backfill may wait less than the other)


def test_a_recording_s_jobs_are_a_workload() -> None:
    rec = recording_file.Recording(0)
    rec.baseline["hosts"][b"w1"] = api.Host(spec=api.HostSpec(name="w1", slots=4)).SerializeToString()
    rec.baseline["queues"][b"normal"] = api.Queue(name="normal").SerializeToString()
    ran = api.Job(id=5, state=api.DONE, submit_time_ms=1_000, start_time_ms=3_000, end_time_ms=63_000,
                  spec=api.JobSpec(command=["x"], queue="normal", slots=2, user="ann"))
    never = api.Job(id=6, state=api.EXIT, submit_time_ms=2_000, spec=api.JobSpec(queue="normal", slots=1))
    rec.events.append(recording_file.log.Event(revision=1, kind="reports", changes=[
        recording_file.log.Change(table="jobs", key=(5).to_bytes(8, "big"), value=ran.SerializeToString()),
        recording_file.log.Change(table="jobs", key=(6).to_bytes(8, "big"),
                                  value=never.SerializeToString())]))
    w = workload.from_recording(rec, "r")
    assert [(j.key, j.submit_ms, j.run_ms, j.spec.slots) for j in w.jobs] == [(5, 1_000, 60_000, 2)]
    assert [h.name for h in w.hosts] == ["w1"] and "1 jobs that never started" in w.notes[0]


def test_a_recording_s_holds_kills_and_modifications_are_done_again_at_their_times() -> None:
    """One slot. Recorded: B was held from 20 s to 300 s, D killed at 60 s while it waited, E's priority
    raised at 55 s. Simulated with those actions, E starts first when A ends and B only once released;
    without them (the jobs alone) B would start at 100 s."""
    rec = recording_file.Recording(0)
    rec.baseline["hosts"][b"w1"] = api.Host(spec=api.HostSpec(name="w1", slots=1)).SerializeToString()
    rec.baseline["queues"][b"normal"] = api.Queue(name="normal").SerializeToString()
    revision, T0 = 0, 1000  # (s; a time of 0 is no time)

    def event(kind: str, job_id: int, state: int, at_s: int, submit_s: int, start_s: int | None = None,
              end_s: int | None = None, priority: int = 0, by: str = "user:ann") -> None:
        nonlocal revision
        revision += 1
        ms = {"start_time_ms": start_s, "end_time_ms": end_s, "modify_time_ms": at_s,
              "submit_time_ms": submit_s}
        job = api.Job(id=job_id, state=state, **{k: (T0 + v) * 1000 for k, v in ms.items() if v is not None},
                      spec=api.JobSpec(command=["x"], queue="normal", slots=1, user="ann", priority=priority))
        key = job_id.to_bytes(8, "big")
        rec.events.append(recording_file.log.Event(revision=revision, kind=kind, by=[by], changes=[
            recording_file.log.Change(table="jobs", key=key, value=job.SerializeToString())]))

    for job_id, submit_s in ((1, 0), (2, 10), (3, 30), (4, 40), (5, 50)):
        event("submit", job_id, api.PEND, submit_s, submit_s)
    event("control", 2, api.PSUSP, 20, 10)                          # B held
    event("modify", 5, api.PEND, 55, 50, priority=90, by="admin:root")  # E's priority raised
    event("control", 4, api.EXIT, 60, 40, end_s=60)                 # D killed while it waited
    event("reports", 1, api.DONE, 100, 0, start_s=0, end_s=100)
    event("reports", 5, api.DONE, 110, 50, start_s=100, end_s=110, priority=90)
    event("reports", 3, api.DONE, 160, 30, start_s=110, end_s=160)
    event("control", 2, api.PEND, 300, 10)                          # B released
    event("reports", 2, api.DONE, 350, 10, start_s=300, end_s=350)
    w = workload.from_recording(rec, "r")
    assert [(a.time_ms // 1000 - T0, a.key, a.control, a.priority) for a in w.actions] == [
        (20, 2, api.HOLD, None), (55, 5, 0, 90), (60, 4, api.KILL, None), (300, 2, api.RELEASE, None)]
    assert "4 actions on its jobs done again" in w.notes[-1]
    result = engine.simulate(w)
    done = {k: (f.start_ms // 1000 - T0, f.end_ms // 1000 - T0, f.state) for k, f in _by_key(result).items()}
    assert (result.actions, result.actions_refused) == (4, 0)
    assert done == {1: (0, 100, api.DONE), 5: (100, 110, api.DONE), 3: (110, 160, api.DONE),
                    2: (300, 350, api.DONE), 4: (60, 60, api.EXIT)}  # D: killed before it ever ran
    alone = _by_key(engine.simulate(dataclasses.replace(w, actions=())))
    assert alone[2].start_ms // 1000 - T0 == 100  # (the actions are what held it)


def test_a_job_held_before_the_recording_stays_held_and_an_ended_job_is_not_requeued() -> None:
    """Job 1 was held when the recording began and released at 300 s: it waits until then. Job 2 was
    requeued at 410 s and then killed; simulated, it ended at 31 s, so neither is done again (it ends
    once) and both are counted refused."""
    rec = recording_file.Recording(0)
    rec.baseline["hosts"][b"w1"] = api.Host(spec=api.HostSpec(name="w1", slots=1)).SerializeToString()
    rec.baseline["queues"][b"normal"] = api.Queue(name="normal").SerializeToString()
    T0 = 1000  # (s; a time of 0 is no time)

    def job(job_id: int, state: int, at: int, submit: int, start: int | None = None, end: int | None = None,
            **more: bool) -> api.Job:
        ms = {"start_time_ms": start, "end_time_ms": end, "modify_time_ms": at, "submit_time_ms": submit}
        return api.Job(id=job_id, state=state, **{k: (T0 + v) * 1000 for k, v in ms.items() if v is not None},
                       spec=api.JobSpec(command=["x"], queue="normal", slots=1, user="ann"), **more)

    rec.baseline["jobs"][(1).to_bytes(8, "big")] = job(1, api.PSUSP, 0, 0).SerializeToString()
    for revision, (kind, record) in enumerate([
            ("control", job(1, api.PEND, 300, 0)), ("decisions", job(1, api.RUN, 300, 0, start=300)),
            ("reports", job(1, api.DONE, 350, 0, start=300, end=350)), ("submit", job(2, api.PEND, 10, 10)),
            ("decisions", job(2, api.RUN, 400, 10, start=400)),
            ("control", job(2, api.RUN, 410, 10, start=400, kill_requested=True, requeue_requested=True)),
            ("control", job(2, api.RUN, 420, 10, start=400, kill_requested=True)),
            ("reports", job(2, api.EXIT, 421, 10, start=400, end=421))], start=1):
        rec.events.append(recording_file.log.Event(revision=revision, kind=kind, by=["user:ann"], changes=[
            recording_file.log.Change(table="jobs", key=record.id.to_bytes(8, "big"),
                                 value=record.SerializeToString())]))
    w = workload.from_recording(rec, "r")
    assert [(a.time_ms // 1000 - T0, a.key, a.control) for a in w.actions] == [
        (300, 1, api.RELEASE), (410, 2, api.REQUEUE), (420, 2, api.KILL)]
    result = engine.simulate(w)
    ends = sorted((f.key, f.start_ms // 1000 - T0, f.end_ms // 1000 - T0, f.state) for f in result.finished)
    assert ends == [(1, 300, 350, api.DONE), (2, 10, 31, api.DONE)]
    assert (result.actions, result.actions_refused) == (2, 2)  # the hold at submit and the release


def test_the_same_input_gives_the_same_report_bytes_in_fresh_processes(tmp_path: Path) -> None:
    """Two processes with different hash seeds (set and dict orders of strings differ): same bytes."""
    args = [sys.executable, "-m", "cli", "sim", "--synthetic", "150", "--hosts", "6x4", "--seed", "7",
            "--set", "queue.normal.backfill=easy", "--json"]
    outs = []
    for seed in ("1", "2"):
        done = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, timeout=300,
                              env={**os.environ, "PYTHONHASHSEED": seed})
        assert done.returncode == 0, done.stderr
        outs.append(done.stdout)
    assert outs[0] == outs[1]
    answer = json.loads(outs[0])
    assert answer["as_given"]["overall"]["jobs"] == answer["what_if"]["overall"]["jobs"] == 150
    assert answer["changes"] == ["--set queue.normal.backfill=easy"]


@pytest.mark.parametrize(("args", "words"), [
    (["--synthetic", "10", "--set", "queue.normal.colour=red"], "unknown key 'queue.normal.colour' (known"),
    (["--synthetic", "10", "--set", "queue.other.backfill=none"], "names queues the workload does not have"),
    (["--synthetic", "10", "--hosts", "ax2"], "N or NxS"),
    (["--synthetic", "10", "--scale-arrivals", "-1"], "a factor in (0, 1000]"),
    (["--swf", "/nonexistent.swf"], "cannot read"),
    (["--workload", "/nonexistent.jsonl"], "cannot read it"),
])
def test_bad_simulation_input_is_refused_clearly(args: list[str], words: str) -> None:
    done = subprocess.run([sys.executable, "-m", "cli", "sim", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 2 and words in done.stderr, done.stderr


def test_interactive_steps_snapshots_restores_and_a_what_if_from_the_snapshot_on() -> None:
    """Stepping gives what a whole run gives; a restore runs on from the kept state as it was; a what-if
    set after a restore changes only what comes after it."""
    import io

    from cli import interactive_sim

    base = workload.synthetic(50, 4, 4, 0.8, seed=3)
    whole = report.as_text(report.report(engine.simulate(base), base.source, base.notes))
    out = io.StringIO()
    session = interactive_sim.Session(engine.Engine(base), out)
    session.serve(["step 40", "snapshot half", "run", "report", "restore half", "report", "run", "report",
                   "restore half", "set queue.normal.backfill=none", "run", "report",
                   "restore nothing", "set queue.other.backfill=none", "frobnicate", "quit", "view"])
    text = out.getvalue()
    reports = [part.split("\n")[0:3] for part in text.split("simulated ")[1:]]
    first, _, again, _ = ("simulated " + part for part in text.split("simulated ")[1:])
    assert first.startswith(whole) and again.startswith(whole)  # stepping, and after a restore
    assert reports[1] != reports[0]  # the restored state had fewer jobs ended
    assert "(queues changed: normal)" in text and reports[3] != reports[0]
    assert "error: no snapshot 'nothing' (kept: half)" in text
    assert "error: no such queue: other" in text and "unknown command 'frobnicate'" in text
    assert text.rstrip().splitlines()[-1].startswith("unknown command")  # `quit`: the `view` after never ran
