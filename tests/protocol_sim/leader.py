"""Each replica's leader core, driven over the simulated network: controller/replica.py's job here.

Theory of operation. Every replica that is up has the real
`controller.leader.LeaderCore` (one for the life of the replica process, as
in production), reading the replica's tables through a `SimState`, asking a
`SimConsensus` whether it leads and is caught up, and reading the simulated
clock. This module only does what controller/replica.py does around the core:
it turns the simulation's events into the core's inputs (entries applied,
a proposal's outcome, a call, a worker's message or hang-up, time passing)
and performs the effects the core returns, in order:
- Propose: the entry is appended to the replica's log (if it still leads);
  its outcome is reported when the replica applies that index, with the
  results if the entry there is still the one proposed (same term), else
  None (pysyncobj's LEADER_CHANGED);
- Send / EndStream: onto / closing the simulated worker stream, framed with
  the real xce/worker_wire.py;
- Reply: into the reply bag (a refusal is a None reply: the caller retries);
- AskPeers: answered at once with what each up replica's code understands;
- ChangeRaft / TransferLeadership: refused at once (`raft_changed` with ok
  False, as pysyncobj refuses a change it cannot take). The simulated cluster
  has a fixed Raft configuration of three replicas and no membership writes,
  so the core never asks for either here; were it to, it hears a refusal and
  retries, instead of waiting on an outcome that never comes.

Every effect is matched, `assert_never` in the default case: a new kind of
effect fails the type check until this driver says what it does with it.

Sync streams are served with the real `controller.sync_stream.SyncFeed`,
ending when the core's serving leadership changes, as grpc_api.py does.

Commit before send: sessions see an entry only once it applied. The injected
bug `run_before_commit` makes the SimState yield the tables with every
proposed entry applied speculatively, and tells the core of each one as if
it had applied.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, assert_never

from controller import fsm, sync_stream
from controller.authz import Principal
from controller.leader import (
    AskPeers,
    ChangeRaft,
    Effect,
    EndStream,
    LeaderCore,
    LeaderSettings,
    Propose,
    Reply,
    Send,
    TransferLeadership,
)
from controller.tables import MemoryTables, Tables
from xce import worker_wire
from xce.errors import ServiceError
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

from .network import Call, Stream
from .network import Reply as CallReply
from .raft import LogEntry, Replica, copy_tables

if TYPE_CHECKING:
    from .cluster import Sim

CLUSTER = "sim"
QUEUE = "normal"
URGENT = "urgent"  # preempts `normal` (by suspending) and `scavenger` (by requeueing)
SCAVENGER = "scavenger"
HEARTBEAT_S = 0.5
HEARTBEAT_TIMEOUT_S = 2.0
UNKNOWN_TIMEOUT_S = 6.0
SESSION_FULL_LOOK_S = 1.0  # short, so the periodic full derivation meets the routed changes often


def queues(preemption: bool) -> list[api.Queue]:
    """One queue; with preemption, a queue above it that preempts it (suspending, its GPUs given back
    too) and one below it (requeueing), each job preempted at most twice."""
    if not preemption:
        return [api.Queue(name=QUEUE, priority=30)]
    return [api.Queue(name=URGENT, priority=60, preemptive=[QUEUE, SCAVENGER]),
            api.Queue(name=QUEUE, priority=30, preemptable=True, preempt_action=api.PREEMPT_SUSPEND,
                      preemptable_resources=["gpu"], max_preemptions=2),
            api.Queue(name=SCAVENGER, priority=10, preemptable=True, preempt_action=api.PREEMPT_REQUEUE,
                      max_preemptions=2)]


def init_entry(events_kept: int, preemption: bool) -> log.InitCluster:
    """The cluster's first entry; few events kept, so Sync streams fall behind the floor."""
    return log.InitCluster(cluster_id=CLUSTER, default_queue=QUEUE, max_slots_per_job=8,
                           config_digest="sim-1", queues=queues(preemption), events_kept=events_kept)


class SimState:
    """What the core reads committed state through (StateStore.read)."""

    def __init__(self, driver: ReplicaDriver) -> None:
        self._driver = driver

    @contextlib.contextmanager
    def read(self) -> Iterator[Tables]:
        yield self._driver.tables_for_core()


class SimConsensus:
    def __init__(self, driver: ReplicaDriver) -> None:
        self._driver = driver

    def leader_term(self) -> int | None:
        replica = self._driver.replica
        return replica.term if replica.up and replica.leading else None

    def caught_up(self) -> bool:
        replica = self._driver.replica
        return self.leader_term() is not None and replica.applied >= self._driver.noop_index

    def leader_address(self) -> str | None:
        return None  # the simulation's endpoints find leaders by themselves

    # The simulated Raft configuration is fixed, its replicas known by id alone (no addresses):
    # no membership change runs here, and these are what the core asks only during one.
    def voters(self) -> frozenset[str]:
        return frozenset()

    def raft_busy(self) -> bool:
        return False

    def reachable(self) -> frozenset[str]:
        return frozenset()


