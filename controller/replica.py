"""One controller replica: the state store, the Raft node, and the leader core's driver.

Theory of operation. Three threads of control meet here. pysyncobj's tick
thread applies committed entries (RaftNode -> StateStore.apply) and calls
back with proposal outcomes and role changes; the asyncio event loop serves
gRPC (grpc_api.py) and drives the leader core (controller/leader/). Everything from
the tick thread is handed to the loop with `call_soon_threadsafe` (a
synchronous call into pysyncobj from its own thread would deadlock), so the
core only ever runs on the loop, one input at a time.

The driver's whole job: turn events into the core's inputs (role changed,
entries applied, a proposal's outcome, a client call, a worker's message,
time passing), and perform the effects the core returns, in order: propose
through Raft, answer a call, queue messages for a worker stream, end a
stream, ask the peers what their code understands, change the Raft
configuration or hand the leadership over. Every effect is matched, with
`assert_never` in the default case, so the type check fails on one this
driver ignores. Commit before send holds because the core decides what to
send only from applied state.

What the replica says of itself and of the cluster (Status) is replica_status.py's.

Reads (grpc_api.py, reads.py) are served by the leader after its read barrier
(`read_barrier`: Raft's ReadIndex, read_index.py), or by any replica if stale;
`applied` is a fresh asyncio.Event per batch of applied entries, which the
Sync streams wait on.

Membership (membership.py): the committed membership in the local state, or
the cluster file's replicas while it was never changed, says who the peers
are and how this replica runs (`start_mode`): a voter, a learner (a new
replica, with `--join`) or a standby (a voter holding its elections: a
learner just promoted, or a member being removed). A learner that applies
its own promotion restarts itself as a standby (`restart`: the process
re-executes with the same arguments and the same PID, so pysyncobj starts
afresh as a voter on the same files); a standby that applies its own
BECOME_VOTER ends the hold, and a voter that applies its own REMOVE takes
it up. A learner taken out of the membership (its add cancelled) stops.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import os
import random
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, assert_never

import grpc
from google.protobuf.message import Message

from client.credentials import Credentials, FileWatch, TlsFiles
from controller import fsm, job_credential, replica_status
from controller.authn import Authenticator
from controller.authz import Principal
from controller.config import ClusterConfig
from controller.config import Replica as ConfigReplica
from controller.fsm import membership as fsm_membership
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
from controller.raft import FAIL_STOP_EXIT, SUCCESS, RaftNode
from controller.replica_metrics import ReplicaMetrics
from controller.replica_status import peer_status
from controller.store import StateStore, StoreError, lock_data_dir
from xce import sd_notify
from xce.clock import REAL_CLOCK, Clock
from xce.clock_jumps import ClockJumps
from xce.errors import ServiceError, unavailable
from xce.metrics import serve as serve_metrics
from xce.rlimits import raise_descriptor_limit
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

logger = logging.getLogger(__name__)
# A failover holds every worker's new stream until a leader is known, then lets them all go at once:
# 500 hosts' joins, and their sessions' first derivations, in one moment held the new leader's event
# loop for up to a second, and the scheduler's first batch waited behind them. Each held stream
# pauses a random part of this first.
WORKER_REJOIN_SPREAD_S = 0.5


@dataclass(frozen=True)
class Ended:
    """The end of a worker stream's outgoing queue; error None: a clean end."""

    error: ServiceError | None


Outgoing = tuple[api.ControllerMessage, ...] | Ended


class RaftConsensus:
    """leader.Consensus over the Raft node."""

    def __init__(self, raft: RaftNode, grpc_for_raft: Any) -> None:
        self._raft = raft
        self._grpc_for_raft = grpc_for_raft

    def leader_term(self) -> int | None:
        return self._raft.leader_term()

    def caught_up(self) -> bool:
        return self._raft.ready_to_serve()

    def leader_address(self) -> str | None:
        return self._grpc_for_raft(self._raft.leader())  # type: ignore[no-any-return]

    def voters(self) -> frozenset[str]:
        return self._raft.voters()

    def raft_busy(self) -> bool:
        return self._raft.change_in_flight()

    def reachable(self) -> frozenset[str]:
        return self._raft.reachable()


def bootstrap_members(config: ClusterConfig) -> tuple[api.Member, ...]:
    """The cluster file's replicas: the membership until it is first changed."""
    return tuple(api.Member(id=r.id, grpc_address=r.grpc, raft_address=r.raft) for r in config.replicas)


