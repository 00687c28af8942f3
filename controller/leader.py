"""The leader's logic without I/O: inputs in, effects out (etcd-raft's Ready, h11).

Theory of operation. One `LeaderCore` per replica. Its driver (replica.py
on the gRPC event loop; tests/protocol_sim on a simulated network) feeds it
inputs, each a method call:
- `tick()`: time passed (the core reads its injected clock); also notices a
  change of role (the consensus is asked);
- `applied(indices)`: entries were applied to the state;
- `proposal_done(token, results)`: the outcome of a Propose (None: unknown);
- `call(token, method, request)`: a client's write (SubmitJobs, ControlJob,
  ModifyJob, RunJob, CreateQueue, UpdateQueue, AcquireLease, SubmitDecisions);
- `worker_opened / worker_message / worker_closed`: a worker's stream;
- `peer_answered(replica, kinds, format, ...)`: what a peer's code understands
  (and, for a membership change, its role and applied index);
- `raft_changed(token, ok, why)`: the outcome of a ChangeRaft or TransferLeadership;
and takes the effects with `take()`, to be performed in order:
- `Propose(token, entry)`: replicate the entry (already stamped with the
  leader's time, its replica id and the entry format);
- `Send(stream, messages)`: to a worker, in order (framing is the driver's);
- `EndStream(stream, error)`: close a worker stream (error None: cleanly);
- `Reply(token, response_or_error)`: answer a client call;
- `AskPeers()`: fetch every peer's Status and report it with peer_answered;
- `ChangeRaft(token, add, address)`, `TransferLeadership(token)`: a step of
  a membership change (membership.py) in the Raft configuration.
`next_wakeup_s()` says when to tick next if nothing else happens.

Commit before send: nothing reaches a worker before the entry that decided
it applied (worker_session.py derives everything from committed state).
Serving: a leader answers writes only once the first entry of its term
applied (the consensus says `caught_up`), so every pre-check sees every
earlier commit, and once its configuration push is done.

What a leadership keeps (`Term`) is dropped whole when the consensus says
this replica no longer leads: its worker streams end, its waiters are told
UNAVAILABLE (their outcome is settled from committed state if it is there),
and the next leadership starts afresh; workers re-join, and everything is
derived again.

Pure: no sockets, threads, asyncio or wall clock; the state is read through
an injected reader, time through an injected clock, request ids come from an
injected random generator.
"""

from __future__ import annotations

import functools
import logging
import random
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from google.protobuf.message import Message

from controller import (
    audit_trail,
    authz,
    fsm,
    job_credential,
    membership,
    output_relay,
    proposals,
    request_ids,
)
from controller.authz import Principal
from controller.fsm import depends, history, limit_config, reports, versions
from controller.fsm import membership as fsm_membership
from controller.group_commit import GroupCommit
from controller.host_liveness import Liveness
from controller.load_commits import LoadCommits
from controller.output_relay import OutputRelay
from controller.pending_counts import PendingCounts
from controller.submit_rates import SubmitRates
from controller.tables import Tables
from controller.watchdog import Change, Watchdog
from controller.worker_session import RESEND_S, SessionOver, WorkerSession, route
from controller.worker_session import hosts_of as worker_hosts_of
from xce.clock import Clock
from xce.errors import ServiceError, failed_precondition, invalid, unavailable
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

logger = logging.getLogger(__name__)

MAX_DECISIONS = 10_000
MAX_REPORTS_PER_ENTRY = 4096
CATCH_UP_POLL_S = 0.01  # a new leader looks this often whether its term's first entry applied
CONFIG_RETRY_S = 0.05
SESSION_SWEEP_S = 0.25  # how often sessions are checked for their periodic full look
# Sessions stepped per input or tick: after a failover every worker re-joins at
# once, and deriving every host's jobs in one go (RunJob for each) would hold
# the driver's event loop for seconds; the rest wait for the next turn, which
# the driver takes at once (next_wakeup_s), letting other events in between.
SESSION_STEPS_PER_TURN = 32
CAPABILITY_POLL_S = 5.0
MEMBER_POLL_S = 0.2  # while a membership change is in flight: how often members are asked
MEMBER_RETRY_S = 0.5  # after a Raft change or transfer that was refused (pysyncobj: one at a time)


# ---------------------------------------------------------------- what the core needs


class Consensus(Protocol):
    def leader_term(self) -> int | None:
        """The Raft term this replica believes it leads in; None when it does not lead."""
        ...

    def caught_up(self) -> bool:
        """It leads and the first entry of its term applied (all earlier commits are applied)."""
        ...

    def leader_address(self) -> str | None:
        """The gRPC address of the leader this replica knows of, if any."""
        ...

    def voters(self) -> frozenset[str]:
        """The Raft configuration as this replica's log has it: the members' Raft addresses."""
        ...

    def raft_busy(self) -> bool:
        """A change of the Raft configuration is appended and not applied yet."""
        ...

    def reachable(self) -> frozenset[str]:
        """The members' Raft addresses this replica is connected to, itself included."""
        ...


class StateReader(Protocol):
    def read(self) -> AbstractContextManager[Tables]: ...


@dataclass(frozen=True)
class LeaderSettings:
    replica_id: int
    members: tuple[int, ...]  # the cluster file's replicas: the membership until it is first changed
    init: log.InitCluster  # the configuration push
    kinds: frozenset[str]  # the entry kinds this replica's code applies
    heartbeat_s: float = 2.0
    heartbeat_timeout_s: float = 10.0
    fence_s: float = 0.0  # told to workers as they join (worker-side fence; 0: none)
    unknown_timeout_s: float = 300.0
    submit_max_requests: int = 512
    submit_max_bytes: int = 1 << 20
    submit_max_in_flight: int = 1
    session_full_look_s: float = RESEND_S
    capability_poll_s: float = CAPABILITY_POLL_S
    policy: authz.Policy = field(default_factory=authz.Policy)
    bootstrap: tuple[api.Member, ...] = ()  # the cluster file's replicas with their addresses
    member_pause_s: float = 0.0  # wait before each membership step (XCE_FAULT member-pause: tests)
    credential_key: bytes = b""  # of job credentials (job_credential.py), from the cluster's password
    load_commit_s: float = 15.0  # a host's load indices are committed at most this often (0: never)

    def bootstrap_members(self) -> tuple[api.Member, ...]:
        return self.bootstrap or tuple(api.Member(id=m) for m in self.members)


# ---------------------------------------------------------------- effects


@dataclass(frozen=True)
class Propose:
    token: int
    entry: log.Entry


@dataclass(frozen=True)
class Send:
    stream: int
    messages: tuple[api.ControllerMessage, ...]


@dataclass(frozen=True)
class EndStream:
    stream: int
    error: ServiceError | None


@dataclass(frozen=True)
class Reply:
    token: int
    response: Message | ServiceError


@dataclass(frozen=True)
class AskPeers:
    pass


@dataclass(frozen=True)
class ChangeRaft:
    token: int
    add: bool
    address: str


@dataclass(frozen=True)
class TransferLeadership:
    token: int


Effect = Propose | Send | EndStream | Reply | AskPeers | ChangeRaft | TransferLeadership


# ---------------------------------------------------------------- one leadership


@dataclass
class _Stream:
    phase: str = "join"  # join -> joining -> session
    host: str | None = None  # the host its credential proves (None: an in-process caller, tests)
    session: WorkerSession | None = None
    early: list[api.WorkerMessage] = field(default_factory=list)  # arrived while the join commits
    parts: bool = False  # its worker keeps parts of jobs whose first host is another (the join said)
    output: bool = False  # its worker reads job output for the leader (OutputRequest; the join said)


