"""The soak's checks (soak/checks.py) on made-up records: each catches what it is for."""

from __future__ import annotations

import time
from pathlib import Path

from soak import checks, report
from soak.chaos import Failover
from soak.checks import FinalJob, Instance

S = 1_700_000_000_000  # ms


def done(job: int, slots: int = 1, end_ms: int = S + 5000, state: str = "DONE") -> FinalJob:
    return FinalJob(job, state, slots, end_ms)


def test_an_acknowledged_job_missing_is_lost_and_one_not_finished_is_unfinished() -> None:
    final = {1: done(1), 2: done(2, state="RUN")}
    assert checks.lost([1, 2, 3], final) == [3]
    assert checks.unfinished([1, 2, 3], final) == [2]
    assert checks.lost([1], final) == checks.unfinished([1], final) == []


def test_two_instances_of_a_job_are_duplicated_and_overlap_is_found() -> None:
    once = [Instance("w1", 1, 0, S, S + 100)]
    sequential = [Instance("w1", 2, 0, S, S + 100), Instance("w2", 2, 1, S + 200, S + 300)]
    together = [Instance("w1", 3, 0, S, S + 500), Instance("w2", 3, 1, S + 200, None)]
    instances = once + sequential + together
    assert checks.duplicated(instances) == [2, 3]  # requeue-on-success: ran again, one after the other
    assert checks.overlapping(instances, now_ms=S + 1000) == [3]


def test_a_host_running_more_slots_than_it_has_is_over_committed() -> None:
    instances = [Instance("w1", 1, 0, S, S + 100), Instance("w1", 2, 0, S + 50, S + 150),
                 Instance("w2", 3, 0, S, S + 100), Instance("w2", 4, 0, S + 100, S + 200)]
    slots = {1: 2, 2: 1, 3: 2, 4: 2}
    # w1: 2 + 1 at once on 2 slots; w2: one ends as the other starts (fine)
    assert checks.over_committed(instances, slots, {"w1": 2, "w2": 2}, now_ms=S + 1000) == ["w1: 3 > 2"]


def test_gpus_are_checked_per_resource_count_and_index() -> None:
    held = [Instance("w1", 1, 0, S, S + 100, 1, (0,)), Instance("w1", 2, 0, S + 50, S + 150, 1, (1,)),
            Instance("w2", 3, 0, S, S + 100, 1, (0, 1)), Instance("w2", 4, 0, S + 100, S + 200, 1, (0,)),
            Instance("w3", 5, 0, S, None, 1, (1,)), Instance("w3", 6, 0, S + 10, S + 20, 1, (1,))]
    # w1: two jobs, two indices; w2: one ends as the other takes index 0 (fine); w3: index 1 twice at once
    assert checks.gpus_over_committed(held, {"w1": 2, "w2": 2, "w3": 2}, now_ms=S + 1000) == \
        ["w3: GPU [1] held by jobs 5 and 6"]
    assert checks.gpus_over_committed(held[:2], {"w1": 1}, now_ms=S + 1000) == ["w1: 2 GPUs > 1"]
    final = {job: done(job) for job in (1, 2)}
    failed = checks.verdict([1, 2], final, held[:2], {"w1": 2}, {}, {}, {}, now_ms=S + 1000,
                            host_gpus={"w1": 1})
    assert not failed.ok and failed.over_committed == ["w1: 2 GPUs > 1"]