def start_mode(members: Sequence[api.Member], changed: bool, replica_id: int, join: bool) -> str:
    """How replica `replica_id` runs, from the membership in its state (`changed`: committed, not the
    file's) and whether it was started to join (StoreError: it may not start)."""
    mine = next((m for m in members if m.id == replica_id), None) if changed or not join else None
    if mine is None:  # with --join, its own file's listing of it says nothing yet
        if join:
            return "learner"
        if changed:
            raise StoreError(f"replica {replica_id} is not a member of the cluster (removed, or never "
                             "added): start it with --join on an empty data directory, then `xce member add`")
        raise StoreError(f"replica {replica_id} is not in the cluster file")
    if mine.role == api.MEMBER_LEARNER:
        return "learner"
    if mine.role in (api.MEMBER_PROMOTING, api.MEMBER_REMOVING):
        # Promoted, or being removed: a voter of the Raft configuration until the change is done (it
        # may count in a majority), which starts no election meanwhile.
        return "standby"
    return "voter"


def leader_settings(config: ClusterConfig, replica_id: int, kinds: frozenset[str]) -> LeaderSettings:
    init = log.InitCluster(cluster_id=config.cluster_id, default_queue=config.default_queue,
                           max_slots_per_job=config.max_slots_per_job, config_digest=config.digest(),
                           queues=config.queues, events_kept=config.events_kept,
                           clean_period_ms=round(config.clean_period_s * 1000),
                           history_retention_ms=round(config.history_days * 86_400_000),
                           host_groups=config.host_groups, shared=config.shared,
                           resources_digest=config.resources_digest(),
                           limits=config.limits, limits_digest=config.limits_digest(),
                           user_groups=config.user_groups, user_groups_digest=config.user_groups_digest())
    return LeaderSettings(
        replica_id=replica_id, members=tuple(r.id for r in config.replicas), init=init, kinds=kinds,
        credential_key=job_credential.key_from(config.password, config.cluster_id),
        bootstrap=bootstrap_members(config),
        heartbeat_s=config.heartbeat_s, heartbeat_timeout_s=config.heartbeat_timeout_s,
        unknown_timeout_s=config.unknown_timeout_s, fence_s=config.fence_s,
        load_commit_s=config.load_commit_s, session_full_look_s=config.resend_s,
        submit_max_requests=config.group_commit_max_requests,
        submit_max_bytes=config.group_commit_max_bytes,
        submit_max_in_flight=config.group_commit_max_in_flight, policy=config.policy)