@dataclass
class Term:
    number: int
    raft_term: int
    liveness: Liveness
    watchdog: Watchdog
    submits: GroupCommit[tuple[int, _Submit]]
    reports: GroupCommit[tuple[int, log.HostReport]] = field(
        default_factory=lambda: GroupCommit(MAX_REPORTS_PER_ENTRY))
    joins: GroupCommit[tuple[int, api.HostSpec]] = field(
        default_factory=lambda: GroupCommit(MAX_REPORTS_PER_ENTRY))
    configured: bool = False
    config_in_flight: bool = False
    config_retry_s: float = 0.0
    reconfigure: bool = False  # an announcement committed: settings of a newer format may apply now
    streams: dict[int, _Stream] = field(default_factory=dict)
    sessions: dict[str, int] = field(default_factory=dict)  # host -> its current stream
    to_step: dict[int, None] = field(default_factory=dict)  # streams whose sessions have work, in order
    next_sweep_s: float = 0.0
    next_poll_s: float = 0.0
    announcing: set[int] = field(default_factory=set)
    pending: PendingCounts = field(default_factory=PendingCounts)  # per user, for MAX_PEND_JOBS
    member_step: str = ""  # the membership step in progress (a proposal or Raft change); "": none
    member_retry_s: float = 0.0
    member_next: tuple[object, float] | None = None  # the next step, and when it was first seen
    loads: LoadCommits = field(default_factory=lambda: LoadCommits(0.0))
    outputs: OutputRelay = field(default_factory=OutputRelay)  # output requests in flight (output_relay.py)
    # A scoped key's submits and requeues proposed but not yet applied: (jobs, slots) per user, so that
    # requests checked while a batch commits all count (authz.check_scope_totals); and per call token.
    scoped_in_flight: dict[str, tuple[int, int]] = field(default_factory=dict)
    scoped_tokens: dict[int, tuple[str, int, int]] = field(default_factory=dict)


_Submit = tuple[api.SubmitJobsRequest, log.Principal]  # a submit request and who sent it
Group = GroupCommit[tuple[int, Any]]  # (stream or call token, request)
EntryOf = Callable[[list[Any]], log.Entry]  # the entry a batch of requests goes in
Settle = Callable[[Term, list[tuple[int, Any]], list[log.Result | None]], None]  # results, one each


