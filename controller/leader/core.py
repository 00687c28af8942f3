"""The leader's logic without I/O: inputs in, effects out (etcd-raft's Ready, h11).

Theory of operation. One `LeaderCore` per replica. Its driver (replica.py
on the gRPC event loop; tests/protocol_sim on a simulated network) feeds it
inputs, each a method call:
- `tick()`: time passed (the core reads its injected clock); also notices a
  change of role (the consensus is asked);
- `applied(indices)`: entries were applied to the state;
- `proposal_done(token, results)`: the outcome of a Propose (None: unknown);
- `call(token, method, request, caller)`: a client's write (writes.py);
- `worker_opened / worker_message / worker_closed`: a worker's stream (workers.py);
- `peer_answered(replica, kinds, format, ...)`: what a peer's code understands
  (and, for a membership change, its role and applied index: membership.py);
- `raft_changed(token, ok, why)`: the outcome of a ChangeRaft or TransferLeadership;
and takes the effects (effects.py) with `take()`, to be performed in order.
`next_wakeup_s()` says when to tick next if nothing else happens.

Commit before send: nothing reaches a worker before the entry that decided
it applied (worker_session.py derives everything from committed state).
Serving: a leader answers writes only once the first entry of its term
applied (the consensus says `caught_up`), so every pre-check sees every
earlier commit, and once its configuration push is done.

This module keeps the role: a `Leadership` (leadership.py) starts when the
consensus says this replica leads and is dropped whole when it no longer does;
its parts (writes, job_writes, workers, membership, upkeep) each own their
record in it and share one `LeaderContext` (context.py).

Pure: no sockets, threads, asyncio or wall clock; the state is read through
an injected reader, time through an injected clock, request ids come from an
injected random generator.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterable

from google.protobuf.message import Message

from controller import fsm
from controller.authz import Principal
from controller.group_commit import GroupCommit
from controller.host_liveness import Liveness
from controller.leader.context import LeaderContext, logger
from controller.leader.effects import Effect, EndStream
from controller.leader.job_writes import JobWrites
from controller.leader.leadership import Leadership, UpkeepState, WorkerState, WriteState
from controller.leader.membership import Membership
from controller.leader.settings import Consensus, LeaderSettings, StateReader
from controller.leader.upkeep import Upkeep
from controller.leader.workers import Workers
from controller.leader.writes import Writes
from controller.load_commits import LoadCommits
from controller.output_relay import OutputRelay
from controller.watchdog import Watchdog
from xce.clock import Clock
from xce.errors import ServiceError, unavailable
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

CATCH_UP_POLL_S = 0.01  # a new leader looks this often whether its term's first entry applied


class LeaderCore:
    def __init__(self, settings: LeaderSettings, state: StateReader, consensus: Consensus, clock: Clock,
                 rng: random.Random) -> None:
        self.ctx = ctx = LeaderContext(settings, state, consensus, clock, rng)
        self._leaderships = 0
        self.workers = Workers(ctx)
        self.membership = Membership(ctx)
        self.upkeep = Upkeep(ctx)
        self.writes = Writes(ctx, JobWrites(ctx), self.workers, self.membership)

    @property
    def settings(self) -> LeaderSettings:
        return self.ctx.settings

    @settings.setter
    def settings(self, settings: LeaderSettings) -> None:
        self.ctx.settings = settings

    def reload(self, init: log.InitCluster) -> None:
        """The configuration of a re-read cluster file (controller/reconfig.py): pushed now if this
        replica leads, else whenever it comes to."""
        self.settings = dataclasses.replace(self.settings, init=init)
        if self.leadership is not None:  # (a first push in flight, of the old file: this one follows it)
            self.leadership.upkeep.reconfigure = True

    @property
    def leadership(self) -> Leadership | None:
        """The current leadership; None while this replica does not lead."""
        return self.ctx.leadership

    # ------------------------------------------------------------ effects

    def take(self) -> list[Effect]:
        effects, self.ctx.effects = self.ctx.effects, []
        return effects

    def next_wakeup_s(self) -> float:
        now = self.ctx.clock.monotonic_s()
        times = [now + 1.0]
        if (deadline := self.ctx.proposals.next_deadline_s()) is not None:
            times.append(deadline)
        leadership = self.leadership
        if leadership is None:
            return min(times)
        if not leadership.configured:
            return min(*times, now + CATCH_UP_POLL_S)
        workers, upkeep, members = leadership.workers, leadership.upkeep, leadership.membership
        times += [upkeep.watchdog.next_s, members.next_poll_s]
        if members.retry_s > now:
            times.append(members.retry_s)
        if workers.sessions:
            times.append(workers.next_sweep_s)
            if self.settings.load_commit_s > 0:
                times.append(upkeep.loads.next_s)
        if workers.to_step:
            times.append(now)
        if (output_due := workers.outputs.next_deadline_s()) is not None:
            times.append(output_due)
        return min(times)

    def busy(self) -> bool:
        """Work is waiting for the next turn (the driver should tick again at once)."""
        return self.leadership is not None and bool(self.leadership.workers.to_step)

    def serving_term(self) -> int | None:
        """The number of the leadership that serves now, or None: streams served under
        another number must end (the Sync stream checks it)."""
        leadership = self.leadership
        return leadership.number if leadership is not None and leadership.configured \
            and self.ctx.consensus.caught_up() else None

    def refusal(self) -> ServiceError:
        """Why this replica does not serve writes now (FAILED_PRECONDITION names the leader)."""
        return self.ctx.refusal()

    # ------------------------------------------------------------ inputs: time and role

    def tick(self) -> None:
        self._track_role()
        leadership = self.leadership
        if leadership is None:
            return
        self.ctx.proposals.expire()
        now = self.ctx.clock.monotonic_s()
        self.workers.expire_outputs(leadership, now)
        if not leadership.configured:
            self.upkeep.configure(leadership, now)
            return
        if not self.ctx.consensus.caught_up():
            return
        self.upkeep.watch(leadership, now)
        self.membership.tick(leadership, now)
        self.upkeep.reconfigure(leadership, now)
        self.workers.sweep(leadership, now)
        self.upkeep.commit_loads(leadership, now)
        self.upkeep.tick_reservations(leadership)

    def role_changed(self) -> None:
        self.tick()

    def _track_role(self) -> None:
        """Start a leadership when the consensus says this replica leads, end it when it
        no longer does or leads in another term (a step down and back up in between)."""
        raft_term = self.ctx.consensus.leader_term()
        if self.leadership is not None and raft_term != self.leadership.raft_term:
            self._step_down(self.leadership)
        if raft_term is not None and self.leadership is None:
            self._leaderships += 1
            self.ctx.leadership = self._new_leadership(self._leaderships, raft_term)
            self.ctx.forget_format()
            self.membership.start()
            logger.info("leading in term %d (leadership %d); serving once caught up and configured",
                        raft_term, self._leaderships)

    def _new_leadership(self, number: int, raft_term: int) -> Leadership:
        s, clock = self.settings, self.ctx.clock
        liveness = Liveness(clock.monotonic_s(), s.heartbeat_timeout_s)
        return Leadership(
            number, raft_term,
            writes=WriteState(GroupCommit(s.submit_max_requests, s.submit_max_bytes, s.submit_max_in_flight)),
            workers=WorkerState(liveness, outputs=OutputRelay(clock.now_ms() << 16)),
            upkeep=UpkeepState(Watchdog(liveness, s.heartbeat_s / 2, int(s.unknown_timeout_s * 1000)),
                               loads=LoadCommits(s.load_commit_s)))

    def _step_down(self, leadership: Leadership) -> None:
        ctx = self.ctx
        ctx.leadership = None
        error = ctx.refusal()
        for stream in list(leadership.workers.streams):
            ctx.emit(EndStream(stream, error))
        for token, _ in leadership.writes.submits.drain():
            ctx.reply(token, unavailable("leadership changed; retry with the same request id"))
        for waiting in leadership.workers.outputs.drain():
            ctx.reply(waiting.token, unavailable("leadership changed; retry"))
        leadership.workers.reports.drain()
        leadership.workers.joins.drain()
        ctx.proposals.fail_all()
        logger.info("leadership %d over", leadership.number)

    # ------------------------------------------------------------ inputs: the log

    def proposal_done(self, token: int, results: list[log.Result] | None) -> None:
        self.ctx.proposals.done(token, results)

    def applied(self, indices: Iterable[int]) -> None:
        """Entries applied: each session hears of the jobs they changed on its host."""
        leadership = self.leadership
        # (the count follows entries only once a submit held to the limit built it: none of an exempt
        # admin's, so a cluster only they submit to reads no event for it)
        counting = leadership is not None and self.settings.policy.max_pend_jobs_per_user > 0 \
            and leadership.writes.pending.following
        if leadership is None or not (leadership.workers.sessions or counting):
            return
        with self.ctx.state.read() as tables:
            raws = [(index, tables.get("events", fsm.revision_key(index))) for index in indices]
        events = [(index, None if raw is None else log.Event.FromString(raw)) for index, raw in raws]
        if counting:
            leadership.writes.pending.applied(event for _, event in events)
        self.workers.applied(leadership, events)

    # ------------------------------------------------------------ inputs: clients, workers, peers

    def call(self, token: int, method: str, request: Message, caller: Principal) -> None:
        """A client's write, from an authenticated `caller` (writes.py)."""
        self.writes.call(token, method, request, caller)

    def worker_opened(self, stream: int, host: str | None) -> None:
        """A worker's stream opened; `host` is the host its credential proves (it may join only as that)."""
        self.workers.opened(stream, host)

    def worker_message(self, stream: int, message: api.WorkerMessage) -> None:
        self.workers.message(stream, message)

    def worker_closed(self, stream: int) -> None:
        self.workers.closed(stream)

    def peer_answered(self, replica_id: int, kinds: Iterable[str], format_: int, role: str = "",
                      applied_index: int = 0) -> None:
        """A member's Status: what its code understands, and its role and progress (membership.py)."""
        self.membership.peer_answered(replica_id, kinds, format_, role, applied_index)

    def raft_changed(self, token: int, ok: bool, why: str) -> None:
        """The outcome of a ChangeRaft or TransferLeadership effect."""
        self.membership.raft_changed(token, ok, why)