@dataclass
class SyncLink:
    stream: Stream
    feed: sync_stream.SyncFeed
    term: int


@dataclass
class ReplicaDriver:
    sim: Sim
    replica: Replica
    noop_index: int = 0
    proposals: dict[int, tuple[int, int]] = field(default_factory=dict)  # log index -> (token, term)
    calls: dict[int, Call] = field(default_factory=dict)
    streams: dict[int, Stream] = field(default_factory=dict)  # worker streams the core knows
    syncs: dict[int, SyncLink] = field(default_factory=dict)
    speculative: MemoryTables | None = None
    speculated: int = 0

    def __post_init__(self) -> None:
        settings = LeaderSettings(
            replica_id=self.replica.rid, members=tuple(r.rid for r in self.sim.raft.replicas),
            init=init_entry(self.sim.options.events_kept, self.sim.options.preemption),
            kinds=frozenset(self.sim.handlers), heartbeat_s=HEARTBEAT_S,
            heartbeat_timeout_s=HEARTBEAT_TIMEOUT_S, unknown_timeout_s=UNKNOWN_TIMEOUT_S,
            fence_s=self.sim.options.fence_s, submit_max_requests=4, session_full_look_s=SESSION_FULL_LOOK_S)
        self.core = LeaderCore(settings, SimState(self), SimConsensus(self), self.sim.clock,
                               random.Random(self.sim.seed * 10 + self.replica.rid))

    # -------------------------------------------------------------- reading

    def tables_for_core(self) -> Tables:
        if self.sim.options.run_before_commit and self.speculative is not None:
            return self.speculative  # the injected bug: what is proposed, not what is committed
        return self.replica.tables

    def serving(self) -> bool:
        return self.core.serving_term() is not None

    # -------------------------------------------------------------- inputs

    def elected(self) -> None:
        self.noop_index = self.replica.last_index()
        self.poll()

    def poll(self) -> None:
        """The driver's timer: the core looks at the time and at its role."""
        self.core.tick()
        self.perform()

    def on_applied(self, index: int, entry: LogEntry, results: list[log.Result] | None) -> None:
        proposed = self.proposals.pop(index, None)
        if proposed is not None:
            token, term = proposed
            self.core.proposal_done(token, results if entry.term == term else None)
        if entry.data is not None:
            self.core.applied([index])
        self.perform()
        for link in list(self.syncs.values()):
            self.tail(link)

    def on_call(self, call: Call) -> str:
        token = self.sim.next_id()
        self.calls[token] = call
        method = {"submit": "SubmitJobs", "lease": "AcquireLease", "batch": "SubmitDecisions"}[call.kind]
        before = self.replica.last_index()
        request = type(call.request)()  # what arrives is the bytes' own copy: the core may rewrite it
        request.CopyFrom(call.request)
        self.core.call(token, method, request, _caller(call))
        answered = token not in self.calls
        self.perform()
        if answered:
            return f"{call.kind} from {call.caller}: answered at once"
        index = self.replica.last_index()
        return f"{call.kind} from {call.caller} proposed at {index}" if index > before else \
            f"{call.kind} from {call.caller} queued"

    def on_worker_message(self, stream: Stream) -> str:
        message: api.WorkerMessage = stream.up.popleft()
        recorder = self.sim.recorder
        if recorder is not None:
            recorder.on_worker_message(stream, message)
        if stream.sid not in self.streams:
            self.streams[stream.sid] = stream
            self.core.worker_opened(stream.sid, None)  # the simulated network proves nothing
        self.core.worker_message(stream.sid, message)
        self.perform()
        if recorder is not None:
            recorder.join_dropped(stream)
        reports = [f"{r.WhichOneof('body')} {r.job_id}.{r.attempt}"
                   for r in worker_wire.worker_reports(message)]
        return f"{stream.endpoint} {message.WhichOneof('body')} {', '.join(reports)}".rstrip()

    def notice_closed_streams(self) -> None:
        for sid, stream in list(self.streams.items()):
            if not stream.open:
                del self.streams[sid]
                self.core.worker_closed(sid)
        self.perform()

    def crash(self) -> None:
        """The process is gone: every stream it served breaks."""
        for stream in [*self.streams.values(), *(link.stream for link in self.syncs.values())]:
            stream.close("UNAVAILABLE")
        self.streams.clear()
        self.syncs.clear()

    # -------------------------------------------------------------- effects

    def perform(self) -> None:
        for effect in self.core.take():
            self._perform_one(effect)

    def _perform_one(self, effect: Effect) -> None:
        match effect:
            case Propose():
                self._propose(effect)
            case Reply():
                self._reply(effect)
            case Send():
                self._send(effect)
            case EndStream():
                stream = self.streams.pop(effect.stream, None)
                if stream is not None:
                    stream.close(log.Code.Name(effect.error.code) if effect.error is not None else "")
            case AskPeers():
                for peer in self.sim.raft.replicas:
                    if peer.up and peer is not self.replica:
                        self.core.peer_answered(peer.rid, self.sim.handlers, fsm.ENTRY_FORMAT)
            case ChangeRaft() | TransferLeadership():
                # The simulated Raft configuration is fixed (module docstring): refused, as
                # pysyncobj refuses a change it cannot take.
                self.core.raft_changed(effect.token, False, "the simulated cluster's configuration is fixed")
            case _:
                assert_never(effect)

    def _reply(self, effect: Reply) -> None:
        call = self.calls.pop(effect.token, None)
        if call is not None:
            response = None if isinstance(effect.response, ServiceError) else effect.response
            if self.sim.recorder is not None and isinstance(response, api.LeaseResponse):
                self.sim.recorder.on_lease_reply(call.request, response)
            self.sim.replies.append(CallReply(call, response))

    def _send(self, effect: Send) -> None:
        stream = self.streams.get(effect.stream)
        if stream is not None:
            for frame in worker_wire.split(effect.messages):
                if self.sim.recorder is not None:
                    self.sim.recorder.on_frame(stream, frame)
                stream.send_down(worker_wire.controller_frame(frame))

    def _propose(self, effect: Propose) -> None:
        replica = self.replica
        if not (replica.up and replica.leading):
            self.core.proposal_done(effect.token, None)  # not the leader any more: never appended
            return
        replica.entries.append(LogEntry(replica.term, effect.entry.SerializeToString()))
        index = replica.last_index()
        if self.sim.recorder is not None:
            self.sim.recorder.on_propose(self, index, effect.entry)
        self.proposals[index] = (effect.token, replica.term)
        self.sim.ghosts[(index, replica.term)] = self.sim.ghosts_of(effect.entry)
        if self.sim.options.run_before_commit:
            self._speculate()

    def _speculate(self) -> None:
        """The injected bug: sessions read proposed state, as if it had applied."""
        tables = copy_tables(self.replica.tables)
        for index in range(self.replica.applied + 1, self.replica.last_index() + 1):
            data = self.replica.entry(index).data
            if data is not None:
                fsm.apply(tables, index, data, self.sim.handlers)
        self.speculative = tables
        fresh = range(max(self.speculated, self.replica.applied) + 1, self.replica.last_index() + 1)
        self.speculated = self.replica.last_index()
        self.core.applied(list(fresh))

    # -------------------------------------------------------------- Sync streams

    def open_sync(self, stream: Stream, request: log.SyncRequest) -> str:
        term = self.core.serving_term()
        if term is None:
            stream.close("UNAVAILABLE")
            return "refused: not serving"
        feed = sync_stream.SyncFeed(request, CLUSTER)
        opening = feed.opening(self.replica.tables)
        for message in opening:
            stream.send_down(message)
        if self.sim.recorder is not None:
            scheduler = self.sim.schedulers[stream.endpoint]
            self.sim.recorder.on_resync(stream, scheduler.id, opening, feed.revision)
        link = SyncLink(stream, feed, term)
        self.syncs[stream.sid] = link
        self.tail(link)
        return f"{'snapshot at' if opening else 'events after'} {feed.revision}"

    def tail(self, link: SyncLink) -> None:
        if not link.stream.open:
            self.syncs.pop(link.stream.sid, None)
            return
        if self.core.serving_term() != link.term:
            link.stream.close("UNAVAILABLE")  # leadership changed; reconnect
            self.syncs.pop(link.stream.sid, None)
            return
        while True:
            try:
                messages, more, _ = link.feed.next(self.replica.tables)
            except ServiceError as exc:  # resync required: the events it needs were compacted
                if self.sim.recorder is not None:
                    self.sim.recorder.on_sync_out_of_range(link)
                link.stream.close(log.Code.Name(exc.code))
                self.syncs.pop(link.stream.sid, None)
                return
            for message in messages:
                if self.sim.recorder is not None:
                    self.sim.recorder.on_sync_event(link, message)
                link.stream.send_down(message)
            if not more:
                return

    def repeat_event(self, link: SyncLink, back: int) -> int | None:
        """Send an already sent event again (a catch-up read overlapping the live tail)."""
        revision = link.feed.revision - back
        raw = self.replica.tables.get("events", fsm.revision_key(revision)) if revision > 0 else None
        if raw is None or not link.stream.open:
            return None
        if self.sim.recorder is not None:
            self.sim.recorder.on_sync_repeat(link, revision)
        link.stream.send_down(log.SyncMessage(event=log.Event.FromString(raw)))
        return revision


def _caller(call: Call) -> Principal:
    """Who the simulated caller is: a scheduler acts under its own id, clients as a user."""
    if call.kind in ("lease", "batch"):
        return Principal(call.request.scheduler_id, "scheduler", "certificate")
    return Principal("sim", "user")