class LeaderCore:
    def __init__(self, settings: LeaderSettings, state: StateReader, consensus: Consensus, clock: Clock,
                 rng: random.Random) -> None:
        self.settings = settings
        self.state = state
        self.consensus = consensus
        self.clock = clock
        self.rng = rng
        self.term: Term | None = None
        self._terms = 0
        self._effects: list[Effect] = []
        self._proposals = proposals.Proposals(clock)
        policy = settings.policy
        self._submit_rates = SubmitRates(policy.submit_rate_per_user, policy.submit_burst_per_user)
        self._peers: dict[int, tuple[frozenset[str], int]] = {}
        # The entry format to propose; None: read it again. It moves only with an announcement,
        # which only a leader proposes: read at a leadership's start and after each one.
        self._format: int | None = None
        self._seen: dict[int, membership.Seen] = {}  # members' own Status, while a change is in flight
        self._raft_waiters: dict[int, Callable[[bool, str], None]] = {}
        self._raft_tokens = 0

    # ------------------------------------------------------------ effects

    def take(self) -> list[Effect]:
        effects, self._effects = self._effects, []
        return effects

    def next_wakeup_s(self) -> float:
        now = self.clock.monotonic_s()
        times = [now + 1.0]
        if (deadline := self._proposals.next_deadline_s()) is not None:
            times.append(deadline)
        term = self.term
        if term is not None:
            if not term.configured:
                times.append(now + CATCH_UP_POLL_S)
            else:
                times += [term.watchdog.next_s, term.next_poll_s]
                if term.member_retry_s > now:
                    times.append(term.member_retry_s)
                if term.sessions:
                    times.append(term.next_sweep_s)
                if term.to_step:
                    times.append(now)
                if term.sessions and self.settings.load_commit_s > 0:
                    times.append(term.loads.next_s)
                if (output_due := term.outputs.next_deadline_s()) is not None:
                    times.append(output_due)
        return min(times)

    def busy(self) -> bool:
        """Work is waiting for the next turn (the driver should tick again at once)."""
        return self.term is not None and bool(self.term.to_step)

    def serving_term(self) -> int | None:
        """The number of the leadership that serves now, or None: streams served under
        another number must end (the Sync stream checks it)."""
        term = self.term
        return term.number if term is not None and term.configured and self.consensus.caught_up() else None

    def refusal(self) -> ServiceError:
        """Why this replica does not serve writes now (FAILED_PRECONDITION names the leader)."""
        if self.consensus.leader_term() is not None:
            return unavailable("leader is catching up; retry")
        leader = self.consensus.leader_address()
        if leader is None:
            return unavailable("no leader elected; retry")
        return failed_precondition(f"not the leader; the leader is {leader}", leader)

    # ------------------------------------------------------------ inputs: time and role

    def tick(self) -> None:
        self._track_role()
        term = self.term
        if term is None:
            return
        self._proposals.expire()
        now = self.clock.monotonic_s()
        for waiting in term.outputs.expired(now):
            self._reply(waiting.token, failed_precondition(
                f"host {waiting.host} did not answer within {output_relay.TIMEOUT_S:.0f} s"))
        if not term.configured:
            self._configure(term, now)
            return
        if not self.consensus.caught_up():
            return
        if term.watchdog.due(now):
            self._watch(term, now)
        changing = self._change_in_flight()
        if changing:  # members are asked often while a change is in flight: each step waits on one
            term.next_poll_s = min(term.next_poll_s, now + MEMBER_POLL_S)
        if now >= term.next_poll_s:
            term.next_poll_s = now + (MEMBER_POLL_S if changing else self.settings.capability_poll_s)
            self._effects.append(AskPeers())
            self._announce(term, self.settings.replica_id, self.settings.kinds, versions.ENTRY_FORMAT)
        if changing and not term.member_step and now >= term.member_retry_s:
            self._step_membership(term, now)
        if term.reconfigure and self._configure(term, now):  # settings that wait for a newer format
            term.reconfigure = False
        if now >= term.next_sweep_s:
            term.next_sweep_s = now + SESSION_SWEEP_S
            self._step_sessions(term, [s for s, st in term.streams.items()
                                       if st.session is not None and st.session.due(now)])
        else:
            self._step_sessions(term, ())
        if now >= term.loads.next_s:
            self._commit_loads(term, now)

    def role_changed(self) -> None:
        self.tick()

    def _track_role(self) -> None:
        """Start a leadership when the consensus says this replica leads, end it when it
        no longer does or leads in another term (a step down and back up in between)."""
        raft_term = self.consensus.leader_term()
        if self.term is not None and raft_term != self.term.raft_term:
            self._step_down(self.term)
        if raft_term is not None and self.term is None:
            self._terms += 1
            now = self.clock.monotonic_s()
            s = self.settings
            liveness = Liveness(now, s.heartbeat_timeout_s)
            self._format = None
            self._seen = {}
            self.term = Term(self._terms, raft_term, liveness,
                             Watchdog(liveness, s.heartbeat_s / 2, int(s.unknown_timeout_s * 1000)),
                             GroupCommit(s.submit_max_requests, s.submit_max_bytes, s.submit_max_in_flight),
                             loads=LoadCommits(s.load_commit_s),
                             outputs=OutputRelay(self.clock.now_ms() << 16))
            logger.info("leading in term %d (leadership %d); serving once caught up and configured",
                        raft_term, self._terms)

    def _step_down(self, term: Term) -> None:
        self.term = None
        error = self.refusal()
        for stream in list(term.streams):
            self._effects.append(EndStream(stream, error))
        for token, _ in term.submits.drain():
            self._reply(token, unavailable("leadership changed; retry with the same request id"))
        for waiting in term.outputs.drain():
            self._reply(waiting.token, unavailable("leadership changed; retry"))
        term.reports.drain()
        term.joins.drain()
        self._proposals.fail_all()
        logger.info("leadership %d over", term.number)

    # ------------------------------------------------------------ inputs: the log

    def proposal_done(self, token: int, results: list[log.Result] | None) -> None:
        self._proposals.done(token, results)

    def applied(self, indices: Iterable[int]) -> None:
        """Entries applied: each session hears of the jobs they changed on its host."""
        term = self.term
        # (the count follows entries only once a submit held to the limit built it: none of an exempt
        # admin's, so a cluster only they submit to reads no event for it)
        counting = term is not None and self.settings.policy.max_pend_jobs_per_user > 0 \
            and term.pending.following
        if term is None or not (term.sessions or counting):
            return
        with self.state.read() as tables:
            raws = [(index, tables.get("events", fsm.revision_key(index))) for index in indices]
        events = [(index, None if raw is None else log.Event.FromString(raw)) for index, raw in raws]
        if counting:
            term.pending.applied(event for _, event in events)
        if not term.sessions:
            return
        woken: set[int] = set()
        if any(event is None for _, event in events):  # pruned already: everyone derives from the state
            for stream in term.sessions.values():
                self._session(term, stream).changed_unknown()
                woken.add(stream)
        else:
            for index, event in events:
                assert event is not None
                routed = route(event)
                for name in routed.jobs.keys() | routed.hosts:
                    listener = term.sessions.get(name)
                    if listener is not None:
                        self._session(term, listener).changed(index, routed.jobs.get(name, []),
                                                              host_record=name in routed.hosts)
                        woken.add(listener)
        self._step_sessions(term, sorted(woken))

    # ------------------------------------------------------------ inputs: clients

    def call(self, token: int, method: str, request: Any, caller: Principal) -> None:
        """A client's write, from an authenticated `caller` (the gRPC layer checked the method's
        permission; what needs state, ownership and queues, is checked here)."""
        handler = self._CALLS.get(method)
        if handler is None:
            self._reply(token, invalid(f"unknown method {method}"))
            return
        term = self.term
        note: api.AuditRequest | None = None
        try:
            if term is None or not term.configured or not self.consensus.caught_up():
                raise self.refusal()
            note = audit_trail.prepare(method, request, caller)
            if note is not None and not self._audit_ready():
                note = None
                raise failed_precondition("the audit trail (and scoped keys) wait until every replica runs "
                                          f"entry format {fsm.audit.FORMAT} (xce status)")
            if caller.scope is not None and method not in SCOPED_METHODS:
                raise authz.out_of_scope(caller, f"a scoped key only submits and acts on jobs, not {method}")
            # The gRPC layer left these to the leader, so that a denial is recorded (grpc_api._authorized).
            permission = authz.METHOD_PERMISSION.get(method)
            if permission is not None and (permission in authz.LEADER_CHECKED or caller.scope is not None):
                self.settings.policy.require(caller, permission)
            if getattr(request, "request_id", "") and method != "SubmitJobs":  # (a submit: in its own read)
                with self.state.read() as tables:
                    self._own_request_id(tables, request, caller)
            handler(self, term, token, request, caller)
        except ServiceError as exc:
            # A denied action (permission, scope) is recorded before the caller hears of it; bad
            # input changes nothing, the trail included.
            if note is None or exc.code != log.PERMISSION_DENIED:
                self._reply(token, exc)
            else:
                refusal = exc
                words = f"{log.Code.Name(refusal.code)}: {refusal.message}"
                self._propose(audit_trail.entry(note, caller, api.REFUSED, words),
                              lambda _: self._reply(token, refusal))

    @staticmethod
    def _own_request_id(tables: Tables, request: Any, caller: Principal) -> None:
        """The client's request id made the caller's own key (controller/request_ids.py); the same id
        for another request of the same caller is refused. In the caller's read of the state: another
        read waits for the apply in progress (the store's lock prefers its writer)."""
        why = request_ids.problem(request.request_id)
        if why:
            raise invalid(why)
        start = request_ids.prefix(caller.name, request.request_id).encode()
        key = request_ids.owned(caller.name, request.request_id, request)
        found = tables.first("requests", start)
        if found is not None and found[0].startswith(start) and found[0] != key.encode():
            raise ServiceError(log.ALREADY_EXISTS,
                               f"request id {request.request_id!r} was used by {caller.name} for another "
                               "request: a retry sends the same request, a new request takes a new id")
        request.request_id = key

    def _audit_ready(self) -> bool:
        if self._proposal_format() < fsm.audit.FORMAT:
            return False
        with self.state.read() as tables:
            return "audit" in versions.enabled(fsm.read_meta(tables), self._voter_ids(tables))

    def _dry_run(self, token: int, request: Any, caller: Principal, response: Any, words: str) -> None:
        """Answer what would happen, once its audit row is committed; nothing else is proposed."""
        response.dry_run = words

        def done(results: list[log.Result] | None) -> None:
            self._reply(token, response if results else unavailable(
                "the dry run's audit record was not committed (leadership changed); retry"))

        self._propose(audit_trail.entry(request.audit, caller, api.DRY_RUN, words), done)

    def _submit(self, term: Term, token: int, request: api.SubmitJobsRequest, caller: Principal) -> None:
        policy = self.settings.policy
        with self.state.read() as tables:
            if request.request_id:
                self._own_request_id(tables, request, caller)
            self._ensure_request_id(request)
            earlier = fsm.read_result(tables, request.request_id)
            if earlier is not None:
                self._reply(token, self._submitted(tables, request.request_id, earlier))
                return
            if not request.jobs:
                raise invalid("no jobs in the request")
            if len(request.jobs) > policy.max_jobs_per_request:
                raise invalid(f"{len(request.jobs)} jobs in one request; at most "
                              f"{policy.max_jobs_per_request} ([auth] max_jobs_per_request)")
            # An array counts as its elements (LSF counts each element toward MAX_PEND_JOBS).
            wanted = sum(self._array_size(spec) if spec.HasField("array") else 1 for spec in request.jobs)
            limit = 0 if policy.exempt(caller) else policy.max_pend_jobs_per_user
            pending = term.pending.count(tables, caller.name) if limit else 0
            if limit and pending + wanted > limit:
                raise ServiceError(log.RESOURCE_EXHAUSTED,
                                   f"{caller.name} has {pending} pending jobs; {wanted} more "
                                   f"would pass {limit} ([auth] max_pend_jobs_per_user)")
            meta = fsm.read_meta(tables)
            queues: dict[str, api.Queue | None] = {}
            for spec in request.jobs:
                spec.user = caller.name  # the owner is who proved it, never what the request says
                fsm.validation.check_nesting(spec.resource_req, spec.depend)
                fsm.check_spec(tables, meta, spec, self._proposal_format())
                fsm.validation.check_min_slots_known(spec, self._proposal_format())
                if spec.depend and policy.private_jobs:
                    # A job the caller may not see is unknown to it, in -w too: its end would leak.
                    for named in depends.named(tables, spec):
                        if not authz.visible(policy, caller, named):
                            raise invalid(depends.UNKNOWN.format(named.id))
                name = spec.queue or meta.default_queue or fsm.DEFAULT_QUEUE
                if name not in queues:
                    queues[name] = fsm.read_queue(tables, name)
                    authz.check_submit_queue(policy, caller, queues[name])
                authz.check_priority(policy, caller, queues[name], spec.priority)
                authz.check_scope(caller, "submit", [name], caller.name)
            more_slots = sum((self._array_size(s) if s.HasField("array") else 1) * (s.slots or 1)
                             for s in request.jobs)
            self._check_scope_totals(term, tables, caller, wanted, more_slots)
            if request.HasField("audit") and request.audit.dry_run:
                shown = [_with_defaults(spec, meta) for spec in request.jobs]
                self._dry_run(token, request, caller, api.SubmitJobsResponse(
                    jobs=[api.Job(spec=spec, state=api.PEND) for spec in shown], revision=meta.applied_index),
                    audit_trail.would_submit(shown))
                return
        if not policy.exempt(caller):
            wait_s = self._submit_rates.take(caller.name, wanted, self.clock.monotonic_s())
            if wait_s:
                raise ServiceError(log.RESOURCE_EXHAUSTED,
                                   f"{caller.name} submits faster than {policy.submit_rate_per_user:g} jobs "
                                   f"a second (at most {policy.submit_burst_per_user} at once: [auth] "
                                   f"submit_rate_per_user); {wanted} more fit in {wait_s:.1f} s")
        self._hold_scoped(term, token, caller, wanted, more_slots)
        term.submits.add((token, (request, caller.record())), request.ByteSize())
        self._flush(term, term.submits, _submit_entry, self._submits_settled)

    def _check_scope_totals(self, term: Term, tables: Tables, caller: Principal, jobs: int,
                            slots: int) -> None:
        """A scoped key's limits, counting what is committed and what it has in flight."""
        scope = caller.scope
        if scope is None or not (scope.max_jobs or scope.max_slots):
            return
        now_jobs, now_slots = audit_trail.unfinished(tables, caller.name, scope.max_jobs)
        flying_jobs, flying_slots = term.scoped_in_flight.get(caller.name, (0, 0))
        authz.check_scope_totals(caller, now_jobs + flying_jobs, now_slots + flying_slots, jobs, slots)

    def _hold_scoped(self, term: Term, token: int, caller: Principal, jobs: int, slots: int) -> None:
        if caller.scope is None or not (caller.scope.max_jobs or caller.scope.max_slots):
            return
        held_jobs, held_slots = term.scoped_in_flight.get(caller.name, (0, 0))
        term.scoped_in_flight[caller.name] = (held_jobs + jobs, held_slots + slots)
        term.scoped_tokens[token] = (caller.name, jobs, slots)

    def _release_scoped(self, term: Term, token: int) -> None:
        held = term.scoped_tokens.pop(token, None)
        if held is None:
            return
        user, jobs, slots = held
        left = term.scoped_in_flight.get(user, (0, 0))
        remaining = (left[0] - jobs, left[1] - slots)
        if remaining[0] <= 0 and remaining[1] <= 0:
            term.scoped_in_flight.pop(user, None)
        else:
            term.scoped_in_flight[user] = remaining

    def _submits_settled(self, term: Term, batch: list[tuple[int, _Submit]],
                         answers: list[log.Result | None]) -> None:
        # Answered even when the leadership ended meanwhile: the callers are waiting.
        with self.state.read() as tables:
            for (token, (request, _)), result in zip(batch, answers, strict=True):
                self._release_scoped(term, token)  # applied (or not): the committed count says it now
                try:
                    self._reply(token, self._submitted(tables, request.request_id, result))
                except ServiceError as exc:
                    self._reply(token, exc)

    @staticmethod
    def _submitted(tables: Tables, request_id: str, result: log.Result | None) -> api.SubmitJobsResponse:
        settled = proposals.settle(tables, request_id, result)
        jobs = [fsm.read_job(tables, job_id) for job_id in settled.job_ids]
        return api.SubmitJobsResponse(jobs=[j for j in jobs if j is not None], revision=settled.revision)

    def _array_size(self, spec: api.JobSpec) -> int:
        if self._proposal_format() < fsm.arrays.FORMAT:
            raise ServiceError(log.FAILED_PRECONDITION, "job arrays wait until every replica runs code "
                                                        f"that understands them (format {fsm.arrays.FORMAT})")
        return fsm.arrays.check_submit(spec, self.settings.policy.max_array_size)

    def _target_for(self, tables: Tables, job_id: str, caller: Principal) -> tuple[api.Job, bool]:
        """The job or array an action names (`17`, `17[1-100]`), if the caller may see it; and whether
        it is an array (whose elements apply decides on)."""
        job, wanted = fsm.arrays.find_target(tables, job_id)
        if not authz.visible(self.settings.policy, caller, job):
            raise ServiceError(log.NOT_FOUND, f"no job {job_id}")
        if (wanted is not None or fsm.arrays.is_array(job)) and self._proposal_format() < fsm.arrays.FORMAT:
            raise ServiceError(log.FAILED_PRECONDITION, "actions on job arrays wait until every replica "
                                                        f"understands them (format {fsm.arrays.FORMAT})")
        return job, fsm.arrays.is_array(job)

    def _job_for(self, tables: Tables, job_id: str, caller: Principal) -> api.Job:
        """The job, if the caller may see it (with private_jobs, others' jobs are not found)."""
        job = fsm.find_job(tables, job_id)
        if not authz.visible(self.settings.policy, caller, job):
            raise ServiceError(log.NOT_FOUND, f"no job {job_id}")
        return job

    def _control(self, term: Term, token: int, request: api.ControlJobRequest, caller: Principal) -> None:
        self._ensure_request_id(request)
        with self.state.read() as tables:
            job, is_array = self._target_for(tables, request.job_id, caller)
            action = api.ControlAction.Name(request.action).lower() if request.action in \
                api.ControlAction.values() else "control"
            authz.check_job_action(self.settings.policy, caller, job, fsm.read_queue(tables, job.spec.queue),
                                   "jobs.control", action)
            authz.check_scope(caller, action, [job.spec.queue], job.spec.user)
            transition = None
            if fsm.read_result(tables, request.request_id) is None and not is_array:
                transition = fsm.jobs.check_control(job, request.action, self._proposal_format())
            # A requeue makes finished work unfinished again: it counts against the key's limits.
            revived = 0
            if request.action == api.REQUEUE and caller.scope is not None:
                revived = sum(job.array.counts[s] for s in fsm.FINISHED if s < len(job.array.counts)) \
                    if is_array else int(job.state in fsm.FINISHED)
                self._check_scope_totals(term, tables, caller, revived, revived * max(1, job.spec.slots))
            if request.HasField("audit") and request.audit.dry_run:
                words = audit_trail.would_control(job, action, transition.to if transition else None,
                                                  bool(transition and transition.kill_requested))
                self._dry_run(token, request, caller, api.JobResponse(
                    job=job, revision=fsm.read_meta(tables).applied_index), words)
                return
        if revived:
            self._hold_scoped(term, token, caller, revived, revived * max(1, job.spec.slots))
        self._propose_request(token, log.Entry(control=request, by=caller.record()), request.request_id,
                              self._job_response)

    def _modify(self, term: Term, token: int, request: api.ModifyJobRequest, caller: Principal) -> None:
        self._ensure_request_id(request)
        fsm.validation.check_nesting(request.resource_req)
        policy = self.settings.policy
        with self.state.read() as tables:
            job, _ = self._target_for(tables, request.job_id, caller)
            queue = fsm.read_queue(tables, job.spec.queue)
            authz.check_job_action(policy, caller, job, queue, "jobs.modify", "modify")
            moved_to = [request.queue] if request.HasField("queue") else []
            authz.check_scope(caller, "modify", [job.spec.queue, *moved_to], job.spec.user)
            if request.HasField("queue") and request.queue != job.spec.queue:
                queue = fsm.read_queue(tables, request.queue)
                authz.check_submit_queue(policy, caller, queue)
                authz.check_priority(policy, caller, queue, request.priority if request.HasField("priority")
                                     else job.spec.priority)
            if request.HasField("priority"):
                authz.check_priority(policy, caller, queue, request.priority, current=job.spec.priority)
            if fsm.read_result(tables, request.request_id) is None:
                fsm.check_modify(tables, job, request, self._proposal_format())
            if request.HasField("audit") and request.audit.dry_run:
                self._dry_run(token, request, caller, api.JobResponse(
                    job=job, revision=fsm.read_meta(tables).applied_index),
                    audit_trail.would_modify(job, request))
                return
        self._propose_request(token, log.Entry(modify=request, by=caller.record()), request.request_id,
                              self._job_response)

    def _output(self, term: Term, token: int, request: api.JobOutputRequest, caller: Principal) -> None:
        """Ask the worker of the job's host for its output's tail (output_relay.py); the owner's, or
        any with jobs.env.all (what may see a job's environment may see what it printed)."""
        tail = output_relay.tail_of(request)
        with self.state.read() as tables:
            job = self._job_for(tables, request.job_id, caller)
        if not authz.owns(caller, job) and not self.settings.policy.allows(caller, "jobs.env.all"):
            raise authz.denied(caller, "jobs.env.all", f"read the output of job {job.id} of {job.spec.user}")
        authz.check_scope(caller, "", [job.spec.queue], job.spec.user)  # a scoped key: its queues and users
        if not job.host:
            raise failed_precondition(f"job {job.id} has not run: it has no output yet")
        stream = term.sessions.get(job.host)
        state = term.streams.get(stream) if stream is not None else None
        if stream is None or state is None or state.session is None:
            raise failed_precondition(f"host {job.host} is not connected: its output cannot be read now")
        if not state.output:
            raise failed_precondition(f"the worker of host {job.host} does not relay output (older code)")
        number = term.outputs.ask(token, stream, job.host, self.clock.monotonic_s())
        state.session.outbox.append(output_relay.asked(number, job, request, tail))
        self._send(term, stream)

    def _run(self, term: Term, token: int, request: api.RunJobRequest, caller: Principal) -> None:
        """Like LSF brun: a DISPATCH through the committed path, with the same host checks."""
        self._ensure_request_id(request)
        with self.state.read() as tables:
            job = self._job_for(tables, request.job_id, caller)
            fsm.decisions.check_dispatch(fsm.CommittedUsage(tables), job, request.host, job.attempt,
                                         self._proposal_format())
        dispatch = log.Dispatch(job_id=job.id, host=request.host, attempt=job.attempt,
                                request_id=request.request_id)
        self._propose_request(token, log.Entry(dispatch=dispatch, by=caller.record()), request.request_id,
                              self._job_response)

    def _put_queue(self, term: Term, token: int, request: api.PutQueueRequest, create: bool,
                   caller: Principal) -> None:
        self._ensure_request_id(request)
        fsm.validation.check_nesting(request.queue.res_req)
        fsm.check_queue(request.queue)
        with self.state.read() as tables:
            current = fsm.read_queue(tables, request.queue.name)
        if create and current is not None:
            raise ServiceError(log.ALREADY_EXISTS, f"queue {request.queue.name!r} exists")
        if not create and current is None:
            raise ServiceError(log.NOT_FOUND, f"no queue {request.queue.name!r}")
        if current is not None:
            authz.check_queue_update(self.settings.policy, caller, current, request.queue)
        entry = log.Entry(put_queue=log.PutQueueEntry(queue=request.queue, request_id=request.request_id,
                                                      create=create), by=caller.record())
        self._propose_request(token, entry, request.request_id,
                              lambda _, settled: api.QueueResponse(queue=request.queue,
                                                                   revision=settled.revision))

    def _control_host(self, term: Term, token: int, request: api.ControlHostRequest,
                      caller: Principal) -> None:
        """`xce host close|open` (LSF badmin hclose/hopen): committed, kept across re-joins."""
        self._ensure_request_id(request)
        fsm.validation.check_text("reason", request.reason)
        with self.state.read() as tables:
            if "host_control" not in versions.enabled(fsm.read_meta(tables), self._voter_ids(tables)):
                raise failed_precondition("not every replica has announced code that closes hosts yet "
                                          "(xce status: entry kinds in use); retry once they have")
            known = fsm.read_host(tables, request.name) is not None
            if not known and fsm.read_result(tables, request.request_id) is None:
                raise ServiceError(log.NOT_FOUND, f"no host {request.name[:80]!r}")
        entry = log.Entry(host_control=request, by=caller.record())
        self._propose_request(token, entry, request.request_id, lambda tables, settled: api.HostResponse(
            host=fsm.read_host(tables, request.name), revision=settled.revision))

    def _lease(self, term: Term, token: int, request: api.LeaseRequest, caller: Principal) -> None:
        if not request.scheduler_id or not 0 < request.duration_s <= 3600:
            raise invalid("a scheduler id and 0 < duration_s <= 3600")
        _same_scheduler(caller, request.scheduler_id)
        entry = log.Entry(lease=log.LeaseEntry(scheduler_id=request.scheduler_id[:128],
                                               duration_ms=int(request.duration_s * 1000)),
                          by=caller.record())

        def done(results: list[log.Result] | None) -> None:
            if not results:
                self._reply(token, unavailable("the lease request's outcome is unknown; retry"))
                return
            result = results[0]
            if result.code not in (log.OK, log.FAILED_PRECONDITION):
                self._reply(token, ServiceError(result.code, result.message))
                return
            self._reply(token, api.LeaseResponse(
                granted=result.code == log.OK, epoch=result.lease_epoch, holder=result.lease_holder,
                expires_ms=result.lease_expires_ms, revision=result.revision))

        self._propose(entry, done)

    def _decisions(self, term: Term, token: int, batch: api.DecisionBatch, caller: Principal) -> None:
        """One pass's decisions as one entry; outcomes are hints, the view is the truth."""
        if len(batch.decisions) > MAX_DECISIONS:
            raise invalid(f"at most {MAX_DECISIONS} decisions per batch")
        _same_scheduler(caller, batch.scheduler_id)
        with self.state.read() as tables:
            meta = fsm.read_meta(tables)
        if (batch.lease_epoch, batch.scheduler_id) != (meta.lease_epoch, meta.lease_holder):
            # Refused before the log (apply would refuse it too, after it took space there).
            why = f"stale lease: epoch {batch.lease_epoch} of {batch.scheduler_id!r}; current " \
                  f"{meta.lease_epoch} of {meta.lease_holder!r}"
            outcome = api.DecisionOutcome(code=api.REJECT_STALE_LEASE, message=why)
            self._reply(token, api.DecisionBatchResponse(
                rejections=[why] * len(batch.decisions), revision=meta.applied_index,
                outcomes=[outcome] * len(batch.decisions)))
            return

        def done(results: list[log.Result] | None) -> None:
            if not results:
                self._reply(token, unavailable("the batch's outcome is unknown; the view will tell"))
                return
            result = results[0]
            self._reply(token, api.DecisionBatchResponse(
                rejections=result.rejections, revision=result.revision, outcomes=result.outcomes))

        self._propose(log.Entry(decisions=batch, by=caller.record()), done)

    def _create_token(self, term: Term, token: int, request: api.CreateTokenRequest,
                      caller: Principal) -> None:
        self._ensure_request_id(request)
        fsm.tokens.check_create(request)
        if request.role not in self.settings.policy.roles:
            raise invalid(f"unknown role {request.role!r} "
                          f"(roles: {', '.join(sorted(self.settings.policy.roles))})")
        info = api.TokenInfo(user=request.user, role=request.role, expires_ms=request.expires_ms,
                             created_by=caller.name, description=request.description)
        if request.HasField("scope"):
            authz.check_scope_spec(request.scope)
            if not self._audit_ready():
                raise failed_precondition("scoped keys wait until every replica runs entry format "
                                          f"{fsm.audit.FORMAT} (xce status)")
            info.scope.CopyFrom(request.scope)
        entry = log.Entry(token=log.TokenEntry(sha256=request.sha256, info=info,
                                               request_id=request.request_id), by=caller.record())
        self._propose_request(token, entry, request.request_id, self._token_response)

    def _revoke_token(self, term: Term, token: int, request: api.RevokeTokenRequest,
                      caller: Principal) -> None:
        self._ensure_request_id(request)
        with self.state.read() as tables:
            if fsm.read_result(tables, request.request_id) is None and \
                    fsm.tokens.find_by_id(tables, request.id) is None:
                raise ServiceError(log.NOT_FOUND, f"no token {request.id!r}")
        entry = log.Entry(token=log.TokenEntry(revoke=True, revoke_id=request.id,
                                               request_id=request.request_id), by=caller.record())
        self._propose_request(token, entry, request.request_id,
                              lambda _, settled: api.TokenResponse(token=api.TokenInfo(id=request.id),
                                                                   revision=settled.revision))

    # ------------------------------------------------------------ membership

    def _members(self, tables: Tables) -> tuple[log.Meta, list[api.Member]]:
        meta = fsm.read_meta(tables)
        return meta, fsm_membership.members(meta, self.settings.bootstrap_members())

    def _voter_ids(self, tables: Tables) -> tuple[int, ...]:
        return fsm_membership.voter_ids(fsm.read_meta(tables), self.settings.bootstrap_members())

    def _member_change(self, meta: log.Meta, op: log.MemberOp, member: api.Member,
                       request_id: str = "") -> log.Entry:
        if "member_change" not in versions.enabled(meta, fsm_membership.voter_ids(
                meta, self.settings.bootstrap_members())):
            raise failed_precondition("not every replica has announced code that applies membership "
                                      "changes yet (xce status: enabled entry kinds); retry once they have")
        # The first change records the file's replicas, those the Raft configuration has: a file that
        # lists one more than there are would make it a member.
        voters = self.consensus.voters()
        bootstrap = () if meta.membership else tuple(m for m in self.settings.bootstrap_members()
                                                      if m.raft_address in voters)
        return log.Entry(member_change=log.MemberChange(op=op, member=member, bootstrap=bootstrap,
                                                        request_id=request_id))

    def _add_member(self, term: Term, token: int, request: api.AddMemberRequest, caller: Principal) -> None:
        """`xce member add`: the new replica, already running as a learner (the gRPC layer asked it),
        joins the membership as a LEARNER; the rest of the change is the leader's (membership.py)."""
        self._ensure_request_id(request)
        with self.state.read() as tables:
            meta, current = self._members(tables)
            earlier = fsm.read_result(tables, request.request_id)
        member = api.Member(id=request.id or max((m.id for m in current), default=0) + 1,
                            grpc_address=request.grpc_address, raft_address=request.raft_address,
                            role=api.MEMBER_LEARNER)
        if earlier is None:
            fsm_membership.check_add(current, member)
        entry = self._member_change(meta, log.ADD_LEARNER, member, request.request_id)
        entry.by.CopyFrom(caller.record())
        self._propose_request(token, entry, request.request_id, self._members_response)

    def _remove_member(self, term: Term, token: int, request: api.RemoveMemberRequest,
                       caller: Principal) -> None:
        """`xce member remove`: REMOVING (a learner leaves at once); the Raft configuration lets the
        member go after, the leader handing its leadership over first if it is the one."""
        self._ensure_request_id(request)
        with self.state.read() as tables:
            meta, current = self._members(tables)
            earlier = fsm.read_result(tables, request.request_id)
        if earlier is None:
            target = fsm_membership.check_remove(current, request.id)
            if target.role != api.MEMBER_LEARNER:
                remaining = [m.raft_address for m in current
                             if m.role in fsm_membership.VOTING and m.id != target.id]
                have, need = membership.quorum_after(remaining, self.consensus.reachable())
                if have < need:
                    raise failed_precondition(
                        f"removing replica {target.id} would leave {have} of the other {len(remaining)} "
                        f"members reachable, fewer than the {need} every write needs; bring them back "
                        "first")
        entry = self._member_change(meta, log.REMOVE, api.Member(id=request.id), request.request_id)
        entry.by.CopyFrom(caller.record())
        self._propose_request(token, entry, request.request_id, self._members_response)

    def _members_response(self, tables: Tables, result: log.Result) -> api.MembersResponse:
        _, current = self._members(tables)
        return api.MembersResponse(members=current, revision=result.revision)

    def _change_in_flight(self) -> bool:
        with self.state.read() as tables:
            return fsm_membership.in_flight(fsm.read_meta(tables).membership) is not None

    def _step_membership(self, term: Term, now: float) -> None:
        """Take the next step of the membership change in flight, if one can be taken now."""
        with self.state.read() as tables:
            meta, current = self._members(tables)
        voters = fsm_membership.voter_ids(meta, self.settings.bootstrap_members())
        step = membership.next_step(current, self.consensus.voters(), self.consensus.raft_busy(), self._seen,
                                    meta.applied_index, self.settings.replica_id,
                                    versions.proposal_format(meta, voters), versions.enabled(meta, voters))
        if step is None:
            return
        pause = self.settings.member_pause_s
        if pause:
            key = (type(step).__name__, getattr(step, "op", None), getattr(step, "add", None))
            if term.member_next is None or term.member_next[0] != key:
                term.member_next = (key, now)
            if now < term.member_next[1] + pause:
                term.member_retry_s = term.member_next[1] + pause
                return
        if isinstance(step, membership.ProposeStep):
            op, member = log.MemberOp.Name(step.op), step.member
            try:
                entry = self._member_change(meta, step.op, api.Member(id=member.id))
            except ServiceError as exc:
                logger.warning("membership: %s of replica %d waits: %s", op, member.id, exc.message)
                term.member_retry_s = now + MEMBER_RETRY_S
                return
            term.member_step = op

            def proposed(results: list[log.Result] | None) -> None:
                term.member_step = ""
                if results and results[0].code == log.OK:
                    logger.info("membership: %s of replica %d committed", op, member.id)
                    if step.op == log.REMOVED:
                        self._seen.pop(member.id, None)
                else:
                    logger.warning("membership: %s of replica %d not applied: %s", op, member.id,
                                   results[0].message if results else "outcome unknown")
                    term.member_retry_s = self.clock.monotonic_s() + MEMBER_RETRY_S

            self._propose(entry, proposed)
            return
        self._raft_tokens += 1
        token = self._raft_tokens
        what = "hand leadership over" if isinstance(step, membership.Transfer) else \
            f"{'add' if step.add else 'remove'} {step.address} in the Raft configuration"
        term.member_step = what

        def changed(ok: bool, why: str) -> None:
            term.member_step = ""
            if ok:
                logger.info("membership: %s: done", what)
            else:
                logger.warning("membership: %s refused (%s); retrying", what, why)
                term.member_retry_s = self.clock.monotonic_s() + MEMBER_RETRY_S

        self._raft_waiters[token] = changed
        self._effects.append(TransferLeadership(token) if isinstance(step, membership.Transfer)
                             else ChangeRaft(token, step.add, step.address))
        logger.info("membership: %s", what)

    def raft_changed(self, token: int, ok: bool, why: str) -> None:
        """The outcome of a ChangeRaft or TransferLeadership effect."""
        waiter = self._raft_waiters.pop(token, None)
        if waiter is not None:
            waiter(ok, why)

    @staticmethod
    def _token_response(tables: Tables, result: log.Result) -> api.TokenResponse:
        info = fsm.tokens.read_token(tables, result.message)
        if info is None:
            raise invalid("request id already used by another request")
        return api.TokenResponse(token=info, revision=result.revision)

    _CALLS: dict[str, Callable[[LeaderCore, Term, int, Any, Principal], None]] = {
        "SubmitJobs": _submit,
        "ControlJob": _control,
        "ModifyJob": _modify,
        "RunJob": _run,
        "GetJobOutput": _output,
        "CreateQueue": lambda self, term, token, request, caller: self._put_queue(term, token, request, True,
                                                                                   caller),
        "UpdateQueue": lambda self, term, token, request, caller: self._put_queue(term, token, request, False,
                                                                                   caller),
        "AcquireLease": _lease,
        "SubmitDecisions": _decisions,
        "CreateToken": _create_token,
        "RevokeToken": _revoke_token,
        "AddMember": _add_member,
        "RemoveMember": _remove_member,
        "ControlHost": _control_host,
    }

    def _propose_request(self, token: int, entry: log.Entry, request_id: str,
                         respond: Callable[[Tables, log.Result], Message]) -> None:
        term = self.term

        def done(results: list[log.Result] | None) -> None:
            if term is not None:
                self._release_scoped(term, token)
            with self.state.read() as tables:
                try:
                    settled = proposals.settle(tables, request_id, results[0] if results else None)
                    self._reply(token, respond(tables, settled))
                except ServiceError as exc:
                    self._reply(token, exc)

        self._propose(entry, done)

    @staticmethod
    def _job_response(tables: Tables, result: log.Result) -> api.JobResponse:
        job = fsm.read_job(tables, result.job_ids[0]) if result.job_ids else None
        # One job, or an array's record first and the elements the action reached after it; else the
        # id was first used by another kind of request.
        if not result.job_ids or (len(result.job_ids) > 1 and not (job and fsm.arrays.is_array(job))):
            raise invalid("request id already used by another request")
        return api.JobResponse(job=job, revision=result.revision)

    def _ensure_request_id(self, request: Any) -> None:
        """Give a request without an id a fresh one; refuse one too long to store."""
        if not request.request_id:
            request.request_id = f"{self.rng.getrandbits(128):032x}"
        fsm.check_request_id(request.request_id)

    def _reply(self, token: int, response: Message | ServiceError) -> None:
        self._effects.append(Reply(token, response))

    # ------------------------------------------------------------ inputs: workers

    def worker_opened(self, stream: int, host: str | None) -> None:
        """A worker's stream opened; `host` is the host its credential proves (it may join only as that)."""
        term = self.term
        if term is None or not term.configured or not self.consensus.caught_up():
            self._effects.append(EndStream(stream, self.refusal()))
            return
        term.streams[stream] = _Stream(host=host)

    def worker_message(self, stream: int, message: api.WorkerMessage) -> None:
        term = self.term
        state = term.streams.get(stream) if term is not None else None
        if term is None or state is None:
            return
        if state.phase == "join":
            self._join(term, stream, state, message)
        elif state.phase == "joining":
            state.early.append(message)
        else:
            assert state.session is not None
            self._session_message(term, stream, state.session, message)
            self._send(term, stream)

    def worker_closed(self, stream: int) -> None:
        term = self.term
        if term is None:
            return
        state = term.streams.pop(stream, None)
        for waiting in term.outputs.closed(stream):
            self._reply(waiting.token, failed_precondition(
                f"host {waiting.host}'s worker disconnected before it answered; retry"))
        session = state.session if state is not None else None
        if session is not None and term.sessions.get(session.name) == stream:
            del term.sessions[session.name]
            term.loads.forget(session.name)

    def _join(self, term: Term, stream: int, state: _Stream, message: api.WorkerMessage) -> None:
        if message.WhichOneof("body") != "join":
            self._end(term, stream, invalid("the first message must be a join"))
            return
        try:
            fsm.check_host_spec(message.join)
            if state.host is not None and message.join.name != state.host:
                raise ServiceError(log.PERMISSION_DENIED, f"the credential is host {state.host!r}'s; "
                                                          f"it cannot join as {message.join.name!r}")
        except ServiceError as exc:
            self._end(term, stream, exc)
            return
        state.phase = "joining"
        state.parts = "parts" in message.join.capabilities
        state.output = "output" in message.join.capabilities
        message.join.ClearField("capabilities")  # the stream's, not the host record's
        if self._proposal_format() < fsm.recovery.FORMAT:
            message.join.ClearField("running")  # older replicas would store it in the host record
        term.joins.add((stream, message.join), message.join.ByteSize())
        self._flush(term, term.joins, _joins_entry, self._joins_settled)

    def _joins_settled(self, term: Term, batch: list[tuple[int, api.HostSpec]],
                       answers: list[log.Result | None]) -> None:
        if self.term is not term:
            return
        for (stream, spec), result in zip(batch, answers, strict=True):
            if stream not in term.streams:
                continue  # the worker hung up meanwhile
            if result is None or result.code != log.OK:
                error = unavailable("the join's outcome is not known; join again") if result is None \
                    else ServiceError(result.code, result.message)
                self._end(term, stream, error)
                continue
            self._joined(term, stream, spec, result.generation)
        self._step_sessions(term, ())

    def _joined(self, term: Term, stream: int, spec: api.HostSpec, generation: int) -> None:
        now = self.clock.monotonic_s()
        term.liveness.seen(spec.name, generation, now)
        logger.info("host %s joined, generation %d", spec.name, generation)
        state = term.streams[stream]
        session = WorkerSession(self.state, spec.name, generation, self.settings.session_full_look_s,
                                functools.partial(job_credential.credential, self.settings.credential_key),
                                parts=state.parts and self._proposal_format() >= fsm.reports.PART_FORMAT)
        state.phase, state.session = "session", session
        term.sessions[spec.name] = stream
        session.outbox.append(api.ControllerMessage(joined=api.Joined(
            generation=generation, heartbeat_s=self.settings.heartbeat_s, fence_s=self._fence_s(),
            unknown_timeout_s=self.settings.unknown_timeout_s)))
        early, state.early = state.early, []
        for message in early:
            self._session_message(term, stream, session, message)
        self._send(term, stream)  # joined at once; the derivation may wait for its turn
        term.to_step[stream] = None

    def _session_message(self, term: Term, stream: int, session: WorkerSession,
                         message: api.WorkerMessage) -> None:
        kind = message.WhichOneof("body")
        if kind == "heartbeat" and message.heartbeat.generation == session.generation:
            if term.sessions.get(session.name) == stream:  # a superseded stream's do not count
                term.liveness.seen(session.name, session.generation, self.clock.monotonic_s())
                if message.heartbeat.load:
                    term.loads.heard(session.name, session.generation, message.heartbeat.load)
            # Answered, so a worker cut off from a leader that cannot tell it
            # so (a partition) notices the silence and looks for the new one.
            session.outbox.append(api.ControllerMessage(heartbeat=api.Heartbeat(
                generation=session.generation, fence_s=self._fence_s(),
                unknown_timeout_s=self.settings.unknown_timeout_s)))
        reports = list(message.reports.reports) if kind == "reports" else [message.report] \
            if kind == "report" else []
        for report in reports:
            relayed = log.HostReport(host=session.name, generation=session.generation, report=report)
            term.reports.add((stream, relayed), relayed.ByteSize())
        if reports:
            self._flush(term, term.reports, _reports_entry, self._reports_settled)
        if kind == "output":
            answered = term.outputs.answered(stream, message.output)
            if answered is not None:
                self._reply(answered[0].token, answered[1])
        if kind == "launch":
            self._launch(term, session, message.launch)
        elif kind == "task" and message.task.host == session.name:  # a worker speaks for its own host
            self._task_state(term, message.task)

    # ------------------------------------------------------------ tasks (xce launch): relayed, not committed

    def _launch(self, term: Term, origin: WorkerSession, launch: api.LaunchTask) -> None:
        """A task `xce launch` asked for on the origin's host: checked against committed state and
        the credential, then passed to the target host's worker; a refusal goes back at once."""
        launch.origin = origin.name
        refusal, retry = self._launch_refusal(term, origin, launch)
        if refusal is None:
            stream = term.sessions.get(launch.host)
            if stream is None:
                refusal, retry = f"host {launch.host} is not connected", True
            else:
                self._session(term, stream).outbox.append(api.ControllerMessage(launch=launch))
                self._send(term, stream)
                return
        self._task_state(term, api.TaskState(job_id=launch.job_id, attempt=launch.attempt,
                                             task_id=launch.task_id, host=launch.host, phase=api.TASK_REFUSED,
                                             reason=refusal, retry=retry, origin=origin.name))

    def _launch_refusal(self, term: Term, origin: WorkerSession,
                        launch: api.LaunchTask) -> tuple[str | None, bool]:
        """Why the task may not start (None: it may), and whether to ask again later."""
        if not launch.command or not 0 < len(launch.task_id) <= 64 or launch.ByteSize() > 1 << 20:
            return "a task needs a command and a task id, and at most 1 MiB", False
        with self.state.read() as tables:
            job = fsm.read_job(tables, launch.job_id)
        if job is not None and job.attempt == launch.attempt and job.state == api.UNKWN:
            return f"job {job.id}'s host {job.host} is not answering", True  # it may come back
        if job is None or job.attempt != launch.attempt or job.state != api.RUN:
            return f"job {launch.job_id} is not running at attempt {launch.attempt}", False
        hosts = worker_hosts_of(job)
        if origin.name not in hosts or launch.host not in hosts:
            return f"{launch.host} and {origin.name} must both be hosts of job {job.id}'s allocation " \
                   f"({' '.join(hosts)})", False
        if not job_credential.matches(self.settings.credential_key, job, launch.credential):
            return "the job credential does not match", False
        return None, False

    def _task_state(self, term: Term, state: api.TaskState) -> None:
        """What became of a task, to the worker whose `xce launch` waits for it."""
        stream = term.sessions.get(state.origin)
        if stream is not None:
            self._session(term, stream).outbox.append(api.ControllerMessage(task=state))
            self._send(term, stream)

    def _reports_settled(self, term: Term, batch: list[tuple[int, log.HostReport]],
                         answers: list[log.Result | None]) -> None:
        if self.term is not term:
            return
        by_stream: dict[int, tuple[list[api.JobReport], list[log.Result | None]]] = {}
        for (stream, relayed), result in zip(batch, answers, strict=True):
            reports, outcomes = by_stream.setdefault(stream, ([], []))
            reports.append(relayed.report)
            outcomes.append(result)
        for stream, (reports, outcomes) in by_stream.items():
            state = term.streams.get(stream)
            if state is None or state.session is None:
                continue
            if state.session.relayed(reports, outcomes):
                self._send(term, stream)
            else:
                self._send(term, stream)
                self._end(term, stream, None)

    def _flush(self, term: Term, group: Group, entry_of: EntryOf, settle: Settle) -> None:
        """Propose what a group commit holds, one entry a batch, while it lets more go; when a
        batch settles, each of its items gets its own result (None: outcome unknown)."""
        while (batch := group.take()) is not None:
            entry = entry_of([item for _, item in batch])
            self._propose(entry, functools.partial(self._batch_done, term, group, entry_of, settle, batch))

    def _batch_done(self, term: Term, group: Group, entry_of: EntryOf, settle: Settle,
                    batch: list[tuple[int, Any]], results: list[log.Result] | None) -> None:
        group.done()
        settle(term, batch, _per_request(results, len(batch)))
        if self.term is term:
            self._flush(term, group, entry_of, settle)

    def _step_sessions(self, term: Term, streams: Iterable[int]) -> None:
        """Queue these sessions for a step, then step up to SESSION_STEPS_PER_TURN of the queue."""
        for stream in streams:
            term.to_step[stream] = None
        now = self.clock.monotonic_s()
        for _ in range(min(SESSION_STEPS_PER_TURN, len(term.to_step))):
            stream = next(iter(term.to_step))
            del term.to_step[stream]
            state = term.streams.get(stream)
            if state is None or state.session is None:
                continue
            try:
                state.session.step(now)
            except SessionOver as exc:
                logger.info("worker stream of %s ends: %s", state.session.name, exc)
                self._send(term, stream)
                self._end(term, stream, None)
                continue
            except Exception:  # a bug: end the stream, so the worker re-joins and all is derived anew
                logger.exception("the session of %s failed; ending its stream", state.session.name)
                self._end(term, stream, None)
                continue
            self._send(term, stream)

    def _session(self, term: Term, stream: int) -> WorkerSession:
        session = term.streams[stream].session
        assert session is not None
        return session

    def _send(self, term: Term, stream: int) -> None:
        state = term.streams.get(stream)
        if state is not None and state.session is not None and state.session.outbox:
            self._effects.append(Send(stream, tuple(state.session.take())))

    def _end(self, term: Term, stream: int, error: ServiceError | None) -> None:
        self.worker_closed(stream)
        self._effects.append(EndStream(stream, error))

    # ------------------------------------------------------------ timers: configuration, watchdog, peers

    def _configure(self, term: Term, now: float) -> bool:
        """Propose the configuration once this leader is caught up, if it changed; False: not
        looked at yet (not caught up, a push in flight or to be retried later).

        Nothing is proposed when the committed state already matches, so a
        restart of the whole cluster leaves the revision where it was.
        """
        if not self.consensus.caught_up() or term.config_in_flight or now < term.config_retry_s:
            return False
        init = self.settings.init
        with self.state.read() as tables:
            meta = fsm.read_meta(tables)
            voters = self._voter_ids(tables)
        if config_current(meta, init, voters):
            self._configured(term)
            return True
        term.config_in_flight = True

        def done(results: list[log.Result] | None) -> None:
            term.config_in_flight = False
            if results is None:
                term.config_retry_s = self.clock.monotonic_s() + CONFIG_RETRY_S
                return
            if results[0].code != log.OK:
                logger.error("configuration push rejected: %s", results[0].message)
            self._configured(term)

        self._propose(log.Entry(init=init), done)
        return True

    def _fence_s(self) -> float:
        """The worker-side fence, once every member applies a fenced end as a requeue (entry
        format 2); before that a fenced job would end EXIT, so workers are told none."""
        return self.settings.fence_s if self._proposal_format() >= reports.FENCE_FORMAT else 0.0

    def _configured(self, term: Term) -> None:
        if not term.configured:
            term.configured = True
            logger.info("serving (leadership %d)", term.number)

    def _commit_loads(self, term: Term, now: float) -> None:
        """The load indices due (load_commits.py), once every replica applies `host_loads`."""
        if self.settings.load_commit_s > 0:
            with self.state.read() as tables:
                if "host_loads" not in versions.enabled(fsm.read_meta(tables), self._voter_ids(tables)):
                    term.loads.next_s = now + self.settings.capability_poll_s
                    return
        sent = term.loads.due(now)
        if not sent:
            return

        def done(results: list[log.Result] | None) -> None:
            codes = [r.code if r is not None else None for r in _per_request(results, len(sent))]
            term.loads.settled(sent, codes, self.clock.monotonic_s())

        self._propose(log.Entry(host_loads=log.HostLoads(loads=sent)), done)

    def _watch(self, term: Term, now: float) -> None:
        with self.state.read() as tables:
            batched = "host_statuses" in versions.enabled(fsm.read_meta(tables), self._voter_ids(tables))
            changes = term.watchdog.proposals(tables, now, self.clock.now_ms(), batched)
        for change in changes:
            self._propose(change.entry, functools.partial(self._watched, term, change))

    def _watched(self, term: Term, change: Change, results: list[log.Result] | None) -> None:
        term.watchdog.settled(change)
        for (name, generation), result in zip(change.hosts, results or [], strict=False):
            if result.code != log.OK:
                continue
            if change.what == "unavailable":
                logger.warning("host %s (generation %d) missed its heartbeats: UNAVAIL", name, generation)
            else:
                logger.warning("host %s lost: jobs %s requeued or ended", name, list(result.job_ids))

    def peer_answered(self, replica_id: int, kinds: Iterable[str], format_: int, role: str = "",
                      applied_index: int = 0) -> None:
        """A member's Status: what its code understands (committed as an announcement, learners'
        too, so that a promoted learner is counted at once), and its role and progress."""
        term = self.term
        if term is None:
            return
        with self.state.read() as tables:
            _, current = self._members(tables)
        if replica_id not in {m.id for m in current}:
            return
        kinds = frozenset(kinds)
        if role:
            self._seen[replica_id] = membership.Seen(role, applied_index, format_, kinds)
        if role != "unreachable":  # one that did not answer said nothing of its code
            self._announce(term, replica_id, kinds, format_)

    def _announce(self, term: Term, replica_id: int, kinds: frozenset[str], format_: int) -> None:
        """Commit what a replica's code understands, if the committed record differs."""
        if replica_id in term.announcing or not term.configured:
            return
        with self.state.read() as tables:
            committed = fsm.read_meta(tables).members.get(replica_id)
        if committed is not None and (frozenset(committed.kinds), committed.format) == (kinds, format_):
            return
        term.announcing.add(replica_id)
        entry = log.Entry(announce=log.Announce(replica_id=replica_id, kinds=sorted(kinds), format=format_))

        def done(results: list[log.Result] | None) -> None:
            term.announcing.discard(replica_id)
            self._format = None
            term.reconfigure = True
            if results and results[0].code == log.OK:
                logger.info("replica %d announced entry format %d and kinds %s", replica_id, format_,
                            ", ".join(sorted(kinds - versions.BASELINE_KINDS)) or "(baseline)")

        self._propose(entry, done)

    # ------------------------------------------------------------ proposing

    def _proposal_format(self) -> int:
        if self._format is None:
            with self.state.read() as tables:
                self._format = versions.proposal_format(fsm.read_meta(tables), self._voter_ids(tables))
        return self._format

    def _propose(self, entry: log.Entry, on_done: Callable[[list[log.Result] | None], None]) -> None:
        entry.stamp_ms = self.clock.now_ms()
        entry.proposer = self.settings.replica_id
        entry.format = self._proposal_format()
        token = self._proposals.new(entry.WhichOneof("body") or "?", on_done)
        self._effects.append(Propose(token, entry))


