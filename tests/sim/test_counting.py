"""The counted simulation (simulator/counting.py) against the faithful one (every event through the real
apply and scheduler): the same start, end and job id for every job, the same samples, on every shared
trace and on seeded traces of wide jobs, under each backfill mode; and the rules on a hand-made trace.
Windows here (every mode on Lublin-1's, EASY on the others'); every mode on 3,000 jobs of each trace and
twenty seeds under `make test-slow` (and bench/sim_speed.py)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from simulator import counting, engine, swf, workload
from xce.v1 import api_pb2 as api

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT.parent / "shared" / "traces"
MODES = ("any", "none", "easy", "end_before")
SHARED = ("lublin_256.swf", "lublin_256_new2.swf", "NASA-iPSC-1993-3.1-cln.swf.gz")


def _queue(mode: str) -> api.Queue:
    return api.Queue(name="normal", backfill="" if mode == "any" else mode)


def _same(w: workload.Workload, ordering: str = "each") -> tuple[dict[int, int], engine.Result]:
    """Both paths' results held equal; the start times by key."""
    assert counting.why_not(w) is None
    counted, faithful = counting.simulate(w, ordering), engine.simulate(w, engine.Settings(ordering=ordering))
    assert faithful.unfinished == counted.unfinished == 0
    assert [(f.key, f.job_id, f.start_ms, f.end_ms, f.state) for f in counted.finished] == \
        [(f.key, f.job_id, f.start_ms, f.end_ms, f.state) for f in faithful.finished]
    assert counted.samples == faithful.samples
    return {f.key: f.start_ms for f in counted.finished}, counted


def _window(name: str, first: int, count: int) -> swf.Trace:
    trace = swf.read(TRACES / name)
    return swf.Trace(trace.jobs[first:first + count], trace.header)


# Every mode on Lublin-1's first published window (from 1981, where its queue is long); EASY on the other
# traces (the slow tier: every mode on 3,000 jobs of each).
@pytest.mark.parametrize(("name", "mode"), [*(("lublin_256.swf", mode) for mode in MODES),
                                            ("lublin_256_new2.swf", "easy"),
                                            ("NASA-iPSC-1993-3.1-cln.swf.gz", "easy")])
def test_counted_starts_are_the_faithful_ones_on_each_shared_trace(name: str, mode: str) -> None:
    first = 1981 if name.startswith("lublin") else 0
    _same(workload.from_swf(_window(name, first, 200), name, queue=_queue(mode)))


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", SHARED)
def test_counted_starts_are_the_faithful_ones_on_3000_jobs_of_each_shared_trace(name: str, mode: str) -> None:
    # (The faithful path passes over every waiting job at every event: on the Lublin traces, whose queues
    # grow to thousands, the whole trace takes it most of an hour a mode.)
    _same(workload.from_swf(_window(name, 0, 3000), name, queue=_queue(mode)))


@pytest.mark.parametrize("mode", ("none", "easy"))
def test_counted_starts_are_the_faithful_ones_in_accasim_s_event_order(mode: str) -> None:
    trace = swf.read(TRACES / "lublin_256.swf", "accasim")
    window = swf.Trace(trace.jobs[1981:2131], trace.header)
    _same(workload.from_swf(window, "lublin", queue=_queue(mode)), "time")


def test_accasim_s_order_passes_once_every_end_and_arrival_of_a_time_is_in() -> None:
    """Three one-slot hosts: A (ends at 10) and C run; H (2 slots) waits from 1; B (1) arrives at 10.
    After each event, arrivals first (backfill any): B starts in the free slot at once, and H waits for
    it to end (15). At each time: A's end and B's arrival are both in before the pass, H (first) starts,
    and B waits for it (20)."""
    rows = [(0, 10, 1), (0, 100, 1), (1, 10, 2), (10, 5, 1)]
    jobs = [workload.SimJob(i + 1, submit * 1000, run * 1000, api.JobSpec(
                command=["sim"], queue="normal", slots=slots, user="ann", estimate_s=run))
            for i, (submit, run, slots) in enumerate(rows)]
    w = workload.Workload(jobs, workload.one_slot_hosts(3), [_queue("any")], "order")
    each, _ = _same(w)
    at_once, _ = _same(w, "time")
    assert (each[4], each[3]) == (10_000, 15_000) and (at_once[3], at_once[4]) == (10_000, 20_000)


def _wide(seed: int, jobs: int, mode: str) -> None:
    trace = workload.wide_trace(jobs, hosts=100, widths=(8, 64), seed=seed)
    starts, _ = _same(workload.from_swf(trace, f"wide {seed}", queue=_queue(mode)))
    assert len(set(starts.values())) > jobs // 5  # (jobs start at many times: the trace queues)