class Replica:
    def __init__(self, config: ClusterConfig, replica_id: int,
                 handlers: Mapping[str, fsm.Handler] = fsm.HANDLERS, clock: Clock = REAL_CLOCK,
                 rng: random.Random | None = None, join: bool = False, member_pause_s: float = 0.0,
                 read_faults: frozenset[str] = frozenset()) -> None:
        self.config = config
        self.read_faults = read_faults  # XCE_FAULT stale-reads, lease-reads: deliberately broken (faults.py)
        self.me = config.replica(replica_id)
        self.clock = clock
        self.kinds = frozenset(handlers)
        data_dir = self.data_dir = config.replica_dir(replica_id)
        # The state holds every job's environment and command: this replica's files are
        # its own (the Raft log, the state, snapshots), whatever the umask or an older build left.
        data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        data_dir.chmod(0o700)
        self._held = lock_data_dir(data_dir)  # one replica a directory; a restore or force waits for none
        self.store = StateStore(data_dir / "state", config.cluster_id, handlers)
        self.bootstrap = bootstrap_members(config)
        meta = self.store.meta()
        members = self.members(meta)
        self.mode = start_mode(members, bool(meta.membership), replica_id, join)
        # Not a promoted member: the Raft configuration takes it in by a log entry, which the log
        # replays (raft.py); counting it from the membership would make a voter of it too soon.
        voting = [m.raft_address for m in members if m.role in (api.MEMBER_VOTER, api.MEMBER_REMOVING)
                  or m.id == replica_id]
        self.restart = False  # set when this learner was promoted: `serve` returns, the caller re-executes
        self.removed = False  # set when this learner was taken out of the membership: `serve` returns
        self._was_member = any(m.id == replica_id for m in meta.membership)
        self._stop: asyncio.Event | None = None
        self.applied = asyncio.Event()  # replaced and set after every batch of applied entries
        self._loop: asyncio.AbstractEventLoop | None = None
        self._applied_lock = threading.Lock()
        self._applied_indices: list[int] = []  # applied, not yet handed to the loop
        self.raft = RaftNode(self.me.raft, voting, data_dir, config.password, self.store, config.raft,
                             on_role_change=self._role_changed, on_applied=self._entry_applied, clock=clock,
                             mode=self.mode)
        if self.mode != "voter":
            logger.info("replica %d starts as a %s (committed members: %s)", replica_id, self.mode,
                        ", ".join(f"{m.id} {fsm_membership.role_name(m.role)}" for m in meta.membership)
                        or "none yet")
        settings = dataclasses.replace(leader_settings(config, replica_id, self.kinds),
                                       member_pause_s=member_pause_s)
        self.core = LeaderCore(settings, self.store,
                               RaftConsensus(self.raft, self.grpc_for_raft), clock, rng or random.Random())
        self._ids = itertools.count(1)
        self.peer_credentials = peer_credentials(config, self.me)
        self._calls: dict[int, asyncio.Future[Message]] = {}
        self._streams: dict[int, asyncio.Queue[Outgoing]] = {}
        self._wake = asyncio.Event()
        self._held = 0  # calls waiting in leader_settled
        self._spread = random.Random()  # the pauses of worker streams held through an election
        self._changed = asyncio.Event()  # replaced and set after each input while calls are held
        self._tasks: set[asyncio.Task[Any]] = set()
        self.sync_streams_open: Callable[[], int] = lambda: 0  # set by grpc_api (its metrics)
        # The daemons whose streams it serves that said where their metrics are: set by grpc_api (Status).
        self.daemons: Callable[[], list[api.Daemon]] = lambda: []
        self.metrics: ReplicaMetrics | None = None  # with [[replicas]] metrics = "host:port"
        self._proposed_at: dict[int, float] = {}  # proposal token -> when, for the commit latency
        self._clock_jumps = ClockJumps()  # said in the log: the times this replica stamps moved

    # -------------------------------------------------------------- from the tick thread

    def _entry_applied(self, index: int) -> None:  # tick thread
        if self._loop is None:
            return
        with self._applied_lock:
            self._applied_indices.append(index)
            if len(self._applied_indices) > 1:
                return  # a hand-over is scheduled already; it takes this index too
        self._loop.call_soon_threadsafe(self._hand_over_applied)

    def _hand_over_applied(self) -> None:
        with self._applied_lock:
            indices, self._applied_indices = self._applied_indices, []
        event, self.applied = self.applied, asyncio.Event()
        event.set()
        self.core.applied(indices)
        self._perform()
        self._own_role()

    def _own_role(self) -> None:
        """Act on this replica's own role in the membership it has applied (module docstring)."""
        if self.restart or self.removed:
            return  # on its way out: the store may be closed already
        meta = self.store.meta()
        mine = next((m for m in meta.membership if m.id == self.me.id), None)
        self._was_member = self._was_member or mine is not None
        if self.mode == "learner":
            if mine is not None and mine.role in fsm_membership.VOTING:
                logger.info("replica %d: promoted (%s); restarting as a voter", self.me.id,
                            fsm_membership.role_name(mine.role))
                self.restart = True
            elif mine is None and self._was_member and meta.membership:
                logger.warning("replica %d: no longer a member (the add was cancelled): stopping", self.me.id)
                self.removed = True
            if (self.restart or self.removed) and self._stop is not None:
                self._stop.set()
        elif mine is not None and mine.role == api.MEMBER_VOTER and self.raft.standing_by():
            self.raft.end_hold()
            self.mode = "voter"
        elif mine is not None and mine.role == api.MEMBER_REMOVING and not self.raft.standing_by():
            self.raft.hold()
            self.mode = "standby"

    # -------------------------------------------------------------- membership

    def members(self, meta: log.Meta | None = None) -> list[api.Member]:
        """The committed membership as this replica has applied it (the cluster file's until changed)."""
        return fsm_membership.members(meta if meta is not None else self.store.meta(), self.bootstrap)

    def grpc_for_raft(self, raft_address: str | None) -> str | None:
        if raft_address is None:
            return None
        for member in (*self.members(), *self.bootstrap):
            if member.raft_address == raft_address:
                return member.grpc_address
        return None

    def _raft_changed(self, token: int, ok: bool, why: str) -> None:
        self.core.raft_changed(token, ok, why)
        self._perform()

    def _role_changed(self, role: str) -> None:  # tick thread
        if self.metrics is not None:
            self.metrics.role_changes.inc()
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._on_role)

    def _on_role(self) -> None:
        self.core.role_changed()
        self._perform()
        self._wake.set()

    def _proposal_done(self, token: int, results: list[log.Result] | None) -> None:
        started = self._proposed_at.pop(token, None)
        if started is not None and results is not None and self.metrics is not None:
            self.metrics.commit_latency.observe(self.clock.monotonic_s() - started)
        self.core.proposal_done(token, results)
        self._perform()

    # -------------------------------------------------------------- inputs from gRPC

    async def call(self, method: str, request: Message, caller: Principal) -> Message:
        """An authenticated client's write, answered by the leader core (raises ServiceError)."""
        token = next(self._ids)
        future: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._calls[token] = future
        self.core.call(token, method, request, caller)
        self._perform()
        try:
            return await future
        finally:
            self._calls.pop(token, None)

    async def leader_settled(self, hold_s: float) -> bool:
        """Return once this replica serves as the leader or knows a leader to refer callers to, or
        after hold_s. While an election is on (a leader was just killed), a follower knows none, and
        the UNAVAILABLE it would answer at once sends the caller into a backoff that can outlast the
        election by a second; held here, a worker or client hears of the new leader as soon as this
        replica does (a long poll). True when the call was held until a leader was known (it came
        during an election); False when it was not held, or no leader came within hold_s."""
        if self._settled():
            return False
        deadline = self.clock.monotonic_s() + min(hold_s, self.raft.election_s())
        self._held += 1
        try:
            while not self._settled():
                left = deadline - self.clock.monotonic_s()
                if left <= 0:
                    return False
                try:
                    await asyncio.wait_for(self._changed.wait(), left)
                except TimeoutError:
                    return False
        finally:
            self._held -= 1
        return True

    def rejoin_pause_s(self) -> float:
        """How long a worker's stream that was held through an election waits before it goes on:
        spread over WORKER_REJOIN_SPREAD_S, so the workers held until a leader is known do not all
        join (or follow the refusal to the leader) in the same moment."""
        return self._spread.uniform(0.0, WORKER_REJOIN_SPREAD_S)

    def _settled(self) -> bool:
        """This replica serves as the leader, or names one in its refusal."""
        return self.core.serving_term() is not None or bool(self.core.refusal().leader)

    async def read_barrier(self) -> None:
        """Return once a read arriving now may be answered from this replica's state: it leads, a
        majority confirmed that after the read arrived, and it applied what was committed then
        (Raft's ReadIndex, read_index.py). Else the refusal a write would get (followers name the
        leader), so clients follow the leader for reads as for writes."""
        if self.read_faults and ("stale-reads" in self.read_faults or self.core.serving_term() is not None):
            return
        if self.core.serving_term() is None:
            raise self.core.refusal()
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[bool] = loop.create_future()

        def settle(ok: bool) -> None:
            if not answer.done():
                answer.set_result(ok)

        def done(ok: bool) -> None:  # tick thread
            loop.call_soon_threadsafe(settle, ok)

        self.raft.read_index(done)
        if not await answer:
            refusal = self.core.refusal() if self.core.serving_term() is None else None
            raise refusal or unavailable("the read could not be confirmed by a majority in time; retry")

    def worker_opened(self, host: str | None) -> tuple[int, asyncio.Queue[Outgoing]]:
        stream = next(self._ids)
        queue: asyncio.Queue[Outgoing] = asyncio.Queue()
        self._streams[stream] = queue
        self.core.worker_opened(stream, host)
        self._perform()
        return stream, queue

    def worker_message(self, stream: int, message: api.WorkerMessage) -> None:
        self.core.worker_message(stream, message)
        self._perform()

    def worker_closed(self, stream: int) -> None:
        if self._streams.pop(stream, None) is not None:
            self.core.worker_closed(stream)
            self._perform()

    def end_worker_stream(self, stream: int, error: ServiceError | None) -> None:
        """The worker hung up (None) or sent what cannot be read: end the outgoing side too."""
        queue = self._streams.pop(stream, None)
        if queue is not None:
            queue.put_nowait(Ended(error))
            self.core.worker_closed(stream)
            self._perform()

    # -------------------------------------------------------------- effects

    def _perform(self) -> None:
        for effect in self.core.take():
            try:
                self._perform_one(effect)
            except Exception:  # a bug in one effect must not drop the ones after it
                logger.exception("performing %s failed", type(effect).__name__)
        if self.core.busy():
            self._wake.set()  # more sessions to step: the timer takes the next turn at once
        if self._held and self._settled():  # wake the calls held in leader_settled, once there is news
            event, self._changed = self._changed, asyncio.Event()
            event.set()

    def _perform_one(self, effect: Effect) -> None:
        match effect:
            case Propose():
                self._propose(effect)
            case Reply():
                self._reply(effect)
            case Send():
                queue = self._streams.get(effect.stream)
                if queue is not None:
                    queue.put_nowait(effect.messages)
            case EndStream():
                queue = self._streams.pop(effect.stream, None)
                if queue is not None:
                    queue.put_nowait(Ended(effect.error))
            case AskPeers():
                self._spawn(self._ask_peers())
            case ChangeRaft():
                self.raft.change_membership(effect.add, effect.address, self._raft_done(effect.token))
            case TransferLeadership():
                self.raft.transfer_leadership(self._raft_done(effect.token))
            case _:
                assert_never(effect)

    def _reply(self, effect: Reply) -> None:
        future = self._calls.pop(effect.token, None)
        if future is not None and not future.done():
            if isinstance(effect.response, ServiceError):
                future.set_exception(effect.response)
            else:
                future.set_result(effect.response)

    def _raft_done(self, token: int) -> Callable[[bool, str], None]:
        """The callback of a Raft change or transfer: its outcome handed to the loop."""
        loop = self._loop
        assert loop is not None

        def done(ok: bool, why: str) -> None:  # tick thread
            loop.call_soon_threadsafe(self._raft_changed, token, ok, why)

        return done

    def _propose(self, effect: Propose) -> None:
        loop = self._loop
        assert loop is not None
        token = effect.token
        if self.metrics is not None:
            self._proposed_at[token] = self.clock.monotonic_s()

        def done(result: Any, error: int) -> None:  # tick thread
            loop.call_soon_threadsafe(self._proposal_done, token, result if error == SUCCESS else None)

        try:
            self.raft.propose(effect.entry.SerializeToString(), done)
        except ValueError as exc:  # larger than any entry may be: never proposed
            logger.error("a %s entry was not proposed: %s", effect.entry.WhichOneof("body"), exc)
            loop.call_soon(self._proposal_done, token, None)

    async def _ask_peers(self) -> None:
        peers = [m for m in self.members() if m.id != self.me.id]
        answers = await asyncio.gather(*(peer_status(self.peer_credentials, m.grpc_address) for m in peers))
        for member, answer in zip(peers, answers, strict=True):
            if isinstance(answer, api.ReplicaStatus):
                self.core.peer_answered(member.id, answer.entry_kinds, max(1, answer.entry_format),
                                        answer.role, answer.applied_index)
            else:
                self.core.peer_answered(member.id, (), 0, "unreachable")
        self._perform()

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run_timer(self) -> None:
        while True:
            self._wake.clear()
            delay = max(0.0, self.core.next_wakeup_s() - self.clock.monotonic_s())
            try:
                await asyncio.wait_for(self._wake.wait(), delay)  # yields to the loop even at 0
            except TimeoutError:
                pass
            self._clock_jumps.log_if_moved(logger, f"replica {self.me.id}", self.clock.now_ms() / 1000,
                                           self.clock.monotonic_s())
            try:
                self.core.tick()
            except Exception:  # a bug in the core: say so, and keep the timer alive
                logger.exception("the leader core failed on a tick")
            self._perform()

    # -------------------------------------------------------------- configuration

    async def reconfigure(self, dry_run: bool = False) -> api.ReconfigureResponse:
        """Re-read the cluster file (controller/reconfig.py)."""
        from controller import reconfig

        return await reconfig.reconfigure(self, dry_run)

    def wake(self) -> None:
        """Let the timer take a turn now (a push to make)."""
        self._wake.set()

    # -------------------------------------------------------------- status

    def local_status(self) -> api.ReplicaStatus:
        return replica_status.local_status(self)

    async def status(self, request: api.StatusRequest) -> api.StatusResponse:
        return await replica_status.cluster_status(self, request)

    def _not_serving(self) -> ServiceError | None:
        """None if this replica serves as the leader, else how it refuses writes."""
        return None if self.core.serving_term() is not None else self.core.refusal()

    # -------------------------------------------------------------- serving

    async def serve(self, stop: asyncio.Event) -> None:
        from controller import grpc_api

        self._loop = asyncio.get_running_loop()
        self._stop = stop
        self._on_role()
        timer = self._loop.create_task(self._run_timer())
        timer.add_done_callback(_timer_ended)
        config = self.config
        raise_descriptor_limit()
        server = grpc.aio.server(options=grpc_api.server_options(config.handshake_timeout_s,
                                                                 config.idle_connection_timeout_s))
        authenticator = Authenticator(self.store, self.clock, config.static_tokens, config.munge_roles,
                                      config.munge, tls=not config.tls.insecure,
                                      munge_socket=config.munge_socket,
                                      replica_token=config.replica_token() if config.tls.insecure else "",
                                      not_authoritative=self._not_serving)
        server.add_generic_rpc_handlers(grpc_api.handlers(self, authenticator))
        if self.config.tls.insecure:
            logger.warning("replica %d: [tls] insecure = true: gRPC in plaintext", self.me.id)
            server.add_insecure_port(self.me.grpc)
        else:
            server.add_secure_port(self.me.grpc, server_credentials(self.config, self.me))
        await server.start()
        logger.info("replica %d serving gRPC on %s, Raft on %s", self.me.id, self.me.grpc, self.me.raft)
        metrics_server = None
        if self.me.metrics:
            self.metrics = ReplicaMetrics(self, lambda: self.sync_streams_open())
            metrics_server = serve_metrics(self.me.metrics, self.metrics.registry)
            logger.info("replica %d serving metrics on http://%s/metrics", self.me.id, self.me.metrics)
        me = self.me
        sd_notify.notify("READY=1", f"STATUS=replica {me.id}: {self.mode}, gRPC on {me.grpc}, "
                                    f"Raft on {me.raft}")
        self._own_role()  # a change applied while it was down: nothing more to apply may come
        await stop.wait()
        if self.restart:  # systemd waits for the READY=1 of the re-executed process
            sd_notify.notify("RELOADING=1", f"MONOTONIC_USEC={round(self.clock.monotonic_s() * 1e6)}")
        else:
            sd_notify.notify("STOPPING=1")
        await server.stop(grace=1.0)
        if metrics_server is not None:
            metrics_server.shutdown()
        timer.cancel()
        for task in list(self._tasks):
            task.cancel()
        self.raft.close()
        self.store.close()


