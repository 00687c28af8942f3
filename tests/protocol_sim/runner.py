"""Seeded runs: a safety phase with faults, then a liveness phase without.

Theory of operation (TigerBeetle's VOPR, FoundationDB's simulation): the
seed drives one `random.Random`, which picks every step and every choice
inside it, so the same seed gives the same run. The safety phase takes
weighted random steps among all actions, faults included, and checks every
invariant after each. The liveness phase then stops injecting faults,
restarts what is down and drives every process fairly (deliver everything,
commit and apply everything, let time pass) until every job has ended; a
run that does not converge within its bound fails, as does any invariant.
A failure raises `SimFailure` carrying the seed and the step sequence.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from tla_trace import Step

from controller import fsm
from xce.v1 import api_pb2 as api

from .cluster import APPEND_FAULTS, FAULTS, QUEUE, SCAVENGER, SIM_ACTIONS, SPEC_ACTIONS, URGENT, Options, Sim
from .invariants import check_all

# How often each step is tried in the safety phase (relative).
WEIGHTS: dict[str, float] = {
    "Submit": 6, "LeaderCrash": 0.3, "ElectLeader": 0.6, "CommitApply": 14, "SchedulerPass": 6,
    "ProposeBatch": 5, "LeaseTakeover": 1, "LeaseReply": 6, "SendRun": 1, "SendKill": 1,
    "WorkerStart": 8, "WorkerSignal": 2, "WorkerFinish": 3, "RelayReport": 10, "AckReport": 4,
    "WorkerCrash": 0.3, "WorkerRejoin": 4, "Joined": 4, "HeartbeatTimeout": 1.2, "ResolveHost": 0.5,
    "StreamBreak": 0.8, "Resync": 2, "SyncTail": 0.5, "SyncDeliver": 8, "SyncRepeat": 0.7,
    "SchedulerCrash": 0.2, "Compact": 0.5, "Tick": 5, "DeliverCall": 3, "ClientRetry": 1,
    "ReplicaCrash": 0.2, "ReplicaRestart": 1, "Duplicate": 0.7, "DropCall": 0.3, "Drain": 0.2,
    "SchedulerPause": 0.5, "Deliver": 0.3, "DelayedAppend": 0.7, "DuplicateAppend": 0.7,
}
assert set(WEIGHTS) == {*SPEC_ACTIONS, *SIM_ACTIONS}
LIVENESS_ROUNDS = 300
STRETCH = 60  # steps of one storm or calm
WARM_JOBS = 3
QUIESCE_ROUNDS = 200
# What the liveness phase drives in every round (faults are not among them).
PROGRESS = ("Joined", "WorkerStart", "WorkerSignal", "AckReport", "RelayReport", "SyncDeliver", "DeliverCall",
            "LeaseReply", "WorkerRejoin", "Resync", "ClientRetry")


TRACE_JOBS = 15
URGENT_JOBS = 3  # preempting at the start (with preemption)


class SimFailure(AssertionError):
    def __init__(self, seed: int, error: AssertionError, trace: list[str], tail: int = 120) -> None:
        shown = trace[-tail:]
        lines = [f"seed {seed}: {error}",
                 f"step sequence ({len(trace)} steps that did something; the last {len(shown)}):", *shown]
        super().__init__("\n".join(lines))
        self.seed = seed
        self.error = error


@dataclass
class RunResult:
    seed: int
    safety_steps: int
    liveness_rounds: int
    jobs: int
    seconds: float
    digest: str  # of the step sequence and every replica's final state: same seed, same digest
    stats: dict[str, int]


def run_seed(seed: int, steps: int = 400, options: Options | None = None,
             out: Callable[[str], None] = print) -> RunResult:
    out(f"protocol simulation seed {seed}")
    started = time.perf_counter()
    # Jobs keep arriving through the whole safety phase: one every ~100 steps, at least 10.
    sim = Sim(seed, options or Options(max_jobs=max(10, steps // 100)))
    sim.check = check_all
    try:
        try:
            start(sim)
            safety_phase(sim, steps, random.Random(seed))
            rounds = settle(sim)
        except AssertionError as exc:
            raise SimFailure(seed, exc, sim.trace) from None
        return RunResult(seed, steps, rounds, sim.client.submitted, time.perf_counter() - started,
                         _digest(sim), {**sim.stats, "instances": len(sim.os.processes),
                                        "terms": max(r.term for r in sim.raft.replicas)})
    finally:
        sim.close()


@dataclass
class TracedRun:
    seed: int
    steps: list[Step]
    constants: dict[str, str]
    truncated: str  # why the recording stopped early ("": it did not)
    stats: dict[str, int]  # how often the recorder met each case it maps specially
    failure: str  # the simulation's own invariant failure, if any ("": none)


def traceable(options: Options | None = None, max_jobs: int = TRACE_JOBS) -> Options:
    """The configuration a run is recorded in: the spec's jobs take one slot and are
    rerunnable, and a leader is elected only while none is up. One queue: the recorder does not
    map preemption's steps yet (tla/README.md). No Raft messages delivered again: the spec's log
    stands for what Raft guarantees (the seeds of tests/tla/test_tla_trace.py were chosen on the
    runs without them)."""
    return replace(options or Options(), hosts=2, slots=2, gpu_hosts=0, schedulers=2, max_jobs=max_jobs,
                   trace=True, job_slots=1, rerunnable=True, single_leader=True, preemption=False,
                   append_faults=False)


def trace_seed(seed: int, steps: int = 1500, options: Options | None = None) -> TracedRun:
    """A traceable run of `seed`, recorded as spec actions; the simulation's own invariant
    failure (an injected bug) ends it early, its trace up to there kept."""
    sim = Sim(seed, traceable(options))
    sim.check = check_all
    failure = ""
    try:
        try:
            start(sim)
            safety_phase(sim, steps, random.Random(seed))
            settle(sim)
        except AssertionError as exc:
            failure = str(exc).splitlines()[0]
        assert sim.recorder is not None
        trace, constants = sim.recorder.finish()
        return TracedRun(seed, trace, constants, sim.recorder.truncated, dict(sim.recorder.stats), failure)
    finally:
        sim.close()


def safety_phase(sim: Sim, steps: int, rng: random.Random) -> None:
    """Weighted random steps; faults come in storms (every fault three times as likely)
    between calm stretches (a tenth as likely), so work gets far enough to be hit."""
    names = [n for n in WEIGHTS if sim.options.append_faults or n not in APPEND_FAULTS]
    for step in range(steps):
        if step % STRETCH == 0:
            scale = 3.0 if rng.random() < 0.4 else 0.1
            weights = [WEIGHTS[n] * (scale if n in FAULTS else 1.0) for n in names]
        sim.step(rng.choices(names, weights)[0], rng.getrandbits(30))


def settle(sim: Sim, until: Callable[[Sim], bool] | None = None, max_rounds: int = LIVENESS_ROUNDS) -> int:
    """The liveness phase: no faults, everything delivered, until every job ended
    (or `until` holds); each round ends with time passing by 0.3 s."""
    done = until or _converged
    sim.liveness = True
    try:
        for node in sim.workers.values():
            node.draining = False
        for round_ in range(1, max_rounds + 1):
            while sim.step("ReplicaRestart", 0) is not None:
                pass
            _quiesce(sim)
            check_all(sim)
            if done(sim):
                return round_
            sim.step("Tick", 200)
            _finish_due(sim)
            sim.step("HeartbeatTimeout", 0)
            sim.step("ResolveHost", 0)
            check_all(sim)
    finally:
        sim.liveness = False
    unfinished = [(j.id, j.attempt, api.JobState.Name(j.state), j.host, j.pending_reason)
                  for j in sim.unfinished_jobs()]
    raise AssertionError(f"liveness: not done after {max_rounds} rounds without faults: unfinished jobs "
                         f"{unfinished}; client waiting for {sorted(sim.client.pending)}; "
                         f"leaders {[r.rid for r in sim.raft.leaders()]}")


def start(sim: Sim, jobs: int = WARM_JOBS) -> None:
    """Before the faults: a leader, workers joined, a scheduler with the lease and `jobs`
    jobs submitted and started, so the first fault meets work in flight. With preemption, the
    jobs fill every slot, and urgent jobs preempt some of them: the first faults meet victims
    requeued, victims stopping, their reports, the preemptors' dispatches and the victims' resumes
    (these jobs do not count against max_jobs)."""
    settle(sim, bootstrapped)
    options = sim.options
    if options.preemption:
        jobs = max(jobs, options.hosts * options.slots)
        sim.client.warm = jobs + URGENT_JOBS
        # Jobs of one slot, a quarter of them in `scavenger` (requeued when preempted), the rest in
        # `normal` (suspended).
        picks = []
        for k in range(jobs):
            picks.append(sim.pick_for(SCAVENGER if k % 4 == 3 else QUEUE, picks[-1] if picks else 0))
    else:
        picks = [pick * 4 * 16 for pick in range(jobs)]  # a new job (pick even) to the leader
    for pick in picks:
        sim.step("Submit", pick)
    settle(sim, lambda s: len(s.os.processes) >= jobs)
    if options.preemption:
        pick = 0
        for _ in range(URGENT_JOBS):
            pick = sim.pick_for(URGENT, pick)
            sim.step("Submit", pick)
        settle(sim, lambda s: sum(j.spec.queue == URGENT and (bool(j.preempting) or j.state != api.PEND)
                                  for j in s.unfinished_jobs()) == URGENT_JOBS)


def bootstrapped(sim: Sim) -> bool:
    """A serving leader, every worker joined, a scheduler holding the lease with a view."""
    return bool(sim.serving_drivers()) and all(n.joined for n in sim.workers.values()) and any(
        s.holds_lease() and s.view.revision > 0 for s in sim.schedulers.values())


def _finish_due(sim: Sim) -> None:
    for process in sorted(sim.os.live(), key=lambda p: p.pid):
        if process.ends_at_ms <= sim.now_ms and process.alive:
            sim.step("WorkerFinish", sorted(p.pid for p in sim.os.live()).index(process.pid) | (1 << 5))


def _fingerprint(sim: Sim) -> tuple[object, ...]:
    return (tuple((r.up, r.term, r.commit, r.applied, r.last_index(), r.leading) for r in sim.raft.replicas),
            tuple((s.sid, len(s.up), len(s.down)) for s in sim.streams.values()), len(sim.calls),
            len(sim.replies), tuple(s.view.revision for s in sim.schedulers.values()),
            len(sim.client.pending), len(sim.os.processes), len(sim.os.live()),
            tuple((n.joined, n.daemon is None) for n in sim.workers.values()))


def _quiesce(sim: Sim) -> None:
    """Deliver, commit and apply until nothing moves (bounded)."""
    for _ in range(QUIESCE_ROUNDS):
        before = _fingerprint(sim)
        if not sim.raft.leaders():
            sim.elect_most_up_to_date()
        for pick in range(len(sim.raft.leaders())):
            sim.step("CommitApply", pick)
        for name in PROGRESS:
            for pick in range(4):
                sim.step(name, pick)
        for pick in range(len(sim.schedulers)):
            sim.step("SchedulerPass", pick)
        if _fingerprint(sim) == before:
            return


def _digest(sim: Sim) -> str:
    digest = hashlib.sha256("\n".join(sim.trace).encode())
    for replica in sim.raft.replicas:
        for chunk in fsm.canonical_dump(replica.tables):
            digest.update(chunk)
    return digest.hexdigest()


def _converged(sim: Sim) -> bool:
    return not sim.client.pending and not sim.unfinished_jobs() and not sim.os.live()


__all__ = ["FAULTS", "RunResult", "SimFailure", "TracedRun", "bootstrapped", "run_seed",
           "safety_phase", "settle", "start", "trace_seed", "traceable"]