def test_parts_count_on_their_hosts_never_as_second_runs_and_only_inside_the_allocation() -> None:
    final = {1: FinalJob(1, "DONE", 2, S + 500, ("w1", "w2")), 2: FinalJob(2, "DONE", 1, S + 900, ("w2",)),
             3: FinalJob(3, "DONE", 2, S + 500, ("w1", "w3"))}
    instances = [Instance("w1", 1, 0, S, S + 500, 1), Instance("w2", 1, 0, S + 10, S + 500, 1, part=True),
                 Instance("w2", 2, 0, S + 100, S + 900, 1),  # while job 1's part holds w2's only slot
                 Instance("w1", 3, 0, S + 600, S + 700, 1),
                 Instance("w4", 3, 0, S + 610, S + 700, 1, part=True)]
    assert checks.duplicated(instances) == [] and checks.overlapping(instances, S + 1000) == []
    assert checks.over_committed(instances, {1: 2, 2: 1, 3: 2}, {"w1": 1, "w2": 1, "w4": 1}, S + 1000) \
        == ["w2: 2 > 1"]
    assert checks.stray_parts(instances, final) == [
        "job 3.0: a part on w4 (allocation w1, w3; command on w1)"]
    verdict = checks.verdict([1, 2, 3], final, instances, {"w1": 1, "w2": 1, "w4": 1}, {}, {}, {}, S + 1000)
    assert not verdict.ok and verdict.duplicated == []
    # Requeued after attempt 0's start failed: its part on w2 is no fault, nor one whose command never
    # started; the last attempt's parts are checked against its own allocation.
    requeued = {4: FinalJob(4, "DONE", 2, S + 900, ("w3", "w4"), attempt=1)}
    parts = [Instance("w2", 4, 0, S, S, 1, part=True), Instance("w3", 4, 1, S + 100, S + 900, 1),
             Instance("w4", 4, 1, S + 110, S + 900, 1, part=True), Instance("w1", 4, 1, S + 120, S + 900, 1,
                                                                          part=True)]
    assert checks.stray_parts(parts, requeued) == ["job 4.1: a part on w1 (allocation w3, w4; command on w3)"]
    assert checks.stray_parts(parts[:3], requeued) == []


def test_a_kill_must_end_the_job_unless_it_finished_first() -> None:
    kill_at = S + 1000
    final = {1: done(1, state="EXIT"), 2: done(2), 3: done(3), 4: done(4, state="EXIT"),
             5: done(5, state="RUN")}
    instances = [Instance("w1", 1, 0, S, kill_at + 3000),   # killed, after a failover: fine
                 Instance("w1", 2, 0, S, kill_at + 500),    # ended DONE on its own meanwhile: fine
                 Instance("w1", 3, 0, S, kill_at + 15000),  # ran on to DONE long after the kill
                 Instance("w1", 4, 0, kill_at + 5000, kill_at + 6000)]  # started after the kill
    kills = {job: kill_at for job in (1, 2, 3, 4, 5)}
    assert checks.kills_not_effective(kills, final, instances) == [3, 4, 5]


def test_a_stop_must_pause_the_job_soon_unless_it_had_ended() -> None:
    at = S / 1000
    steady = [at - 1 + 0.1 * i for i in range(60)]  # never paused, but all its ticks were written by 5 s
    paused = [at + 0.1 * i for i in range(10)] + [at + 5 + 0.1 * i for i in range(50)]
    late_pause = [at + 0.2 * i for i in range(55)] + [at + 14 + 0.1 * i for i in range(5)]  # from 10.8 s
    never = [at + 0.2 * i for i in range(80)]  # slow ticks, no pause, still going after the bound
    stopped_at_once = [at + 3 + 0.1 * i for i in range(60)]  # the stop came before its first tick
    gone = [at - 2 + 0.1 * i for i in range(20)]  # its host's processes vanished before the stop
    one_more = [at - 2 + 0.1 * i for i in range(22)] + [at + 0.3]  # a tick after the stop, then none
    stops = {1: (int(S), steady), 2: (int(S), paused), 3: (int(S), late_pause), 4: (int(S), never),
             5: (int(S), stopped_at_once), 6: (int(S), gone), 7: (int(S), one_more)}
    # 1 ended (all 60 ticks) before the bound: the stop came too late to matter; 6 never ran after it
    assert checks.stops_not_effective(stops) == [3, 4, 7]


def test_memory_that_keeps_growing_is_reported() -> None:
    flat = [(float(t), 100.0 + (t % 3)) for t in range(120)]
    growing = [(float(t), 100.0 + t) for t in range(120)]
    short = [(float(t), 100.0 + 10 * t) for t in range(20)]  # too short a life to judge
    assert checks.memory_growth({"flat#1": flat, "grow#2": growing, "short#3": short}) == \
        ["grow#2: 145 -> 205 MB"]


