"""The simulation's run as a behaviour of tla/XceBarrier.tla, for TLC to validate.

Theory of operation (tla/TRACE-PLAN.md has the whole mapping). The simulated
processes run the real code; hooks in cluster.py, leader.py and
worker_node.py call this recorder where an effect of the protocol happens: an
entry proposed or first applied, a frame sent to a worker or delivered, a
process ended, a stream opened or closed, a Sync message sent or applied, a
pass decided, a lease answered. Each becomes zero or more spec actions with
what the code shows of the variables they change, as `tests.tla_trace.Step`s.

The recorder keeps a mirror of the few spec variables that decide the
mapping (the spec log's length per real index, conn, joining, up, known,
down, syncPos, sync), never the real processes' state. Names: job `req-N` is
"jN", hosts keep theirs, a scheduler is its incarnation ("s1-2"); attempts
are the real ones + 1.

Every real entry is at least one spec entry, so revisions map one to one
onto spec indices (`end[R]`, the spec index of real entry R's last op): an
entry the spec does not model (configuration, PEND-only batches, a batch past
its lease's expiry, a report or submit already in the log) is an
`OtherEntry`, a no-op the trace module adds to the spec.

Whole variables are observed where the mirror is exact, so TLC cannot take
an action for another host or scheduler than the one the code acted for.
Where the code and the spec's granularity cannot be matched (the known gaps
of TRACE-PLAN.md: G1, a report relayed after a new join of its host; G5, a
new leader holding an entry the spec's log lost), the recording stops there
and says why (`truncated`): TLC validates what came before. Runs elect a
leader only while none is up (`Options.single_leader`): the spec has one.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from tla_trace import NONE, SetOf, Step

from controller import fsm, request_ids
from controller.leader import Leadership
from scheduler.view import View
from xce.rules import feasibility
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

from .raft import LogEntry, Replica, copy_tables

if TYPE_CHECKING:
    from .cluster import Sim
    from .leader import ReplicaDriver, SyncLink
    from .network import Stream
    from .scheduler_node import SchedulerNode
    from .worker_node import SimProcess, WorkerNode

NO_JOB = {"state": "none", "attempt": 0, "host": NONE, "alloc": frozenset()}
NO_HOST = {"status": "none", "gen": 0, "used": 0, "slots": 0, "gused": 0, "gpus": 0}
JOB_STATES = {api.PEND: "PEND", api.RUN: "RUN", api.USUSP: "RUN", api.SSUSP: "RUN", api.UNKWN: "UNKWN",
              api.DONE: "DONE", api.EXIT: "DONE"}
HOST_STATUS = {api.HOST_OK: "OK", api.HOST_UNAVAIL: "UNAVAIL"}
Item = tuple[str, str, int] | None  # a spec message of a worker frame: ("run" | "kill", job, attempt)


def job_name(request_id: str) -> str:
    """The spec's name of a job, from its request id as the client sent it (stored as its own key)."""
    return "j" + request_ids.shown(request_id).removeprefix("req-")


def abstract_job(job: api.Job) -> dict[str, Any]:
    state = JOB_STATES[job.state]
    running = state in ("RUN", "UNKWN")
    return {"state": state, "attempt": job.attempt + 1, "host": job.host if running else NONE,
            "alloc": frozenset(p.host for p in feasibility.allocation_of(job)) if running else frozenset()}


def abstract_host(host: api.Host) -> dict[str, Any]:
    return {"status": HOST_STATUS[host.status], "gen": host.generation, "used": host.slots_used,
            "slots": host.spec.slots, "gused": host.reserved.get("gpu", 0), "gpus": 0}  # GCap: 0 here


class Queued(Protocol):
    """A leader's group commit, as far as the recorder looks: (stream, item) pairs in wait."""

    def queued(self) -> list[tuple[int, Any]]: ...


@dataclass
class Frame:
    """A frame in flight to a worker: its spec messages (None for each the spec does not
    model), and whether it holds commands at all (a run or a signal)."""
    items: list[Item]
    commands: bool


@dataclass
class Deferred:
    """A close the spec must take later: the leader still holds reports received on the
    stream, which it will propose with the stream's generation (TRACE-PLAN G1)."""
    action: str  # "StreamBreak" or "WorkerCrash"
    host: str
    sid: int