def config_current(meta: log.Meta, init: log.InitCluster, members: Iterable[int]) -> bool:
    """The committed configuration is the file's, as far as the entry format in use carries it."""
    format_ = versions.proposal_format(meta, members)
    return (meta.cluster_id, meta.default_queue, meta.max_slots_per_job, meta.config_digest) == (
        init.cluster_id, init.default_queue, init.max_slots_per_job, init.config_digest) \
        and (format_ < history.FORMAT
             or (meta.clean_period_ms, meta.history_retention_ms)
             == (init.clean_period_ms, init.history_retention_ms)) \
        and (format_ < fsm.resources.FORMAT or meta.resources_digest == init.resources_digest) \
        and (format_ < limit_config.FORMAT or meta.limits_digest == init.limits_digest)



# What a scoped key may call at all (its scope then decides on each job).
SCOPED_METHODS = frozenset({"SubmitJobs", "ControlJob", "ModifyJob", "GetJobOutput"})


def _with_defaults(spec: api.JobSpec, meta: log.Meta) -> api.JobSpec:
    """The spec as apply would store it: its queue and slot count filled in."""
    shown = api.JobSpec()
    shown.CopyFrom(spec)
    if not shown.queue:
        shown.queue = meta.default_queue or fsm.DEFAULT_QUEUE
    if not shown.HasField("slots"):
        shown.slots = 1
    return shown


def _submit_entry(requests: list[tuple[api.SubmitJobsRequest, log.Principal]]) -> log.Entry:
    return log.Entry(submit=log.SubmitBatch(requests=[r for r, _ in requests], by=[by for _, by in requests]))


def _same_scheduler(caller: Principal, scheduler_id: str) -> None:
    """The lease and decisions are bound to the authenticated scheduler: it acts only under its own name."""
    if scheduler_id != caller.name:
        raise ServiceError(log.PERMISSION_DENIED, f"{caller.name} may not act as scheduler {scheduler_id!r}")


def _joins_entry(joins: list[api.HostSpec]) -> log.Entry:
    return log.Entry(joins=log.HostJoins(joins=joins))


def _reports_entry(reports: list[log.HostReport]) -> log.Entry:
    return log.Entry(reports=log.HostReports(reports=reports))


def _per_request(results: list[log.Result] | None, count: int) -> list[log.Result | None]:
    """One result per request of a group-committed entry; all unknown unless each has one."""
    if results is not None and len(results) == count:
        return list(results)
    return [None] * count