@pytest.mark.parametrize("mode", MODES)
def test_counted_starts_are_the_faithful_ones_on_a_seeded_wide_job_trace(mode: str) -> None:
    _wide(1, 100, mode)


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("seed", range(1, 21))
def test_counted_starts_are_the_faithful_ones_on_twenty_seeded_wide_job_traces(seed: int, mode: str) -> None:
    _wide(seed, 500, mode)


def _hand_made(mode: str) -> workload.Workload:
    """Seven one-slot hosts. A (3 slots) and B (2) run from 0 to 100, estimated so; C (1) estimated 50 s
    runs 300; the wide head H (5, 10 s) arrives at 10; D (1, 1000 s) at 20, E (1, 30 s) at 60."""
    rows = [(0, 3, 100, 100), (0, 2, 100, 100), (0, 1, 50, 300), (10, 5, 10, 10), (20, 1, 1000, 1000),
            (60, 1, 30, 30)]
    jobs = [workload.SimJob(i + 1, submit * 1000, run * 1000, api.JobSpec(
                command=["sim"], queue="normal", slots=slots, user="ann", estimate_s=estimate))
            for i, (submit, slots, estimate, run) in enumerate(rows)]
    return workload.Workload(jobs, workload.one_slot_hosts(7), [_queue(mode)], "hand-made")


def test_easy_and_end_before_on_a_hand_made_trace_by_both_paths() -> None:
    # EASY: H's shadow time is 100, when A and B both end: 1 + 1 (C, by its estimate) + 3 + 2 = 7 slots,
    # 2 over its 5. D fits only in those extra slots and starts at 20. E (at 60) finds no free slot; at
    # 100 A's end leaves 3 free and H's shadow moves to D's expected end (C, past its estimate, is due
    # any moment): E ends before it and starts; H starts when E ends, at 130.
    starts, _ = _same(_hand_made("easy"))
    assert (starts[5], starts[6], starts[4]) == (20_000, 100_000, 130_000)
    # end_before: H's reservation is 100, kept; D would end after it and waits; E ends before it and
    # starts at 60; at 100 A and B end, H starts, and D after it.
    starts, _ = _same(_hand_made("end_before"))
    assert (starts[6], starts[4], starts[5]) == (60_000, 100_000, 100_000)


def test_only_what_counting_decides_alike_is_counted() -> None:
    w = _hand_made("easy")
    assert counting.why_not(dataclasses.replace(w, hosts=workload.host_specs(2, 4))) is not None
    assert counting.why_not(dataclasses.replace(w, queues=[_queue("conservative")])) is not None
    limited = dataclasses.replace(w.jobs[0], spec=api.JobSpec(command=["sim"], queue="normal", slots=1,
                                                              estimate_s=5, run_limit_s=10))
    assert counting.why_not(dataclasses.replace(w, jobs=[limited, *w.jobs[1:]])) is not None
    # Wider than a cluster's default cap (1,024 slots): the simulated cluster takes it, on both paths;
    # an estimate past apply's ten years is left to the faithful path, which refuses it.
    def one(slots: int, estimate_s: int) -> workload.Workload:
        spec = api.JobSpec(command=["sim"], queue="normal", slots=slots, user="ann", estimate_s=estimate_s)
        return workload.Workload([workload.SimJob(1, 0, 10_000, spec)], workload.one_slot_hosts(1100),
                                 [_queue("any")], "one")
    assert _same(one(1100, 60))[0] == {1: 0}
    assert counting.why_not(one(1, 11 * 366 * 86400)) is not None
    with pytest.raises(engine.SimulationError, match="ten years"):
        counting.run(one(1, 11 * 366 * 86400))
    fair = engine.Settings(default_picker="fairshare")
    assert counting.countable(w, fair) is None
    # A queue's what-if is counted, applied to the queue (as the faithful path applies it at the start).
    from simulator import whatif
    easy_to_none = engine.Settings(whatif=whatif.parse(["queue.normal.backfill=none"]))
    counted = counting.countable(w, easy_to_none)
    assert counted is not None and counted.queues[0].backfill == "none"
    assert counting.run(w, easy_to_none).path == "counted"
    assert counting.run(w, easy_to_none, faithful=True).path == "faithful"
    assert [f.start_ms for f in counting.run(w, easy_to_none).finished] == \
        [f.start_ms for f in engine.simulate(w, easy_to_none).finished]


def test_xce_sim_counts_where_it_may_and_gives_the_faithful_figures() -> None:
    args = [sys.executable, "-m", "cli", "sim", "--swf", str(TRACES / "lublin_256.swf"),
            "--window", "1981:200", "--backfill", "easy", "--json"]
    counted = json.loads(subprocess.run(args, check=True, capture_output=True, text=True, cwd=ROOT).stdout)
    faithful = json.loads(subprocess.run([*args, "--faithful"], check=True, capture_output=True, text=True,
                                         cwd=ROOT).stdout)
    assert counted["simulation"]["path"] == "counted" and faithful["simulation"]["path"] == "faithful"
    assert counted["overall"] == faithful["overall"] and counted["overall"]["jobs"] == 200