@dataclass
class TraceRecorder:
    sim: Sim
    steps: list[Step] = field(default_factory=list)
    truncated: str = ""
    jobs: dict[int, str] = field(default_factory=dict)  # real job id -> name
    names: set[str] = field(default_factory=set)
    schedulers: list[str] = field(default_factory=list)
    # the spec log: real index -> its spec ops, and the spec index of its last op
    ops: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    end: dict[int, int] = field(default_factory=lambda: {0: 0})
    length: int = 0
    applied: int = 0
    commit: int = 0
    floor: int = 1
    acked: set[str] = field(default_factory=set)
    relayed: set[tuple[str, int, str, int, str]] = field(default_factory=set)
    elections: int = 0
    terms: dict[int, int] = field(default_factory=dict)  # real index -> the term it was proposed in
    crash: Step | None = None  # the LeaderCrash whose cut the next election tells
    noops: set[int] = field(default_factory=set)  # real indices of the elections' no-ops (no event)
    # workers
    up: dict[str, bool] = field(default_factory=dict)
    conn: dict[str, int] = field(default_factory=dict)
    conn_sid: dict[str, int] = field(default_factory=dict)
    joining: dict[str, int] = field(default_factory=dict)
    join_sid: dict[str, int] = field(default_factory=dict)
    known: dict[str, set[tuple[str, int]]] = field(default_factory=dict)
    down: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    frames: dict[int, deque[Frame]] = field(default_factory=dict)  # worker stream -> frames in flight
    joins_received: dict[str, list[int]] = field(default_factory=dict)  # host -> streams, join not proposed
    accounted: set[int] = field(default_factory=set)  # streams whose close a crash already took
    deferred: list[Deferred] = field(default_factory=list)
    killed: set[tuple[str, int, str]] = field(default_factory=set)
    inst: frozenset[tuple[str, int, str]] = frozenset()
    dying: set[int] = field(default_factory=set)  # pids a machine crash kills (its WorkerCrash took them)
    # schedulers
    pos: dict[str, int] = field(default_factory=dict)
    belief: dict[str, int] = field(default_factory=dict)
    # A view's spec revision: a real revision is the last entry with data applied, and noops
    # after it (an election's) are spec entries too, so a snapshot's revision is the spec's commit.
    view_rev: dict[str, int] = field(default_factory=dict)
    sync: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    sync_sid: dict[str, int] = field(default_factory=dict)
    counts: dict[int, deque[int]] = field(default_factory=dict)  # sync stream -> spec messages per real one
    stats: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in self.sim.workers:
            self.up[name], self.conn[name], self.joining[name] = True, 0, 0
            self.known[name], self.down[name], self.joins_received[name] = set(), [], []
        for scheduler in self.sim.schedulers.values():
            self.scheduler_seen(scheduler.id)

    # -------------------------------------------------------------- output

    @property
    def active(self) -> bool:
        return not self.truncated

    def stop(self, why: str) -> None:
        if not self.truncated:
            self.truncated = f"step {self.sim.steps}: {why}"

    def emit(self, action: str, note: str = "", **observed: Any) -> None:
        self.steps.append(Step(action, observed, note=f"sim step {self.sim.steps}: {note}".rstrip(": ")))

    def reject(self, why: str) -> None:
        """The code did what no spec action does and no observation would show: a step
        TLC must reject (no state has commit -1), named by `why`."""
        self.emit("Stutter", f"the code diverged: {why}", commit=-1)
        self.count("divergences the recorder saw")

    def count(self, what: str) -> None:
        self.stats[what] = self.stats.get(what, 0) + 1

    # Whole variables where the mirror is exact: a partial one would let TLC take the
    # action for another host or scheduler whose part nobody looked at.
    def connections(self) -> dict[str, Any]:
        return {"conn": dict(self.conn), "up": dict(self.up), "joining": dict(self.joining),
                "down": {h: list(q) for h, q in self.down.items()}}

    def downs(self) -> dict[str, Any]:
        return {"down": {h: list(q) for h, q in self.down.items()}}

    def syncs(self) -> dict[str, Any]:
        return {"syncPos": dict(self.pos), "sync": {s: list(q) for s, q in self.sync.items()}}

    def finish(self) -> tuple[list[Step], dict[str, str]]:
        """The steps (observed jobs completed with the ones not yet submitted) and the
        constants of the trace module."""
        defaults = {"syncPos": -1, "sync": [], "belief": 0}
        for step in self.steps:
            for key, default in defaults.items():
                if key in step.observed:
                    step.observed[key] = {s: step.observed[key].get(s, default) for s in self.schedulers}
            for key in ("st", "viewOf"):
                value = step.observed.get(key)
                records = [] if value is None else [value] if key == "st" else list(value.values())
                for record in records:
                    record["jobs"] = {name: record["jobs"].get(name, NO_JOB) for name in sorted(self.names)}
        quoted = ", ".join(f'"{n}"' for n in sorted(self.names)) or '"j0"'
        constants = {
            "Jobs": "{" + quoted + "}",
            "Hosts": "{" + ", ".join(f'"{h}"' for h in sorted(self.sim.workers)) + "}",
            "Schedulers": "{" + ", ".join(f'"{s}"' for s in self.schedulers) + "}",
            "Cap": str(self.sim.options.slots), "Wide": "{}", "Gpu": "{}", "GCap": "0", "Low": "{}",
            "None": "None", "MaxTerm": str(self.elections + 1),
            "MaxLog": str(self.length + 1), "MaxFaults": "0", "Submitted": "{}",
            "MaxSyncQueue": "1000", "MaxBatches": "1000", "MaxDown": "1000",
        }
        return self.steps, constants

    # -------------------------------------------------------------- names and abstractions

    def scheduler_seen(self, sid: str) -> None:
        if sid not in self.schedulers:
            self.schedulers.append(sid)
            self.pos[sid], self.sync[sid], self.belief[sid], self.view_rev[sid] = -1, [], 0, 0

    def name_of(self, job_id: int) -> str:
        if job_id not in self.jobs:
            replica = self.sim.committed_tables()
            job = fsm.read_job(replica.tables, job_id) if replica is not None else None
            assert job is not None, f"job {job_id} is in no committed state"
            self.jobs[job_id] = job_name(job.request_id)
            self.names.add(self.jobs[job_id])
        return self.jobs[job_id]

    def state_of(self, tables: fsm.Tables) -> dict[str, Any]:
        jobs = {}
        for _, raw in tables.scan("jobs"):
            job = api.Job.FromString(raw)
            name = job_name(job.request_id)
            self.jobs[job.id] = name
            self.names.add(name)
            jobs[name] = abstract_job(job)
        hosts = {h: NO_HOST for h in self.sim.workers}
        for _, raw in tables.scan("hosts"):
            host = api.Host.FromString(raw)
            hosts[host.spec.name] = abstract_host(host)
        meta = fsm.read_meta(tables)
        return {"jobs": jobs, "hosts": hosts,
                "lease": {"epoch": meta.lease_epoch, "holder": meta.lease_holder or NONE}}

    def view_of(self, view: View, rev: int) -> dict[str, Any]:
        jobs = {}
        for job in view.jobs():
            jobs[job_name(job.request_id)] = abstract_job(job)
            self.names.add(job_name(job.request_id))
        hosts = {h: NO_HOST for h in self.sim.workers}
        for host in view.hosts():
            hosts[host.spec.name] = abstract_host(host)
        return {"rev": rev, "jobs": jobs, "hosts": hosts}

    def instances(self) -> frozenset[tuple[str, int, str]]:
        # A KILL ends the spec's instance at WorkerSignal, but a fence's SIGTERM only at the
        # process's end (WorkerFinish "fenced"): until then a fenced process is an instance.
        live = ((self.name_of(p.key[0]), p.key[1] + 1, p.host, p.terminating) for p in self.sim.os.live())
        return frozenset((j, a, h) for j, a, h, terminating in live
                         if not (terminating and (j, a, h) in self.killed))

    def observe_inst(self) -> SetOf:
        self.inst = self.instances()
        return SetOf(tuple({"job": j, "attempt": a, "host": h} for j, a, h in sorted(self.inst)))

    # -------------------------------------------------------------- the log

    def on_elect(self, replica: Replica) -> None:
        """ElectLeader; after a leader crash, the crash's cut of the log is the new leader's
        log, which must be a prefix of the spec's (Raft may keep an older term's entry that
        the crashed leader never had: the spec cannot restore it, TRACE-PLAN G5)."""
        if not self.active:
            return
        self.elections += 1
        last = replica.last_index() - 1  # before its noop
        if self.crash is not None:
            for index in range(self.applied + 1, last + 1):
                if self.terms.get(index) != replica.term_at(index):
                    self.stop(f"r{replica.rid} is elected holding entry {index} of term "
                              f"{replica.term_at(index)}, which the spec's log does not hold (G5)")
                    return
            for index in [i for i in self.ops if i > last]:
                del self.ops[index], self.end[index]
                self.terms.pop(index, None)
                self.noops.discard(index)
            self.length = self.end[last]
            self.crash.observed["logLen"] = self.length
            self.crash = None
        elif self.elections > 1:
            self.stop("an election while a leader is up (G4)")
            return
        self.length += 1
        self.ops[last + 1] = [{"type": "noop"}]
        self.end[last + 1] = self.length
        self.noops.add(last + 1)
        self.terms[last + 1] = replica.term
        self.emit("ElectLeader", f"r{replica.rid} leads term {replica.term}", logLen=self.length,
                  term=replica.term)

    def on_leader_crash(self, driver: ReplicaDriver | None) -> None:
        """LeaderCrash: every stream it served ends with it; how much of its log survives is
        known at the next election (logLen is filled in then)."""
        if driver is not None:
            self.accounted.update(driver.streams)
            self.accounted.update(driver.syncs)
        if not self.active:
            return
        for host in self.conn:
            self.conn[host], self.joining[host] = 0, 0
            self.known[host], self.down[host], self.joins_received[host] = set(), [], []
        self.conn_sid.clear()
        self.join_sid.clear()
        self.deferred.clear()
        self.frames.clear()
        self.counts.clear()
        for sched in self.pos:
            self.pos[sched], self.sync[sched] = -1, []
        self.emit("LeaderCrash", f"r{driver.replica.rid if driver else '?'} crashed", **self.connections(),
                  **self.syncs())
        self.crash = self.steps[-1]

    def on_propose(self, driver: ReplicaDriver, index: int, entry: log.Entry) -> None:
        if not self.active:
            return
        where = f"r{driver.replica.rid} proposes {entry.WhichOneof('body')} at {index}"
        ops: list[dict[str, Any]] = []

        def propose(action: str, op: dict[str, Any], **observed: Any) -> None:
            self.length += 1
            ops.append(op)
            self.emit(action, where, op=op, **observed)

        if not self.propose_entry(driver, index, entry, propose):
            return
        if not ops:
            propose("OtherEntry", {"type": "noop"})
        self.ops[index] = ops
        self.end[index] = self.length
        self.terms[index] = driver.replica.term
        self.flush_deferred()

    def propose_entry(self, driver: ReplicaDriver, index: int, entry: log.Entry,
                      propose: Callable[..., None]) -> bool:
        """The spec's proposals for one entry, by its kind; False if the trace stopped."""
        kind = entry.WhichOneof("body")
        if kind == "submit":
            self.propose_submits(entry.submit, propose)
        elif kind == "decisions":
            self.propose_decisions(driver, index, entry, propose)
        elif kind == "lease":
            meta = self.meta_before(driver.replica, index)
            propose("LeaseTakeover", {"type": "lease", "sched": entry.lease.scheduler_id,
                                      "expired": entry.stamp_ms >= meta.lease_expires_ms})
        elif kind == "joins":
            return all(self.propose_join(spec.name, propose) for spec in entry.joins.joins)
        elif kind == "reports":
            return all(self.propose_report(relayed, propose) for relayed in entry.reports.reports)
        elif kind in ("host_status", "host_statuses"):
            changes = [entry.host_status] if kind == "host_status" else list(entry.host_statuses.changes)
            for change in changes:
                if change.status == api.HOST_UNAVAIL:
                    propose("HeartbeatTimeout",
                            {"type": "unavail", "host": change.name, "gen": change.generation})
        elif kind == "resolve_host":
            change = entry.resolve_host
            propose("ResolveHost", {"type": "resolve", "host": change.name, "gen": change.generation})
        return True

    def propose_submits(self, submit: log.SubmitBatch, propose: Callable[..., None]) -> None:
        """Submit, for each request not acknowledged before (a retry's entry is a no-op)."""
        for request in submit.requests:
            name = job_name(request.request_id)
            self.names.add(name)
            if name not in self.acked:
                propose("Submit", {"type": "submit", "job": name})

    def propose_decisions(self, driver: ReplicaDriver, index: int, entry: log.Entry,
                          propose: Callable[..., None]) -> None:
        """ProposeBatch, one a dispatch, unless the batch came past its lease's expiry."""
        batch = entry.decisions
        meta = self.meta_before(driver.replica, index)
        current = batch.lease_epoch == meta.lease_epoch and batch.scheduler_id == meta.lease_holder
        if current and entry.stamp_ms >= meta.lease_expires_ms:
            self.count("batches past their lease's expiry")  # the spec has no time: a no-op
            return
        for decision in batch.decisions:
            if decision.HasField("dispatch"):
                propose("ProposeBatch", self.batch_op(batch, decision.dispatch))

    def propose_report(self, relayed: log.HostReport, propose: Callable[..., None]) -> bool:
        """RelayReport, unless this connection relayed it already (the worker re-sends until
        acknowledged, and a frame may arrive twice): then the entry's state shows any effect."""
        op = self.report_op(relayed)
        key = (op["host"], op["gen"], op["job"], op["attempt"], op["kind"])
        if key in self.relayed:
            self.count("reports relayed again on one connection")
            return True
        if self.conn[op["host"]] != op["gen"]:
            self.stop(f"a report of {op['host']} relayed with generation {op['gen']}, the spec's "
                      f"connection is {self.conn[op['host']]} (G1)")
            return False
        self.relayed.add(key)
        if op["kind"] == "started":
            self.known[op["host"]].add((op["job"], op["attempt"]))
        propose("RelayReport", op)
        return True

    def propose_join(self, host: str, propose: Callable[..., None]) -> bool:
        """WorkerRejoin for the oldest join received from `host`; if its stream closed before
        the join was proposed, the spec's worker connects and crashes at once (that stream can
        do nothing more)."""
        received = self.joins_received[host]
        sid = received.pop(0) if received else None
        if self.conn[host] != 0 or self.joining[host] != 0:
            self.stop(f"join of {host} proposed while the spec's connection of {host} is still open "
                      f"(a close deferred for reports not yet relayed, G1)")
            return False
        self.up[host], self.joining[host] = True, self.length + 1
        self.join_sid[host] = sid if sid is not None else -1
        propose("WorkerRejoin", {"type": "join", "host": host}, **self.connections())
        stream = self.sim.streams.get(sid) if sid is not None else None
        if stream is None or not stream.open:
            self.up[host], self.joining[host] = False, 0
            self.join_sid.pop(host, None)
            self.emit("WorkerCrash", f"the stream of {host}'s join had closed", **self.connections())
        return True

    def batch_op(self, batch: api.DecisionBatch, dispatch: api.DispatchDecision) -> dict[str, Any]:
        hosts = frozenset(h.host for h in dispatch.hosts) or frozenset({dispatch.host})
        return {"type": "batch", "epoch": batch.lease_epoch, "sched": batch.scheduler_id,
                "job": self.name_of(dispatch.job_id), "attempt": dispatch.attempt + 1, "host": dispatch.host,
                "hosts": hosts}

    def report_op(self, relayed: log.HostReport) -> dict[str, Any]:
        report = relayed.report
        name, attempt = self.name_of(report.job_id), report.attempt + 1
        body = report.WhichOneof("body")
        if body == "started":
            kind = "started"
        elif body == "dispatch_failed":
            kind = "failed"
        elif report.finished.fenced:
            kind = "fenced"
        elif report.finished.status_unknown and (name, attempt, relayed.host) not in self.killed:
            kind = "lost"
        else:
            kind = "finished"
        return {"type": "report", "host": relayed.host, "gen": relayed.generation, "job": name,
                "attempt": attempt, "kind": kind}

    def meta_before(self, replica: Replica, index: int) -> log.Meta:
        """The lease as entry `index` will find it: the entries before it in this leader's log
        applied (if it ever applies, they did, in order)."""
        tables = copy_tables(replica.tables)
        for i in range(replica.applied + 1, index):
            data = replica.entry(i).data
            if data is not None:
                fsm.apply(tables, i, data, self.sim.handlers)
        return fsm.read_meta(tables)

    def on_apply(self, replica: Replica, index: int, entry: LogEntry) -> None:
        if not self.active or index <= self.applied:
            return
        if not replica.leading or index not in self.ops:
            self.stop(f"entry {index} first applied by r{replica.rid}, not by the leader that proposed it")
            return
        self.applied = index
        ops = self.ops[index]
        st = self.state_of(replica.tables)
        for n, op in enumerate(ops):
            self.commit += 1
            if op["type"] == "submit":
                self.acked.add(op["job"])
            last = n == len(ops) - 1
            self.emit("CommitApply", f"entry {index} applies", commit=self.commit,
                      **({"st": st} if last else {}))
        floor = fsm.read_meta(replica.tables).events_floor
        if floor > 1 and floor - 1 in self.end:
            spec_floor = self.end[floor - 1] + 1
            if self.floor < spec_floor <= self.commit:
                self.floor = spec_floor
                self.emit("Compact", f"events floor {floor}", floor=spec_floor)

    # -------------------------------------------------------------- the scheduler, its lease and Sync

    def on_decide(self, scheduler: SchedulerNode, batch: api.DecisionBatch | None) -> None:
        if not self.active or batch is None:
            return
        for decision in batch.decisions:
            if decision.HasField("dispatch"):
                self.emit("SchedulerPass", f"{scheduler.id} decides",
                          batch=self.batch_op(batch, decision.dispatch))

    def on_lease_reply(self, request: api.LeaseRequest, response: api.LeaseResponse) -> None:
        if not self.active:
            return
        self.scheduler_seen(request.scheduler_id)
        self.belief[request.scheduler_id] = response.epoch if response.granted else 0
        self.emit("LeaseReply", f"lease of {request.scheduler_id}", belief=dict(self.belief))

    def on_scheduler_crash(self, scheduler: SchedulerNode) -> None:
        if scheduler.stream is not None:
            self.accounted.add(scheduler.stream.sid)
        if not self.active:
            return
        old = scheduler.id
        self.pos[old], self.sync[old], self.belief[old], self.view_rev[old] = -1, [], 0, 0
        self.emit("SchedulerCrash", old, viewOf={old: self.view_of(View(), 0)}, belief=dict(self.belief),
                  **self.syncs())

    def on_resync(self, stream: Stream, scheduler_id: str, opening: list[log.SyncMessage],
                  revision: int) -> None:
        if not self.active:
            return
        self.scheduler_seen(scheduler_id)
        self.sync_sid[scheduler_id] = stream.sid
        counts: deque[int] = deque()
        if opening:
            counts.extend(1 if m.WhichOneof("body") == "snapshot_end" else 0 for m in opening)
            self.sync[scheduler_id] = [{"kind": "snapshot", "rev": self.commit}]
        self.counts[stream.sid] = counts
        self.pos[scheduler_id] = self.commit if opening else self.view_rev[scheduler_id]
        if revision != self.real_of(self.pos[scheduler_id]):
            self.reject(f"{scheduler_id}'s stream starts after revision {revision}, the spec's after "
                        f"{self.real_of(self.pos[scheduler_id])}")
        self.emit("Resync", f"{scheduler_id} from {revision}", **self.syncs())

    def real_of(self, spec_index: int) -> int:
        """The real revision of a spec index at an entry's end: the last entry with data
        (an event) at or before it; 0: none."""
        return max((r for r, e in self.end.items() if r > 0 and r not in self.noops and e <= spec_index),
                   default=0)

    def scheduler_of(self, stream: Stream) -> str | None:
        found = [s for s, sid in self.sync_sid.items() if sid == stream.sid]
        return found[0] if found and self.pos[found[0]] != -1 else None

    def on_sync_event(self, link: SyncLink, message: log.SyncMessage) -> None:
        sched = self.scheduler_of(link.stream) if self.active else None
        if sched is None:
            return
        revision = message.event.revision
        skipped = [r for r in range(self.real_of(self.pos[sched]) + 1, revision) if r not in self.noops]
        if skipped:  # the spec sends every event: only an election's no-op has none
            self.reject(f"events {skipped} never sent to {sched}")
        target = self.end[revision]
        n = target - self.pos[sched]
        for r in range(self.pos[sched] + 1, target + 1):
            self.sync[sched].append({"kind": "event", "rev": r})
            self.pos[sched] = r
            self.emit("SyncTail", f"event {message.event.revision} to {sched}", **self.syncs())
        self.counts[link.stream.sid].append(max(n, 0))

    def on_sync_out_of_range(self, link: SyncLink) -> None:
        self.accounted.add(link.stream.sid)
        sched = self.scheduler_of(link.stream) if self.active else None
        if sched is None:
            return
        self.pos[sched], self.sync[sched], self.view_rev[sched] = -1, [], 0
        self.emit("SyncTail", f"resync required for {sched}", **self.syncs())

    def on_sync_repeat(self, link: SyncLink, revision: int) -> None:
        sched = self.scheduler_of(link.stream) if self.active else None
        if sched is None:
            return
        first, last = self.end[revision - 1] + 1, self.end[revision]
        for r in range(first, last + 1):
            self.sync[sched].append({"kind": "event", "rev": r})
            self.emit("SyncRepeat", f"event {revision} again to {sched}", **self.syncs())
        self.counts[link.stream.sid].append(last - first + 1)

    def on_sync_deliver(self, scheduler: SchedulerNode, stream: Stream, message: log.SyncMessage) -> None:
        counts = self.counts.get(stream.sid)
        if not self.active or counts is None or not counts:
            return
        n = counts.popleft()
        sched = scheduler.id
        kind = message.WhichOneof("body")
        if n == 0 and kind != "event":
            return
        for spec_message in self.sync[sched][:n]:
            if spec_message["kind"] == "snapshot" or spec_message["rev"] > self.view_rev[sched]:
                self.view_rev[sched] = spec_message["rev"]
        if scheduler.view.revision != self.real_of(self.view_rev[sched]):
            self.reject(f"{sched}'s view is at revision {scheduler.view.revision}, the spec's at "
                        f"{self.real_of(self.view_rev[sched])}")
        view = {"viewOf": {sched: self.view_of(scheduler.view, self.view_rev[sched])}}
        for i in range(n):
            del self.sync[sched][0]
            self.emit("SyncDeliver", f"{kind} to {sched}", **(view if i == n - 1 else {}), **self.syncs())
        if n == 0:
            self.emit("Stutter", f"{kind} to {sched} again", **view)

    def on_duplicate(self, stream: Stream) -> None:
        """The head of a stream is delivered twice: the first delivery is the spec's message,
        the second nothing."""
        if stream.kind == "sync" and self.counts.get(stream.sid):
            self.counts[stream.sid].insert(1, 0)
        elif stream.kind == "worker" and self.frames.get(stream.sid):
            head = self.frames[stream.sid][0]
            self.frames[stream.sid].insert(1, Frame([None] * len(head.items), head.commands))

    # -------------------------------------------------------------- workers

    def on_worker_message(self, stream: Stream, message: api.WorkerMessage) -> None:
        if message.WhichOneof("body") == "join":
            self.joins_received[stream.endpoint].append(stream.sid)

    def join_dropped(self, stream: Stream) -> None:
        """After the core took a join: if it neither proposed nor queued it (refused), forget it."""
        received = self.joins_received[stream.endpoint]
        if stream.sid in received and stream.sid not in self.queued(lambda term: term.workers.joins):
            received.remove(stream.sid)

    def queued(self, group: Callable[[Leadership], Queued]) -> set[int]:
        """The streams whose items wait in one of the leaders' group commits."""
        terms = [driver.core.leadership for driver in self.sim.drivers.values()]
        return {sid for term in terms if term is not None for sid, _ in group(term).queued()}

    def holds_reports(self, sid: int) -> bool:
        return sid in self.queued(lambda term: term.workers.reports)

    def on_frame(self, stream: Stream, messages: list[api.ControllerMessage]) -> None:
        if not self.active or not stream.open:
            return
        host = stream.endpoint
        items: list[Item] = []
        for message in messages:
            current = self.conn_sid.get(host) == stream.sid and self.conn[host] != 0
            kind = message.WhichOneof("body")
            item: Item = None
            if kind == "joined" and self.join_sid.get(host) == stream.sid and self.joining[host]:
                generation = message.joined.generation
                self.conn[host], self.conn_sid[host], self.joining[host] = generation, stream.sid, 0
                self.known[host] = set()
                self.emit("Joined", f"{host} gen {generation}", **self.connections())
            elif kind == "run" and current:
                job = message.run.job
                key = (self.name_of(job.id), job.attempt + 1)
                if key in self.known[host] and self.runs_there(job.id, job.attempt, host):
                    # the session restates an instance the worker reported (the spec's leader
                    # knows it from the relayed `started`): the journal answers with reports
                    self.count("RunJob restating a running instance")
                else:  # a first RunJob, or one the spec cannot send: TLC judges
                    self.known[host].add(key)
                    item = ("run", *key)
                    stop = job.state in (api.SSUSP, api.USUSP)  # the spec's `stop`: the RunJob's state
                    self.down[host].append({"type": "run", "job": key[0], "attempt": key[1], "stop": stop})
                    self.emit("SendRun", f"run {key} to {host}", **self.downs())
            elif kind == "signal" and message.signal.kind == api.SIGNAL_KILL and current:
                key = (self.name_of(message.signal.job_id), message.signal.attempt + 1)
                self.known[host].discard(key)
                item = ("kill", *key)
                self.down[host].append({"type": "kill", "job": key[0], "attempt": key[1]})
                self.emit("SendKill", f"kill {key} on {host}", **self.downs())
            items.append(item)
        commands = any(m.WhichOneof("body") in ("run", "signal") for m in messages)
        self.frames.setdefault(stream.sid, deque()).append(Frame(items, commands))

    def runs_there(self, job_id: int, attempt: int, host: str) -> bool:
        replica = self.sim.committed_tables()
        job = fsm.read_job(replica.tables, job_id) if replica is not None else None
        return job is not None and job.host == host and job.attempt == attempt and job.state in fsm.RUNNING

    def on_deliver(self, node: WorkerNode, stream: Stream) -> None:
        frames = self.frames.get(stream.sid)
        if not self.active or not frames:
            return
        frame = frames.popleft()
        items = [i for i in frame.items if i is not None]
        host = node.name
        for n, (kind, job, attempt) in enumerate(items):
            self.down[host].pop(0)
            if kind == "kill":
                self.killed.add((job, attempt, host))
            last = n == len(items) - 1
            observed: dict[str, Any] = self.downs()
            if last:
                observed["inst"] = self.observe_inst()
            self.emit("WorkerStart" if kind == "run" else "WorkerSignal", f"{kind} {job}.{attempt} on {host}",
                      **observed)
        if not items and frame.commands:  # a repeated RunJob or signal: the instances must not change
            self.emit("Stutter", f"commands to {host} the spec does not see", inst=self.observe_inst())

    def on_process_end(self, process: SimProcess) -> None:
        if not self.active or process.pid in self.dying:
            return
        key = (self.name_of(process.key[0]), process.key[1] + 1, process.host)
        if key in self.inst:
            self.emit("WorkerFinish", f"{key} ended", inst=self.observe_inst())
        elif not process.terminating:
            self.reject(f"{key} ended, an instance the spec never started")

    def on_worker_crash(self, node: WorkerNode, machine: bool) -> None:
        """Recorded before anything of the crash happens (its processes die after)."""
        host = node.name
        if node.stream is not None:
            self.accounted.add(node.stream.sid)
        if not self.active:
            return
        sid = node.stream.sid if node.stream is not None else -1
        if not machine:
            if self.up[host]:
                self.close_spec(Deferred("WorkerCrash", host, sid))
            return
        if not self.up[host]:
            return  # the spec knows no daemon there: each process's end is a WorkerFinish, "lost"
        if self.holds_reports(sid) or any(d.host == host for d in self.deferred):
            self.stop(f"machine crash of {host} while the leader still holds its reports (G1)")
            return
        self.up[host], self.conn[host], self.joining[host] = False, 0, 0
        self.conn_sid.pop(host, None)
        self.join_sid.pop(host, None)
        self.known[host], self.down[host] = set(), []
        self.dying = {p.pid for p in self.sim.os.live() if p.host == host}
        self.inst = frozenset(x for x in self.instances() if x[2] != host)
        shown = SetOf(tuple({"job": j, "attempt": a, "host": h} for j, a, h in sorted(self.inst)))
        self.emit("WorkerCrash", f"machine {host}", inst=shown, **self.connections())

    def on_close(self, stream: Stream) -> None:
        if stream.sid in self.accounted:
            return
        if stream.kind == "sync":
            sched = self.scheduler_of(stream) if self.active else None
            if sched is not None:
                self.pos[sched], self.sync[sched] = -1, []
                self.emit("StreamBreak", f"Sync stream of {sched}", **self.syncs())
            return
        host = stream.endpoint
        received = self.joins_received.get(host, [])
        if stream.sid in received and stream.sid not in self.queued(lambda term: term.workers.joins):
            received.remove(stream.sid)  # refused, never to be proposed
        if not self.active:
            return
        if self.conn_sid.get(host) == stream.sid and self.conn[host]:
            self.close_spec(Deferred("StreamBreak", host, stream.sid))
        elif self.join_sid.get(host) == stream.sid and self.joining[host]:
            self.close_spec(Deferred("WorkerCrash", host, stream.sid))

    def close_spec(self, close: Deferred) -> None:
        if self.holds_reports(close.sid) or any(d.host == close.host for d in self.deferred):
            self.count("closes deferred for reports still to relay")
            self.deferred.append(close)
            return
        host = close.host
        if close.action == "WorkerCrash":
            self.up[host] = False
        self.conn[host], self.joining[host] = 0, 0
        self.conn_sid.pop(host, None)
        self.join_sid.pop(host, None)
        self.known[host], self.down[host] = set(), []
        self.emit(close.action, f"{host}'s stream {close.sid}", **self.connections())

    def flush_deferred(self) -> None:
        """Take the deferred closes whose reports went out, in order, each host's in turn."""
        waiting, self.deferred = self.deferred, []
        for close in waiting:
            self.close_spec(close)


__all__ = ["TraceRecorder", "abstract_host", "abstract_job", "job_name"]
