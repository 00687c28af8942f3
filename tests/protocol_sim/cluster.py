"""The whole cluster in one process: `Sim`, stepped one named action at a time.

Theory of operation. Every step is one action of tla/XceBarrier.tla (same
name), or one of a few simulation-only steps (time passing, follower
crashes, network faults); `step(name, pick)` runs it, with `pick` (an
integer from a seeded generator or from hypothesis) choosing among what the
action could do: which replica, which stream, which message. An action with
nothing to do returns None and changes nothing. The interleaving of steps is
the simulated network's delay and reordering; the same picks give the same
run, byte for byte (no wall clock, no threads, no unordered iteration).

The processes are the real code: each replica's `LeaderCore` (leader.py
drives it), each scheduler's `Decider` (scheduler_node.py), each host's
`Worker` and `Executor` (worker_node.py), on the simulated clock. What is
simulated is only what is around them: Raft (raft.py), the network
(network.py), the operating system under the executor, and time. Injected
bugs come in through `Options` (bugs.py); nothing here changes a
production module.

Ghost state for the checks (invariants.py) is recorded as entries apply for
the first time on any replica (applied implies committed): the state hash
after each index (replicas must agree), the view a scheduler at that revision
must hold, the placements committed so far, and which join of a host each
proposal's generation stood for.
"""

from __future__ import annotations

import hashlib
import random
import shutil
import tempfile
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from controller import fsm, sync_stream
from controller.raft_append import plan_append
from scheduler.planner import PlannerConfig
from scheduler.view import View
from xce import worker_wire
from xce.clock import ManualClock
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

from .leader import CLUSTER, QUEUE, SCAVENGER, UNKNOWN_TIMEOUT_S, URGENT, ReplicaDriver
from .network import Call, Reply, Stream
from .raft import AppendRule, LogEntry, RaftCluster, Replica
from .scheduler_node import SchedulerNode
from .trace import TraceRecorder
from .worker_node import SimOS, WorkerNode

STAMP0_MS = 1_700_000_000_000
CALL_TIMEOUT_MS = 5_000
# The timing assumption of ResolveHost, made physical: a host unavailable this
# long before the leader gives up on it is down (its processes are dead).
HOST_DEAD_AFTER_MS = int(UNKNOWN_TIMEOUT_S * 1000) - 1_000
REFUSAL_COOLDOWN_MS = PlannerConfig().refusal_cooldown_ms  # what RefusalRespected holds a pass to

# The actions of tla/XceBarrier.tla, in its order; the simulation-only steps after them.
SPEC_ACTIONS = (
    "Submit", "LeaderCrash", "ElectLeader", "CommitApply", "SchedulerPass", "ProposeBatch",
    "LeaseTakeover", "LeaseReply", "SendRun", "SendKill", "WorkerStart", "WorkerSignal", "WorkerFinish",
    "RelayReport", "AckReport", "WorkerCrash", "WorkerRejoin", "Joined", "HeartbeatTimeout",
    "ResolveHost", "StreamBreak", "Resync", "SyncTail", "SyncDeliver", "SyncRepeat", "SchedulerCrash",
    "Compact",
)
SIM_ACTIONS = ("Tick", "Deliver", "DeliverCall", "ClientRetry", "ReplicaCrash", "ReplicaRestart", "Duplicate",
               "DropCall",
               "Drain", "SchedulerPause", "DelayedAppend", "DuplicateAppend")
# Controller-to-worker message kinds with a delivery step of their own; WorkerSignal takes the rest.
DELIVERED_BY_KIND = {"run", "ack", "joined"}
APPEND_FAULTS = ("DelayedAppend", "DuplicateAppend")
FAULTS = ("LeaderCrash", "ElectLeader", "WorkerCrash", "StreamBreak", "SchedulerCrash", "ReplicaCrash",
          "Duplicate", "DropCall", "Drain", "SyncRepeat", "Compact", "HeartbeatTimeout", "SchedulerPause",
          "DelayedAppend", "DuplicateAppend")


@dataclass
class Options:
    hosts: int = 4
    slots: int = 2
    gpu_hosts: int = 2  # the first hosts have one GPU each ([resources] gpu = 1)
    # Jobs of 1-8 slots, over 1-4 hosts (the k-host rule spreads them); a small one may reserve a GPU.
    job_sizes: tuple[int, ...] = (1, 1, 1, 2, 2, 3, 4, 8)
    schedulers: int = 2
    max_jobs: int = 10
    # Three queues, the highest preempting the others (leader.queues): a job goes to `urgent` two
    # times in five, to `scavenger` one in five. Suspended victims stop after a delay, as a process
    # in uninterruptible sleep does (SimProcessHost.killpg).
    preemption: bool = True
    events_kept: int = 4  # small, so Sync streams fall behind the events floor and resync by snapshot
    # The timing assumption of the spec's ResolveHost: a host unavailable past
    # unknown_timeout_s is down, its instances dead. False lets the leader give
    # up on a host that is only cut off (see tla/README.md, findings).
    resolve_needs_dead_host: bool = True
    # The worker-side fence (worker/daemon.py), on as in production (half of unknown_timeout_s);
    # 0 is off. A worker that hears no answer for fence_s kills its rerunnable jobs before the
    # leader gives up on its host.
    fence_s: float = UNKNOWN_TIMEOUT_S / 2
    # Injected bugs (bugs.py) come in here, never by changing a production module:
    run_before_commit: bool = False  # sessions read proposed, not committed, state
    handlers: Mapping[str, fsm.Handler] = field(default_factory=lambda: dict(fsm.HANDLERS))  # apply's table
    append_rule: AppendRule = plan_append  # a follower's AppendEntries rule: the Raft adapter's
    view_factory: Callable[[], View] = View  # the schedulers' view
    planner: PlannerConfig = field(default_factory=PlannerConfig)  # the schedulers' planner
    # Traceable runs (trace.py): the run is recorded as spec actions, and kept within what the
    # spec can follow: one leader at a time, jobs of one slot that are rerunnable.
    trace: bool = False
    job_slots: int | None = None  # None: one of job_sizes at random
    rerunnable: bool | None = None  # None: at random
    single_leader: bool = False  # no election while a leader is up (not even one deposed unawares)
    # Raft's messages delivered again, late or at once (DelayedAppend, DuplicateAppend): below the spec,
    # whose log is what Raft guarantees.
    append_faults: bool = True


