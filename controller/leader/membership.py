"""Membership seen from the leader: what each member's code understands, and changes of members.

Announcements: every member's Status is asked for now and then (`AskPeers`),
often while a membership change is in flight; what a replica's code
understands (entry kinds, entry format) is committed as an announcement when
it differs from the committed record, learners' too, so that a promoted
learner counts at once. An announcement may move the entry format in use:
the context reads it again, and upkeep looks at the configuration again.

Changes (`xce member add|remove`): the write commits the change's first step
(a learner added; a member marked REMOVING). The rest is the leader's: at each
tick while a change is in flight it asks controller/membership.py for the next
step from the committed membership, the Raft configuration and what each
member said of itself, and takes it: a proposal (promote, demote, remove) or a
step in the Raft configuration (`ChangeRaft`, `TransferLeadership`), one at a
time, retried after MEMBER_RETRY_S when refused.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from controller import fsm, membership
from controller.authz import Principal
from controller.fsm import membership as fsm_membership
from controller.fsm import versions
from controller.leader.context import LeaderContext, logger
from controller.leader.effects import AskPeers, ChangeRaft, TransferLeadership
from controller.leader.leadership import Leadership, MemberState
from controller.tables import Tables
from xce.errors import ServiceError, failed_precondition
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

MEMBER_POLL_S = 0.2  # while a membership change is in flight: how often members are asked
MEMBER_RETRY_S = 0.5  # after a Raft change or transfer that was refused (pysyncobj: one at a time)


class Membership:
    def __init__(self, ctx: LeaderContext) -> None:
        self.ctx = ctx
        self.seen: dict[int, membership.Seen] = {}  # members' own Status, while a change is in flight
        self._raft_waiters: dict[int, Callable[[bool, str], None]] = {}
        self._raft_tokens = 0

    def start(self) -> None:
        """A leadership starts: what members said of themselves is asked again."""
        self.seen = {}

    def tick(self, leadership: Leadership, now: float) -> None:
        """Ask the peers when due (often while a change is in flight) and take the change's next step."""
        ctx, state = self.ctx, leadership.membership
        changing = self.change_in_flight()
        if changing:  # members are asked often while a change is in flight: each step waits on one
            state.next_poll_s = min(state.next_poll_s, now + MEMBER_POLL_S)
        if now >= state.next_poll_s:
            state.next_poll_s = now + (MEMBER_POLL_S if changing else ctx.settings.capability_poll_s)
            ctx.emit(AskPeers())
            self._announce(leadership, ctx.settings.replica_id, ctx.settings.kinds, versions.ENTRY_FORMAT)
        if changing and not state.step and now >= state.retry_s:
            self._step(leadership, now)

    def change_in_flight(self) -> bool:
        with self.ctx.state.read() as tables:
            return fsm_membership.in_flight(fsm.read_meta(tables).membership) is not None

    # ------------------------------------------------------------ announcements

    def peer_answered(self, replica_id: int, kinds: Iterable[str], format_: int, role: str = "",
                      applied_index: int = 0) -> None:
        """A member's Status: what its code understands (committed as an announcement, learners'
        too, so that a promoted learner is counted at once), and its role and progress."""
        leadership = self.ctx.leadership
        if leadership is None:
            return
        with self.ctx.state.read() as tables:
            _, current = self.ctx.members(tables)
        if replica_id not in {m.id for m in current}:
            return
        kinds = frozenset(kinds)
        if role:
            self.seen[replica_id] = membership.Seen(role, applied_index, format_, kinds)
        if role != "unreachable":  # one that did not answer said nothing of its code
            self._announce(leadership, replica_id, kinds, format_)

    def _announce(self, leadership: Leadership, replica_id: int, kinds: frozenset[str], format_: int) -> None:
        """Commit what a replica's code understands, if the committed record differs."""
        state = leadership.membership
        if replica_id in state.announcing or not leadership.configured:
            return
        with self.ctx.state.read() as tables:
            committed = fsm.read_meta(tables).members.get(replica_id)
        if committed is not None and (frozenset(committed.kinds), committed.format) == (kinds, format_):
            return
        state.announcing.add(replica_id)
        entry = log.Entry(announce=log.Announce(replica_id=replica_id, kinds=sorted(kinds), format=format_))

        def done(results: list[log.Result] | None) -> None:
            state.announcing.discard(replica_id)
            self.ctx.forget_format()
            leadership.upkeep.reconfigure = True
            if results and results[0].code == log.OK:
                logger.info("replica %d announced entry format %d and kinds %s", replica_id, format_,
                            ", ".join(sorted(kinds - versions.BASELINE_KINDS)) or "(baseline)")

        self.ctx.propose(entry, done)

    # ------------------------------------------------------------ the writes: xce member add|remove

    def add_member(self, leadership: Leadership, token: int, request: api.AddMemberRequest,
                   caller: Principal) -> None:
        """`xce member add`: the new replica, already running as a learner (the gRPC layer asked it),
        joins the membership as a LEARNER; the rest of the change is the leader's (membership.py)."""
        ctx = self.ctx
        ctx.ensure_request_id(request)
        with ctx.state.read() as tables:
            meta, current = ctx.members(tables)
            earlier = fsm.read_result(tables, request.request_id)
        member = api.Member(id=request.id or max((m.id for m in current), default=0) + 1,
                            grpc_address=request.grpc_address, raft_address=request.raft_address,
                            role=api.MEMBER_LEARNER)
        if earlier is None:
            fsm_membership.check_add(current, member)
        entry = self._member_change(meta, log.ADD_LEARNER, member, request.request_id)
        entry.by.CopyFrom(caller.record())
        ctx.propose_request(leadership, token, entry, request.request_id, self._members_response)

    def remove_member(self, leadership: Leadership, token: int, request: api.RemoveMemberRequest,
                      caller: Principal) -> None:
        """`xce member remove`: REMOVING (a learner leaves at once); the Raft configuration lets the
        member go after, the leader handing its leadership over first if it is the one."""
        ctx = self.ctx
        ctx.ensure_request_id(request)
        with ctx.state.read() as tables:
            meta, current = ctx.members(tables)
            earlier = fsm.read_result(tables, request.request_id)
        if earlier is None:
            target = fsm_membership.check_remove(current, request.id)
            if target.role != api.MEMBER_LEARNER:
                remaining = [m.raft_address for m in current
                             if m.role in fsm_membership.VOTING and m.id != target.id]
                have, need = membership.quorum_after(remaining, ctx.consensus.reachable())
                if have < need:
                    raise failed_precondition(
                        f"removing replica {target.id} would leave {have} of the other {len(remaining)} "
                        f"members reachable, fewer than the {need} every write needs; bring them back "
                        "first")
        entry = self._member_change(meta, log.REMOVE, api.Member(id=request.id), request.request_id)
        entry.by.CopyFrom(caller.record())
        ctx.propose_request(leadership, token, entry, request.request_id, self._members_response)

    def _members_response(self, tables: Tables, result: log.Result) -> api.MembersResponse:
        _, current = self.ctx.members(tables)
        return api.MembersResponse(members=current, revision=result.revision)

    def _member_change(self, meta: log.Meta, op: log.MemberOp, member: api.Member,
                       request_id: str = "") -> log.Entry:
        bootstrap_members = self.ctx.settings.bootstrap_members()
        if "member_change" not in versions.enabled(meta, fsm_membership.voter_ids(meta, bootstrap_members)):
            raise failed_precondition("not every replica has announced code that applies membership "
                                      "changes yet (xce status: enabled entry kinds); retry once they have")
        # The first change records the file's replicas, those the Raft configuration has: a file that
        # lists one more than there are would make it a member.
        voters = self.ctx.consensus.voters()
        bootstrap = () if meta.membership else tuple(m for m in bootstrap_members if m.raft_address in voters)
        return log.Entry(member_change=log.MemberChange(op=op, member=member, bootstrap=bootstrap,
                                                        request_id=request_id))

    # ------------------------------------------------------------ the steps of a change

    def _step(self, leadership: Leadership, now: float) -> None:
        """Take the next step of the membership change in flight, if one can be taken now."""
        ctx = self.ctx
        with ctx.state.read() as tables:
            meta, current = ctx.members(tables)
        voters = fsm_membership.voter_ids(meta, ctx.settings.bootstrap_members())
        step = membership.next_step(current, ctx.consensus.voters(), ctx.consensus.raft_busy(), self.seen,
                                    meta.applied_index, ctx.settings.replica_id,
                                    versions.proposal_format(meta, voters), versions.enabled(meta, voters))
        if step is None or self._paused(leadership.membership, step, now):
            return
        if isinstance(step, membership.ProposeStep):
            self._propose_step(leadership.membership, meta, step, now)
        else:
            self._change_raft(leadership.membership, step)

    def _paused(self, state: MemberState, step: membership.Step, now: float) -> bool:
        """Each new step waits `member_pause_s` first (a fault tests inject; 0: none)."""
        pause = self.ctx.settings.member_pause_s
        if not pause:
            return False
        key = (type(step).__name__, getattr(step, "op", None), getattr(step, "add", None))
        if state.next is None or state.next[0] != key:
            state.next = (key, now)
        if now < state.next[1] + pause:
            state.retry_s = state.next[1] + pause
            return True
        return False

    def _propose_step(self, state: MemberState, meta: log.Meta, step: membership.ProposeStep,
                      now: float) -> None:
        op, member = log.MemberOp.Name(step.op), step.member
        try:
            entry = self._member_change(meta, step.op, api.Member(id=member.id))
        except ServiceError as exc:
            logger.warning("membership: %s of replica %d waits: %s", op, member.id, exc.message)
            state.retry_s = now + MEMBER_RETRY_S
            return
        state.step = op

        def proposed(results: list[log.Result] | None) -> None:
            state.step = ""
            if results and results[0].code == log.OK:
                logger.info("membership: %s of replica %d committed", op, member.id)
                if step.op == log.REMOVED:
                    self.seen.pop(member.id, None)
            else:
                logger.warning("membership: %s of replica %d not applied: %s", op, member.id,
                               results[0].message if results else "outcome unknown")
                state.retry_s = self.ctx.clock.monotonic_s() + MEMBER_RETRY_S

        self.ctx.propose(entry, proposed)

    def _change_raft(self, state: MemberState, step: membership.Transfer | membership.RaftChange) -> None:
        self._raft_tokens += 1
        token = self._raft_tokens
        what = "hand leadership over" if isinstance(step, membership.Transfer) else \
            f"{'add' if step.add else 'remove'} {step.address} in the Raft configuration"
        state.step = what

        def changed(ok: bool, why: str) -> None:
            state.step = ""
            if ok:
                logger.info("membership: %s: done", what)
            else:
                logger.warning("membership: %s refused (%s); retrying", what, why)
                state.retry_s = self.ctx.clock.monotonic_s() + MEMBER_RETRY_S

        self._raft_waiters[token] = changed
        self.ctx.emit(TransferLeadership(token) if isinstance(step, membership.Transfer)
                      else ChangeRaft(token, step.add, step.address))
        logger.info("membership: %s", what)

    def raft_changed(self, token: int, ok: bool, why: str) -> None:
        """The outcome of a ChangeRaft or TransferLeadership effect."""
        waiter = self._raft_waiters.pop(token, None)
        if waiter is not None:
            waiter(ok, why)