def _timer_ended(task: asyncio.Task[None]) -> None:
    """Without its timer a leader never serves and proposals never expire: stop loudly."""
    if not task.cancelled() and task.exception() is not None:
        logger.critical("the leader core's timer died; stopping this replica", exc_info=task.exception())
        logging.shutdown()
        os._exit(FAIL_STOP_EXIT)


def server_credentials(config: ClusterConfig, me: ConfigReplica) -> grpc.ServerCredentials:
    """Mutual TLS: this replica's certificate, and every client must present one from the cluster CA.
    Read again when the files change (a renewed certificate, a new CA bundle: docs/SECURITY.md), for
    the next handshake: gRPC asks before each one."""
    assert config.tls.ca is not None and me.cert is not None and me.key is not None
    paths = (Path(config.tls.ca), me.cert, me.key)
    try:
        first: tuple[bytes | None, ...] = tuple(p.read_bytes() for p in paths)
    except OSError as exc:
        raise SystemExit(f"replica {me.id}: cannot read its TLS files: {exc}") from None
    watch = FileWatch()
    watch.read(paths, first)
    served = [first]

    def configuration(files: tuple[bytes | None, ...]) -> Any:
        ca, cert, key = files
        return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=ca)

    def fetch() -> Any:
        current = watch.read(paths, first)
        if current == served[0]:
            return None  # unchanged
        served[0] = current
        logger.info("replica %d: TLS files changed: the next connections use them", me.id)
        return configuration(current)

    return grpc.dynamic_ssl_server_credentials(configuration(first), fetch,
                                               require_client_authentication=True)


def peer_credentials(config: ClusterConfig, me: ConfigReplica) -> Credentials:
    """What this replica presents to its peers (Status fan-out): its own certificate."""
    if config.tls.insecure:
        return Credentials(insecure=True, token=config.replica_token())
    assert config.tls.ca is not None and me.cert is not None and me.key is not None
    try:
        return Credentials(ca=Path(config.tls.ca).read_bytes(), cert=me.cert.read_bytes(),
                           key=me.key.read_bytes(), files=TlsFiles(config.tls.ca, me.cert, me.key))
    except OSError as exc:
        raise SystemExit(f"replica {me.id}: cannot read its TLS files: {exc}") from None