@dataclass
class Client:
    pending: dict[str, api.SubmitJobsRequest] = field(default_factory=dict)
    acked: dict[int, int] = field(default_factory=dict)  # job id -> revision of its commit
    submitted: int = 0
    warm: int = 0  # submitted by runner.start beyond max_jobs


T = TypeVar("T")


def _pick(items: list[T], pick: int) -> T | None:
    return items[pick % len(items)] if items else None


def _hash(chunks: object) -> bytes:
    digest = hashlib.sha256()
    for chunk in chunks:  # type: ignore[attr-defined]
        digest.update(chunk)
    return digest.digest()


class Sim:
    def __init__(self, seed: int, options: Options | None = None) -> None:
        self.seed = seed
        self.options = options or Options()
        self.handlers = self.options.handlers
        self.rng = random.Random(seed)
        self.clock = ManualClock(STAMP0_MS)
        self.root = Path(tempfile.mkdtemp(prefix="xce-sim-"))
        self.os = SimOS(self)
        self.violations: list[str] = []
        self.raft = RaftCluster(3, self._on_apply, self.handlers, self.options.append_rule, self.violations)
        self.drivers: dict[int, ReplicaDriver] = {}
        self.roles: dict[int, tuple[bool, int]] = {}  # what each driver was last told: (leading, term)
        self.streams: dict[int, Stream] = {}
        self.calls: list[Call] = []
        self.replies: list[Reply] = []
        self.delayed: list[tuple[int, Call]] = []  # calls held by a stalled sender until then
        self._ids = 0
        self.workers = {f"h{i}": WorkerNode(self, f"h{i}", self.options.slots,
                                            gpus=int(i <= self.options.gpu_hosts))
                        for i in range(1, self.options.hosts + 1)}
        self.schedulers = {f"s{i}": SchedulerNode(f"s{i}", self.clock, self.options.view_factory,
                                                  self.options.planner)
                           for i in range(1, self.options.schedulers + 1)}
        self.client = Client()
        self.recorder = TraceRecorder(self) if self.options.trace else None
        # ghost state for the invariants
        self.ghosts: dict[tuple[int, int], list[tuple[str, int]]] = {}
        self.max_applied = 0
        self.state_hashes: dict[int, bytes] = {}
        self.view_hashes: dict[int, bytes] = {0: View().dump()}
        self.placements: set[tuple[int, int, str]] = set()
        self.preempted: set[tuple[int, int]] = set()  # (victim, its preemptions): counted in stats
        self.join_indices: dict[str, list[int]] = {name: [] for name in self.workers}
        self.join_generations: dict[str, list[int]] = {name: [] for name in self.workers}
        self.refused_now: dict[tuple[int, int], tuple[str, int]] = {}  # pending refusals: (host, stamp)
        self.refused_at: dict[int, dict[tuple[int, int], tuple[str, int]]] = {}  # ... after each index
        self.judged: dict[str, set[tuple[int, int]]] = {}  # invariant -> (replica, applied index) it holds in
        self.entries_checked: dict[int, int] = {}  # replica -> committed entries compared so far
        self.stats: Counter[str] = Counter()  # how often the interesting cases happened
        self.trace: list[str] = []
        self.steps = 0
        self.liveness = False
        self.check: Callable[[Sim], None] | None = None  # the invariants, set by the runner
        self.actions: dict[str, Callable[[int], str | None]] = {
            name: getattr(self, name) for name in (*SPEC_ACTIONS, *SIM_ACTIONS)}
        for replica in self.raft.replicas:
            self.drivers[replica.rid] = ReplicaDriver(self, replica)
        for node in self.workers.values():
            node.boot()

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    @property
    def now_ms(self) -> int:
        return self.clock.now_ms()

    def now_s(self) -> float:
        return self.clock.monotonic_s()

    def next_id(self) -> int:
        self._ids += 1
        return self._ids

    # -------------------------------------------------------------- stepping

    def step(self, name: str, pick: int) -> str | None:
        done = self.actions[name](pick)
        self._settle_drivers()
        self._reap()
        for node in self.workers.values():
            node.pump()
        self.steps += 1
        if done is not None:
            self.trace.append(f"{self.steps:5d} t={self.now_s():7.2f}s {name}: {done}")
            if self.check is not None:
                self.check(self)  # after every step that did something: a failure names its step
        return done

    def _settle_drivers(self) -> None:
        """What each replica's driver does between events: tell the core of a role change,
        of streams its workers closed, and poll while a new leader is catching up."""
        for rid, driver in sorted(self.drivers.items()):
            replica = driver.replica
            role = (replica.up and replica.leading, replica.term)
            if self.roles.get(rid) != role:
                self.roles[rid] = role
                driver.poll()
            driver.notice_closed_streams()
            if driver.core.leadership is not None and not driver.serving():
                driver.poll()
            for _ in range(1000):  # the driver takes the next turn at once while work waits
                if not driver.core.busy():
                    break
                driver.poll()

    def enabled(self, name: str) -> bool:
        """A cheap over-approximation of whether `name` could do anything now (for
        hypothesis' preconditions: fewer wasted steps). True when unsure."""
        streams = [s for s in self.streams.values() if s.open]
        heads = {m.WhichOneof("body") for s in streams if s.kind == "worker" and s.down
                 for m in worker_wire.controller_messages(s.down[0])}
        checks: dict[str, Callable[[], bool]] = {
            "WorkerStart": lambda: "run" in heads,
            "WorkerSignal": lambda: bool(heads - DELIVERED_BY_KIND),
            "AckReport": lambda: "ack" in heads,
            "Joined": lambda: "joined" in heads,
            "RelayReport": lambda: any(s.kind == "worker" and s.up for s in streams),
            "SyncDeliver": lambda: any(s.kind == "sync" and s.down for s in streams),
            "ProposeBatch": lambda: any(c.kind == "batch" for c in self.calls),
            "DeliverCall": lambda: bool(self.calls),
            "LeaseReply": lambda: bool(self.replies),
            "WorkerFinish": lambda: bool(self.os.live()),
            "CommitApply": lambda: bool(self.raft.leaders()),
            "LeaderCrash": lambda: bool(self.raft.leaders()),
            "ReplicaRestart": lambda: any(not r.up for r in self.raft.replicas),
            "DelayedAppend": lambda: len(self.raft.sent) > 1,
            "DuplicateAppend": lambda: bool(self.raft.sent),
            "SendRun": lambda: bool(self.serving_drivers()),
            "SendKill": lambda: bool(self.serving_drivers()),
            "HeartbeatTimeout": lambda: bool(self.serving_drivers()),
            "ResolveHost": lambda: bool(self.serving_drivers()),
            "Resync": lambda: bool(self.serving_drivers()) and any(s.stream is None for s in self._awake()),
            "WorkerRejoin": lambda: any(n.daemon is None or (n.stream is None and self.raft.leaders())
                                        for n in self.workers.values()),
            "SchedulerPass": lambda: any(s.holds_lease() and s.view.revision > 0 for s in self._awake()),
            "SyncTail": lambda: any(link.feed.revision < driver.replica.applied for driver in
                                    self.drivers.values() for link in driver.syncs.values()),
            "SyncRepeat": lambda: any(driver.syncs for driver in self.drivers.values()),
            "ClientRetry": lambda: bool(self.client.pending) and bool(self.raft.leaders()),
            "ElectLeader": lambda: any(len(self.raft.eligible_voters(r)) + 1 >= self.raft.majority()
                                       for r in self.raft.replicas if r.up and not r.leading),
        }
        check = checks.get(name)
        return check() if check is not None else True

    def _reap(self) -> None:
        """Endpoints notice streams that ended (the gRPC call raises)."""
        for node in self.workers.values():
            if node.stream is not None and not node.stream.open:
                node.disconnect()
        for scheduler in self.schedulers.values():
            if scheduler.stream is not None and not scheduler.stream.open:
                scheduler.stream_ended()
        self.streams = {sid: s for sid, s in self.streams.items() if s.open}

    def serving_drivers(self) -> list[ReplicaDriver]:
        return [self.drivers[r.rid] for r in self.raft.leaders()
                if r.rid in self.drivers and self.drivers[r.rid].serving()]

    def _target(self, pick: int) -> Replica | None:
        """Where a client, worker or scheduler goes: a replica that says it leads
        (following leader hints); with two (one deposed, not knowing it), either."""
        return _pick(self.raft.leaders(), pick)

    def _open(self, kind: str, endpoint: str, replica: Replica) -> Stream:
        stream = Stream(self.next_id(), kind, endpoint, replica.rid)
        if self.recorder is not None:
            stream.on_close = self.recorder.on_close
        self.streams[stream.sid] = stream
        return stream

    # -------------------------------------------------------------- apply hook and ghost state

    def _on_apply(self, replica: Replica, index: int, entry: LogEntry,
                  results: list[log.Result] | None) -> None:
        if self.recorder is not None:
            self.recorder.on_apply(replica, index, entry)
        if results is not None:
            digest = _hash(fsm.canonical_dump(replica.tables))
            expected = self.state_hashes.setdefault(index, digest)
            if expected != digest:
                self.violations.append(f"TypeOK: replica {replica.rid} state after {index} differs")
        if index > self.max_applied and entry.data is not None and results is not None:
            self.max_applied = index
            self._first_apply(replica, index, entry, results)
        driver = self.drivers.get(replica.rid)
        if driver is not None:
            driver.on_applied(index, entry, results)

    def _first_apply(self, replica: Replica, index: int, entry: LogEntry, results: list[log.Result]) -> None:
        tables = replica.tables
        view = View()
        for message in sync_stream.snapshot(tables, CLUSTER):
            view.apply(message)
        self.view_hashes[index] = view.dump()
        decoded = log.Entry.FromString(entry.data or b"")
        event = log.Event.FromString(tables.get("events", fsm.revision_key(index)) or b"")
        changed = [c for c in event.changes if c.table in ("jobs", "hosts") and not c.deleted]
        for change in changed:
            if change.table == "jobs":
                job = api.Job.FromString(change.value)
                if job.host and job.state in fsm.RUNNING:
                    self.placements.add((job.id, job.attempt, job.host))
                if job.preempted_by and (job.id, job.preemptions) not in self.preempted:
                    self.preempted.add((job.id, job.preemptions))
                    self.stats["requeue victims" if job.requeue_requested else "suspend victims"] += 1
                for key in [k for k in self.refused_now if k[0] == job.id]:
                    del self.refused_now[key]
                if job.state == api.PEND and job.pending_code == api.PEND_DISPATCH_REFUSED:
                    self.refused_now[(job.id, job.attempt)] = (job.refused_host, decoded.stamp_ms)
        self.refused_at[index] = dict(self.refused_now)
        kind = decoded.WhichOneof("body")
        joins = [decoded.join_host] if kind == "join_host" else \
            list(decoded.joins.joins) if kind == "joins" else []
        for spec, result in zip(joins, results if joins else [], strict=True):
            if result.code != log.OK:
                continue
            name = spec.name
            self.join_indices[name].append(index)
            previous = self.join_generations[name][-1] if self.join_generations[name] else 0
            self.join_generations[name].append(result.generation)
            if result.generation <= previous:
                self.violations.append(f"FreshGeneration: join of {name} at entry {index} got generation "
                                       f"{result.generation}, not above the last one ({previous})")
        if kind == "decisions":
            self._check_batch(tables, index, decoded, changed)
        for position, (host, ordinal) in enumerate(self.ghosts.pop((index, entry.term), [])):
            current = self.join_ordinal_at(host, index - 1)
            took = position < len(results) and results[position].code == log.OK
            self.stats["stale generations"] += ordinal < current
            if ordinal < current and took:
                self.violations.append(f"StaleConnectionNoEffect: entry {index} ({kind}) carries join "
                                       f"#{ordinal} of {host}, which joined #{current} since, "
                                       "and took effect")

    def _check_batch(self, tables: fsm.Tables, index: int, decoded: log.Entry,
                     changed: list[log.Change]) -> None:
        batch = decoded.decisions
        meta = fsm.read_meta(tables)  # a decisions entry leaves the lease as it found it
        stale = (batch.lease_epoch != meta.lease_epoch or batch.scheduler_id != meta.lease_holder
                 or decoded.stamp_ms >= meta.lease_expires_ms)
        self.stats["stale batches"] += stale
        if stale and changed:
            self.violations.append(f"StaleLeaseNoEffect: entry {index}, a batch of {batch.scheduler_id} "
                                   f"epoch {batch.lease_epoch} (current {meta.lease_epoch} held by "
                                   f"{meta.lease_holder}) changed {len(changed)} records")
        # The pass recorded its inputs: the view it saw (at base_revision) and its clock.
        refused = self.refused_at.get(batch.base_revision, {})
        cooldown = REFUSAL_COOLDOWN_MS
        for decision in batch.decisions:
            if not decision.HasField("dispatch"):
                continue
            for (job, attempt), (host, stamp) in sorted(refused.items()):
                # The planner's clock is the scheduler's monotonic one; here it runs with the
                # leader's stamps, STAMP0_MS apart.
                if host == decision.dispatch.host and batch.clock_ms < stamp - STAMP0_MS + cooldown:
                    self.violations.append(
                        f"RefusalRespected: entry {index}, a pass at {batch.clock_ms} on the view at "
                        f"revision {batch.base_revision} dispatches job {decision.dispatch.job_id} to "
                        f"{host}, whose worker refused job {job}.{attempt} at {stamp - STAMP0_MS} "
                        f"(cool-down {cooldown} ms)")
                    return

    def ghosts_of(self, entry: log.Entry) -> list[tuple[str, int]]:
        """Which join of its host each report or status change of a proposal stands for."""
        kind = entry.WhichOneof("body")
        if kind == "reports":
            return [(r.host, self.ordinal_of(r.host, r.generation)) for r in entry.reports.reports]
        if kind in ("host_status", "resolve_host"):
            change = getattr(entry, kind)
            return [(change.name, self.ordinal_of(change.name, change.generation))]
        if kind == "host_statuses":
            return [(c.name, self.ordinal_of(c.name, c.generation)) for c in entry.host_statuses.changes]
        return []

    def ordinal_of(self, host: str, generation: int) -> int:
        """The join (1, 2, ...) that gave `host` this generation; 0: none did."""
        generations = self.join_generations.get(host, [])
        for position in range(len(generations) - 1, -1, -1):
            if generations[position] == generation:
                return position + 1
        return 0

    def join_ordinal_at(self, host: str, index: int) -> int:
        return sum(1 for i in self.join_indices[host] if i <= index)

    def placement_committed(self, job_id: int, attempt: int, host: str) -> bool:
        return (job_id, attempt, host) in self.placements

    def committed_job(self, job_id: int) -> api.Job | None:
        replica = self.committed_tables()
        return fsm.read_job(replica.tables, job_id) if replica is not None else None

    def new_job(self, pick: int) -> api.JobSpec:
        """The job a Submit of `pick` submits."""
        options = self.options
        sizes = options.job_sizes
        slots = options.job_slots if options.job_slots is not None else sizes[(pick >> 2) % len(sizes)]
        rerunnable = options.rerunnable if options.rerunnable is not None else bool((pick >> 3) & 1)
        # A GPU on each of its hosts: on one host only, since only gpu_hosts have one.
        gpu = options.gpu_hosts > 0 and slots <= options.slots and (pick >> 6) % 3 == 0
        queue = QUEUE if not options.preemption else \
            {1: URGENT, 2: SCAVENGER, 3: URGENT}.get((pick >> 12) % 5, QUEUE)
        return api.JobSpec(command=["true"], slots=slots, rerunnable=rerunnable, queue=queue,
                           resource_req="rusage[gpu=1] span[hosts=1]" if gpu else "")

    def pick_for(self, queue: str, after: int = 0) -> int:
        """The first Submit pick above `after` of a new job of one slot without a GPU, rerunnable, in
        `queue`, to the leader (the first of several)."""
        for pick in range(after + 2 - after % 2, after + (1 << 20), 2):
            spec = self.new_job(pick)
            if spec.slots == 1 and not spec.resource_req and spec.rerunnable and spec.queue == queue \
                    and (pick >> 4) % 4 == 0:
                return pick
        raise AssertionError(f"no pick gives a job in {queue}")

    # -------------------------------------------------------------- the spec's actions

    def Submit(self, pick: int) -> str | None:
        """The client submits a new job, or a submit call in flight reaches its replica."""
        client = self.client
        if pick % 2 == 0 and client.submitted < self.options.max_jobs + client.warm:
            client.submitted += 1
            request_id = f"req-{client.submitted}"
            request = api.SubmitJobsRequest(request_id=request_id, jobs=[self.new_job(pick)])
            client.pending[request_id] = request
            return self._send("submit", "client", client.pending[request_id], pick >> 4, None)
        return self._deliver_call("submit", pick >> 1)

    def _send(self, kind: str, caller: str, request: object, pick: int, context: object,
              retry: bool = False) -> str | None:
        replica = self._target(pick)
        if replica is None:
            return None
        call = Call(self.next_id(), kind, caller, replica.rid, request, context)
        self.calls.append(call)
        return f"{'retry ' if retry else ''}{kind} call {call.cid} from {caller} to r{replica.rid}"

    def _deliver_call(self, kind: str, pick: int) -> str | None:
        call = _pick([c for c in self.calls if c.kind == kind], pick)
        return None if call is None else self._deliver(call)

    def _deliver(self, call: Call) -> str:
        kind = call.kind
        self.calls.remove(call)
        driver = self.drivers.get(call.replica)
        if driver is None:
            return f"{kind} call {call.cid} to r{call.replica}: replica down, lost"
        return f"call {call.cid}: r{call.replica} {driver.on_call(call)}"

    def LeaderCrash(self, pick: int) -> str | None:
        leader = _pick(self.raft.leaders(), pick)
        if leader is None:
            return None
        self._crash(leader)
        lost = leader.last_index() - leader.commit
        return f"r{leader.rid} (term {leader.term}) crashed with {lost} entries past its commit index"

    def _crash(self, replica: Replica) -> None:
        if self.recorder is not None and replica.leading:
            self.recorder.on_leader_crash(self.drivers.get(replica.rid))
        driver = self.drivers.pop(replica.rid, None)
        if driver is not None:
            driver.crash()
        self.roles.pop(replica.rid, None)
        self.raft.crash(replica)

    def ElectLeader(self, pick: int) -> str | None:
        candidate = _pick([r for r in self.raft.replicas if r.up and not r.leading], pick)
        if candidate is None or (self.options.single_leader and self.raft.leaders()):
            return None
        eligible = self.raft.eligible_voters(candidate)
        needed = self.raft.majority() - 1
        if len(eligible) < needed:
            return None
        rotate = (pick >> 3) % len(eligible) if eligible else 0
        eligible = eligible[rotate:] + eligible[:rotate]
        voters = eligible[:needed + (pick >> 6) % (len(eligible) - needed + 1)]
        return self._elect(candidate, voters)

    def _elect(self, candidate: Replica, voters: list[Replica]) -> str:
        assert self.raft.elect(candidate, voters)
        if self.recorder is not None:
            self.recorder.on_elect(candidate)
        self.drivers[candidate.rid].elected()
        return f"r{candidate.rid} leads term {candidate.term} (votes of {[v.rid for v in voters]})"

    def elect_most_up_to_date(self) -> None:
        """The liveness phase's election: the best log wins, every eligible replica votes."""
        up = [r for r in self.raft.replicas if r.up and not r.leading]
        best = max(up, key=lambda r: (r.last_term(), r.last_index(), -r.rid))
        voters = self.raft.eligible_voters(best)
        if len(voters) + 1 >= self.raft.majority():
            self.steps += 1
            done = self._elect(best, voters)
            self.trace.append(f"{self.steps:5d} t={self.now_s():7.2f}s ElectLeader: {done}")

    def CommitApply(self, pick: int) -> str | None:
        full = self.liveness  # the liveness phase: every follower takes everything
        leader = _pick(self.raft.leaders(), pick)
        if leader is None:
            return None
        followers = [r for r in self.raft.replicas if r.up and r is not leader]
        targets = followers if full else [f for f in [_pick(followers, pick >> 3)] if f is not None]
        parts = []
        for follower in targets:
            count = 10**9 if full or (pick >> 6) & 1 else 1 + (pick >> 7) % 3
            if self.raft.replicate(leader, follower, count) == "stale":
                return f"r{leader.rid} learned of term {leader.term} from r{follower.rid}: steps down"
            parts.append(f"r{follower.rid} has {follower.last_index()}")
        commit = self.raft.advance_commit(leader)
        applied = self.raft.apply(leader, commit)
        for follower in targets:
            if full or (pick >> 10) & 1:
                self.raft.apply(follower, follower.commit)
        return f"r{leader.rid} commit {commit}, applied {applied}; {', '.join(parts) or 'alone'}"

    def SchedulerPass(self, pick: int) -> str | None:
        scheduler = _pick(self._awake(), pick)
        if scheduler is None:
            return None
        batch = scheduler.decide()
        if self.recorder is not None:
            self.recorder.on_decide(scheduler, batch)
        if batch is None:
            return None
        sent = self._send("batch", scheduler.name, batch, pick >> 3, batch)
        return f"{scheduler.id} epoch {batch.lease_epoch} at revision {batch.base_revision}: " \
               f"{_decisions_text(batch)}; {sent or 'no leader known: dropped'}"

    def ProposeBatch(self, pick: int) -> str | None:
        return self._deliver_call("batch", pick)

    def _awake(self) -> list[SchedulerNode]:
        return [s for s in sorted(self.schedulers.values(), key=lambda s: s.name)
                if s.frozen_until_ms <= self.now_ms]

    def LeaseTakeover(self, pick: int) -> str | None:
        scheduler = _pick(self._awake(), pick)
        if (pick >> 3) & 1 or scheduler is None or scheduler.lease_call_out:
            return self._deliver_call("lease", pick >> 4)
        request = scheduler.lease_request()
        if request is None:
            return self._deliver_call("lease", pick >> 4)
        return self._send("lease", scheduler.name, request, pick >> 4, self.now_s())

    def LeaseReply(self, pick: int) -> str | None:
        awake = {s.name for s in self._awake()}
        reply = _pick([r for r in self.replies if r.call.caller in awake or r.call.caller == "client"], pick)
        if reply is None:
            return None
        self.replies.remove(reply)
        call = reply.call
        if call.kind == "submit":
            return self._submit_reply(call, reply.response)
        scheduler = self.schedulers[call.caller]
        if call.kind == "lease":
            if call.request.scheduler_id != scheduler.id:
                return f"lease reply for {call.request.scheduler_id}: that scheduler is gone"
            scheduler.on_lease_reply(reply.response, call.context)
            return f"{scheduler.id} lease: {_lease_text(reply.response)}"
        scheduler.on_batch_reply(call.context, reply.response)
        outcomes = list(reply.response.outcomes) if reply.response is not None else []
        rejected = [api.DecisionRejection.Name(o.code) for o in outcomes if o.code != api.DECISION_ACCEPTED]
        return f"{scheduler.id} batch reply: {len(rejected)} rejected {rejected[:1]}"

    def _submit_reply(self, call: Call, response: api.SubmitJobsResponse | None) -> str:
        request_id = call.request.request_id
        if response is None:
            return f"submit {request_id} refused; will retry"
        self.client.pending.pop(request_id, None)
        for job in response.jobs:
            self.client.acked[job.id] = response.revision
        jobs = [j.id for j in response.jobs]
        return f"submit {request_id} acknowledged: jobs {jobs} at {response.revision}"

    def _leader_timers(self, pick: int, what: str) -> str | None:
        """A serving leader's timers fire (the driver's tick): its session sweeps and full
        looks, heartbeat watchdog, lost hosts, capability polls, expired proposals."""
        driver = _pick(self.serving_drivers(), pick)
        if driver is None:
            return None
        before = (driver.replica.last_index(), sum(len(s.down) for s in driver.streams.values()))
        driver.poll()
        after = (driver.replica.last_index(), sum(len(s.down) for s in driver.streams.values()))
        if after == before:
            return None
        return f"r{driver.replica.rid} {what}: {after[0] - before[0]} proposed, {after[1] - before[1]} frames"

    def SendRun(self, pick: int) -> str | None:
        return self._leader_timers(pick, "full looks of its worker sessions")

    def SendKill(self, pick: int) -> str | None:
        return self._leader_timers(pick, "full looks of its worker sessions (kills)")

    def _deliver_down(self, pick: int, kinds: tuple[str, ...]) -> str | None:
        """The next frame of a worker stream that holds a message of one of `kinds`
        ("*": any kind the other delivery steps do not take, e.g. a heartbeat answer)."""
        def wanted(kind: str | None) -> bool:
            return kind in kinds or ("*" in kinds and kind not in DELIVERED_BY_KIND)

        streams = [s for s in self.streams.values() if s.kind == "worker" and s.open and s.down
                   and any(wanted(m.WhichOneof("body")) for m in worker_wire.controller_messages(s.down[0]))]
        stream = _pick(sorted(streams, key=lambda s: s.sid), pick)
        if stream is None:
            return None
        node = self.workers[stream.endpoint]
        assert node.stream is stream and node.daemon is not None
        return node.deliver(stream.down.popleft())

    def WorkerStart(self, pick: int) -> str | None:
        return self._deliver_down(pick, ("run",))

    def WorkerSignal(self, pick: int) -> str | None:
        return self._deliver_down(pick, ("signal", "*"))

    def AckReport(self, pick: int) -> str | None:
        return self._deliver_down(pick, ("ack",))

    def Joined(self, pick: int) -> str | None:
        return self._deliver_down(pick, ("joined",))

    def WorkerFinish(self, pick: int, due_only: bool = False) -> str | None:
        # With preemption, mostly the processes whose time is up end (three times in four), so that
        # jobs are still running when urgent ones come.
        due_only = due_only or (self.options.preemption and (pick >> 7) % 4 != 0)
        live = [p for p in self.os.live() if not p.stopped and (not due_only or p.ends_at_ms <= self.now_ms)]
        process = _pick(sorted(live, key=lambda p: p.pid), pick)
        if process is None:
            return None
        term_signal = 15 if process.terminating else 0
        exit_code = 0 if term_signal or (pick >> 5) % 4 else 1
        self.os.end(process, exit_code, term_signal, status=True)
        job, attempt = process.key
        return f"{job}.{attempt} on {process.host} ended: exit {exit_code} signal {term_signal}"

    def RelayReport(self, pick: int) -> str | None:
        streams = sorted((s for s in self.streams.values() if s.kind == "worker" and s.open and s.up),
                         key=lambda s: s.sid)
        stream = _pick(streams, pick)
        if stream is None:
            return None
        driver = self.drivers.get(stream.replica)
        if driver is None:
            stream.close()
            return f"stream {stream.sid} of {stream.endpoint}: r{stream.replica} is down"
        return f"r{stream.replica}: {driver.on_worker_message(stream)}"

    def WorkerCrash(self, pick: int) -> str | None:
        node = _pick([n for n in self.workers.values() if n.daemon is not None], pick)
        if node is None:
            return None
        machine = (pick >> 4) % 4 == 0
        node.crash(machine)
        return f"{node.name} {'machine' if machine else 'worker daemon'} crashed"

    def WorkerRejoin(self, pick: int) -> str | None:
        node = _pick(list(self.workers.values()), pick)
        if node is None:
            return None
        if node.daemon is None:
            node.boot()
            return f"{node.name} restarted (boot {node.boots}), recovered from its journal"
        if node.stream is not None:
            return None
        replica = self._target(pick >> 4)
        if replica is None:
            return None
        node.connect(self._open("worker", node.name, replica))
        return f"{node.name} connects to r{replica.rid} and sends join"

    def HeartbeatTimeout(self, pick: int) -> str | None:
        return self._leader_timers(pick, "heartbeat watchdog")

    def ResolveHost(self, pick: int) -> str | None:
        return self._leader_timers(pick, "lost hosts")

    def StreamBreak(self, pick: int) -> str | None:
        stream = _pick(sorted(self.streams.values(), key=lambda s: s.sid), pick)
        if stream is None:
            return None
        stream.close()
        return f"{stream.kind} stream {stream.sid} of {stream.endpoint} to r{stream.replica} broke"

    def Resync(self, pick: int) -> str | None:
        scheduler = _pick([s for s in sorted(self.schedulers.values(), key=lambda s: s.name)
                           if s.stream is None], pick)
        replica = self._target(pick >> 3)
        if scheduler is None or replica is None:
            return None
        stream = self._open("sync", scheduler.name, replica)
        scheduler.stream = stream
        request = scheduler.sync_request()
        driver = self.drivers[replica.rid]
        return f"{scheduler.id} syncs from {request.from_revision} at r{replica.rid}: " \
               f"{driver.open_sync(stream, request)}"

    def _sync_links(self) -> list[tuple[ReplicaDriver, Any]]:
        return [(driver, link) for _, driver in sorted(self.drivers.items())
                for _, link in sorted(driver.syncs.items())]

    def SyncTail(self, pick: int) -> str | None:
        chosen = _pick(self._sync_links(), pick)
        if chosen is None:
            return None
        driver, link = chosen
        before = link.feed.revision
        driver.tail(link)
        return f"r{driver.replica.rid} tail to {link.stream.endpoint}: {before} -> {link.feed.revision}"

    def SyncDeliver(self, pick: int) -> str | None:
        streams = sorted((s for s in self.streams.values() if s.kind == "sync" and s.open and s.down),
                         key=lambda s: s.sid)
        stream = _pick(streams, pick)
        if stream is None:
            return None
        scheduler = self.schedulers[stream.endpoint]
        message = stream.down.popleft()
        before = scheduler.view.revision
        scheduler.view.apply(message)
        if self.recorder is not None:
            self.recorder.on_sync_deliver(scheduler, stream, message)
        self.stats["snapshots installed"] += message.WhichOneof("body") == "snapshot_end"
        return f"{scheduler.id} view {before} -> {scheduler.view.revision} ({message.WhichOneof('body')})"

    def SyncRepeat(self, pick: int) -> str | None:
        chosen = _pick(self._sync_links(), pick)
        if chosen is None:
            return None
        driver, link = chosen
        revision = driver.repeat_event(link, (pick >> 4) % 3)
        return None if revision is None else f"event {revision} sent again to {link.stream.endpoint}"

    def SchedulerCrash(self, pick: int) -> str | None:
        scheduler = _pick(sorted(self.schedulers.values(), key=lambda s: s.name), pick)
        if scheduler is None:
            return None
        old = scheduler.id
        if self.recorder is not None:
            self.recorder.on_scheduler_crash(scheduler)
        scheduler.restart()
        if self.recorder is not None:
            self.recorder.scheduler_seen(scheduler.id)
        return f"{old} crashed; {scheduler.id} starts with an empty view"

    def Compact(self, pick: int) -> str | None:
        replica = _pick([r for r in self.raft.replicas if r.up], pick)
        if replica is None:
            return None
        dropped = self.raft.compact(replica)
        return f"r{replica.rid} compacted {dropped} entries up to {replica.base_index}" if dropped else None

    # -------------------------------------------------------------- simulation-only steps

    def Tick(self, pick: int) -> str | None:
        self.clock.advance(20 + pick % 400)
        self.os.stop_due()
        fired = self.os.fire_timers()
        killed = self._dead_hosts() if self.options.resolve_needs_dead_host else 0
        for node in self.workers.values():
            node.heartbeat()
            node.check_fence()
        for _, driver in sorted(self.drivers.items()):
            driver.poll()  # the drivers' timers: watchdog, session full looks, expired proposals
        due = [call for when, call in self.delayed if when <= self.now_ms]
        self.delayed = [(when, call) for when, call in self.delayed if when > self.now_ms]
        self.calls += due
        for scheduler in self._awake():
            outstanding = [c for c in self.calls if c.kind == "lease" and c.caller == scheduler.name]
            if scheduler.lease_call_out and not outstanding and not any(
                    r.call.kind == "lease" and r.call.caller == scheduler.name for r in self.replies):
                scheduler.lease_call_out = False  # the call's deadline passed: lost
            if not scheduler.lease_call_out:
                request = scheduler.lease_request()
                if request is not None:
                    self._send("lease", scheduler.name, request, pick >> 11, self.now_s())
        dead = f"; {killed} processes of dead hosts" if killed else ""
        return f"now {self.now_s():.2f}s; {fired} timers fired{dead}"

    def _dead_hosts(self) -> int:
        """ResolveHost's timing assumption: a host unavailable for nearly unknown_timeout_s
        is down by then; its processes die (a machine gone, or a worker that fenced itself)."""
        replica = self.committed_tables()
        if replica is None:
            return 0
        killed = 0
        for _, raw in replica.tables.scan("hosts"):
            host = api.Host.FromString(raw)
            if host.status == api.HOST_UNAVAIL and self.now_ms - host.status_time_ms >= HOST_DEAD_AFTER_MS:
                for process in self.os.live():
                    if process.host == host.spec.name:
                        self.os.end(process, 0, 9, status=False)
                        killed += 1
        self.stats["processes of dead hosts"] += killed
        return killed

    def Deliver(self, pick: int) -> str | None:
        """The network catches up: every stream message and call in flight is delivered,
        the leaders commit and apply, until nothing moves (a calm moment)."""
        before = self.steps
        for _ in range(1 + pick % 20):
            moved = False
            for name in ("CommitApply", "Joined", "WorkerStart", "WorkerSignal", "AckReport", "RelayReport",
                         "SyncDeliver", "DeliverCall", "LeaseReply"):
                for sub in range(len(self.raft.leaders()) if name == "CommitApply" else 4):
                    moved |= self.step(name, sub) is not None
            if not moved:
                break
        return f"delivered everything in flight ({self.steps - before} steps)"

    def DeliverCall(self, pick: int) -> str | None:
        call = _pick(self.calls, pick)
        return None if call is None else self._deliver(call)

    def ClientRetry(self, pick: int) -> str | None:
        """The client retries a request it has no answer for, with the same request id."""
        waiting = {c.request.request_id for c in self.calls if c.kind == "submit"}
        waiting |= {r.call.request.request_id for r in self.replies if r.call.kind == "submit"}
        request_id = _pick([r for r in sorted(self.client.pending) if r not in waiting], pick)
        if request_id is None:
            return None
        return self._send("submit", "client", self.client.pending[request_id], pick >> 4, None, retry=True)

    def SchedulerPause(self, pick: int) -> str | None:
        """A scheduler stalls for 2-5 s right after deciding a pass; the batch goes out
        when it wakes, maybe after its lease passed to another scheduler."""
        scheduler = _pick(self._awake(), pick)
        if scheduler is None:
            return None
        scheduler.frozen_until_ms = self.now_ms + 2000 + (pick >> 4) % 3000
        batch = scheduler.decide()
        if self.recorder is not None:
            self.recorder.on_decide(scheduler, batch)
        replica = self._target(pick >> 16)
        if batch is not None and replica is not None:
            call = Call(self.next_id(), "batch", scheduler.name, replica.rid, batch, batch)
            self.delayed.append((scheduler.frozen_until_ms, call))
        return f"{scheduler.id} stalls until {(scheduler.frozen_until_ms - STAMP0_MS) / 1000:.2f}s" + (
            f" holding a batch of epoch {batch.lease_epoch}: {_decisions_text(batch)}" if batch else "")

    def ReplicaCrash(self, pick: int) -> str | None:
        replica = _pick([r for r in self.raft.replicas if r.up and not r.leading], pick)
        if replica is None:
            return None
        self._crash(replica)
        return f"follower r{replica.rid} crashed"

    def ReplicaRestart(self, pick: int) -> str | None:
        replica = _pick([r for r in self.raft.replicas if not r.up], pick)
        if replica is None:
            return None
        self.raft.restart(replica)
        self.drivers[replica.rid] = ReplicaDriver(self, replica)
        self.raft.apply(replica, replica.commit)  # it re-applies its log; apply skips what it holds
        return f"r{replica.rid} restarted, applied {replica.applied}"

    def Duplicate(self, pick: int) -> str | None:
        """A message delivered twice: a retried call, or a resend overlapping on a stream."""
        queues: list[tuple[str, deque[Any] | None, Stream | None]] = []
        for stream in sorted(self.streams.values(), key=lambda s: s.sid):
            if stream.down and (stream.kind == "sync" or "joined" not in {
                    m.WhichOneof("body") for m in worker_wire.controller_messages(stream.down[0])}):
                queues.append((f"{stream.kind} stream {stream.sid} down", stream.down, stream))
            if stream.up and stream.up[0].WhichOneof("body") in ("report", "reports"):
                queues.append((f"{stream.kind} stream {stream.sid} up", stream.up, None))
        if self.calls:
            queues.append(("calls", None, None))
        chosen = _pick(queues, pick)
        if chosen is None:
            return None
        where, queue, down_of = chosen
        if down_of is not None and self.recorder is not None:
            self.recorder.on_duplicate(down_of)
        if queue is None:
            call = _pick(self.calls, pick >> 3)
            assert call is not None
            self.calls.append(Call(self.next_id(), call.kind, call.caller, call.replica, call.request,
                                   call.context))
        else:
            queue.appendleft(queue[0])
        return f"duplicated the next message of {where}"

    def DelayedAppend(self, pick: int) -> str | None:
        """An AppendEntries sent earlier arrives now, after messages sent since (a slow path, a
        connection that delivered late), maybe from a leader deposed since."""
        sent = list(self.raft.sent)[:-1] if self.options.append_faults else []
        message = _pick(sent, pick)
        return None if message is None else self._redeliver(message, "late")

    def DuplicateAppend(self, pick: int) -> str | None:
        """The last AppendEntries a leader sent a follower arrives a second time."""
        latest = {m.to: m for m in self.raft.sent} if self.options.append_faults else {}
        message = _pick([latest[rid] for rid in sorted(latest)], pick)
        return None if message is None else self._redeliver(message, "again")

    def _redeliver(self, message: Any, how: str) -> str:
        follower = self.raft.replicas[message.to - 1]
        before = follower.last_index()
        # What pysyncobj alone cut the log for: a message it takes whose previous entry is not the last.
        behind = follower.up and message.term >= follower.term and message.prev_index < before and \
            follower.has(message.prev_index, message.prev_term)
        self.stats["AppendEntries behind the log (pysyncobj cut it)"] += behind
        answer = self.raft.deliver(message)
        outcome = "ignored" if answer is None else \
            f"answered {'success' if answer.success else 'refusal'} {answer.next_index}"
        after = follower.last_index()
        self.stats["AppendEntries delivered again"] += 1
        return f"AppendEntries {message.describe()} arrives {how}: {outcome}; log end {before} -> {after}"

    def DropCall(self, pick: int) -> str | None:
        bag: list[object] = [*self.calls, *self.replies]
        chosen = _pick(bag, pick)
        if chosen is None:
            return None
        if isinstance(chosen, Call):
            self.calls.remove(chosen)
            return f"{chosen.kind} call {chosen.cid} lost"
        assert isinstance(chosen, Reply)
        self.replies.remove(chosen)
        return f"reply to {chosen.call.kind} call {chosen.call.cid} lost"

    def Drain(self, pick: int) -> str | None:
        node = _pick(list(self.workers.values()), pick)
        if node is None:
            return None
        node.draining = not node.draining
        return f"{node.name} {'drains (refuses new jobs)' if node.draining else 'accepts jobs again'}"

    # -------------------------------------------------------------- reading the state

    def committed_tables(self) -> Replica | None:
        """The replica that applied the most (its state is the committed state at its index)."""
        up = [r for r in self.raft.replicas if r.applied > 0]
        return max(up, key=lambda r: fsm.read_meta(r.tables).applied_index) if up else None

    def unfinished_jobs(self) -> list[api.Job]:
        replica = self.committed_tables()
        if replica is None:
            return []
        jobs = [api.Job.FromString(raw) for _, raw in replica.tables.scan("jobs")]
        return [j for j in jobs if j.state not in fsm.FINISHED]


def _decisions_text(batch: api.DecisionBatch) -> str:
    parts = []
    for decision in batch.decisions:
        if decision.HasField("dispatch"):
            d = decision.dispatch
            parts.append(f"run {d.job_id}.{d.attempt}@{d.host}")
        elif decision.HasField("preempt"):
            p = decision.preempt
            parts.append(f"preempt {', '.join(f'{v.job_id}.{v.attempt}' for v in p.victims)} "
                         f"for {p.job_id}.{p.attempt}")
        else:
            parts.append(f"pend {decision.pend.job_id}")
    return ", ".join(parts)


def _lease_text(reply: api.LeaseResponse | None) -> str:
    if reply is None:
        return "refused (no serving leader)"
    return f"{'granted' if reply.granted else 'held by ' + reply.holder}, epoch {reply.epoch}"


__all__ = ["APPEND_FAULTS", "FAULTS", "QUEUE", "SCAVENGER", "SIM_ACTIONS", "SPEC_ACTIONS", "URGENT",
           "Options", "Sim"]