def test_verdict_passes_a_clean_run_and_fails_a_broken_one() -> None:
    final = {1: done(1), 2: done(2)}
    instances = [Instance("w1", 1, 0, S, S + 100), Instance("w1", 2, 0, S + 200, S + 300)]
    clean = checks.verdict([1, 2], final, instances, {"w1": 1}, {}, {}, {}, now_ms=S + 1000)
    assert clean.ok and clean.summary()["lost"] == 0
    rerun = instances + [Instance("w1", 2, 1, S + 400, S + 500)]
    broken = checks.verdict([1, 2], final, rerun, {"w1": 1}, {}, {}, {}, now_ms=S + 1000)
    assert not broken.ok and broken.duplicated == [2]


def test_a_failovers_hops_are_read_from_the_daemons_logs(tmp_path: Path) -> None:
    """Each hop is the first matching line after the fault; workers_joined is the last worker's first
    join after it (until every worker has joined, some freed slots are not seen)."""
    def line(at: float, who: str, text: str) -> str:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(int(at)))
        return f"{stamp},{round(at % 1 * 1000):03d} {who} INFO {text}\n"

    fault = float(int(time.time()) - 100)
    logs = {
        "replica-2": [(-50, "controller.leader: serving (leadership 1)"),
                      (0.4, "controller.leader: serving (leadership 2)")],
        "sched-1": [(0.1, "scheduler.follower: sync: lost"),
                    (0.6, "scheduler.follower: sync: resumed from 7")],
        "worker-w1": [(0.5, "xce.worker: worker w1: joined via a")],
        "worker-w2": [(-1, "xce.worker: worker w2: joined via a"),
                      (0.9, "xce.worker: worker w2: joined via b")],
    }
    for who, lines in logs.items():
        (tmp_path / f"{who}.log").write_text("".join(line(fault + after, who, text) for after, text in lines))
    delays = report.hop_delays([Failover("kill", 1, fault, 0)], tmp_path)[0]
    assert {hop: round(s, 3) for hop, s in delays.items()} == {
        "elected": 0.4, "stream_lost": 0.1, "resumed": 0.6, "workers_joined": 0.9}


def test_a_parallel_job_counts_only_its_part_on_each_host() -> None:
    # Job 1 holds 2 slots on w1 and 2 on w2 (its workers journal their part): no host is over.
    instances = [checks.Instance("w1", 1, 0, S, S + 500, 2), checks.Instance("w2", 2, 0, S, S + 500)]
    assert checks.over_committed(instances, {1: 4, 2: 2}, {"w1": 2, "w2": 2}, now_ms=S + 1000) == []
    instances.append(checks.Instance("w1", 3, 0, S + 100, S + 200, 1))
    assert checks.over_committed(instances, {1: 4, 2: 2, 3: 1}, {"w1": 2, "w2": 2}, now_ms=S + 1000) == \
        ["w1: 3 > 2"]


def test_a_second_job_of_one_submit_is_found_by_request_id_or_by_a_load_name() -> None:
    from soak.load import load_name

    final = {1: FinalJob(1, "DONE", 1, S, name="soak-plain-0", request_id="a"),
             2: FinalJob(2, "DONE", 1, S, name="soak-plain-1", request_id="b"),
             3: FinalJob(3, "DONE", 1, S, name="soak-plain-1", request_id="c"),  # a retry made anew
             4: FinalJob(4, "DONE", 1, S, name="soak-hold-2", request_id="a"),  # one request, two jobs
             5: FinalJob(5, "DONE", 1, S, name="soak-probe", request_id="p1"),
             6: FinalJob(6, "DONE", 1, S, name="soak-probe", request_id="p2")}  # probes share a name
    assert checks.created_twice(final, load_name) == [3, 4]
    assert load_name("soak-tick-12") and not load_name("soak-probe") and not load_name("soak-minority")
