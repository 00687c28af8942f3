"""What the specification assumes, shown necessary on the real code.

tla/XceBarrier.tla lets the leader give up on a host (ResolveHost: its
rerunnable UNKWN jobs are requeued) only when that host's instances are
dead: the timing assumption that `unknown_timeout_s` outlasts any outage a
host's instances survive. The worker does not fence itself (it keeps its
jobs running however long it is cut off), so without the assumption a
cut-off host's job runs twice. This scenario drops the assumption and
expects NoDoubleRun to fail (tla/README.md, Findings).
"""

from __future__ import annotations

import pytest
from protocol_sim.cluster import Options, Sim
from protocol_sim.invariants import NoDoubleRun
from protocol_sim.leader import UNKNOWN_TIMEOUT_S
from protocol_sim.runner import start

RERUNNABLE_JOB = 8  # Submit's pick: a new job (even), one slot, rerunnable (bit 3)
PROGRESS = ("CommitApply", "DeliverCall", "LeaseReply", "SyncDeliver", "SchedulerPass", "ProposeBatch",
            "RelayReport", "Joined", "WorkerStart", "WorkerSignal", "AckReport", "HeartbeatTimeout",
            "ResolveHost")


def cut_off_past_unknown_timeout(options: Options) -> Sim:
    """A rerunnable job runs on a host whose stream then breaks for 25 s (a partition: the worker
    and its job live on, unreachable); NoDoubleRun is checked after every step."""
    sim = Sim(1, options)
    try:
        start(sim, jobs=0)
        sim.step("Submit", RERUNNABLE_JOB)
        for _ in range(50):
            for name in PROGRESS:
                sim.step(name, 0)
        job_id = max(sim.client.acked)
        [first] = [p for p in sim.os.live() if p.key[0] == job_id]
        cut_off = sim.workers[first.host]
        assert cut_off.stream is not None
        cut_off.stream.close()  # a partition: the worker and its job live on, unreachable
        for _ in range(60):  # 25 s: past the heartbeat timeout (2 s) and unknown_timeout (6 s)
            sim.step("Tick", 399)  # 0.42 s
            for name in PROGRESS:
                for pick in range(3):
                    sim.step(name, pick)
            NoDoubleRun(sim)
        return sim
    finally:
        sim.close()


def test_giving_up_on_a_host_that_is_only_cut_off_runs_its_job_twice_without_the_fence() -> None:
    with pytest.raises(AssertionError, match="runs twice"):
        cut_off_past_unknown_timeout(Options(resolve_needs_dead_host=False, max_jobs=4, fence_s=0.0,
                                             preemption=False))


def test_with_the_worker_side_fence_a_host_cut_off_past_unknown_timeout_runs_nothing_twice() -> None:
    # fence_s 3 + kill_grace_s 1 < unknown_timeout_s 6: the cut-off worker kills the job first.
    sim = cut_off_past_unknown_timeout(Options(resolve_needs_dead_host=False, max_jobs=4,
                                               fence_s=UNKNOWN_TIMEOUT_S / 2, preemption=False))
    [job_id] = sim.client.acked
    runs = sorted((p.key[1], p.host, p.alive) for p in sim.os.processes.values() if p.key[0] == job_id)
    assert len(runs) >= 2, runs  # the fenced instance died, and the job ran again, elsewhere
    first, second = runs[0], runs[1]
    assert not first[2] and second[0] > first[0] and second[1] != first[1]
