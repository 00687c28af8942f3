"""What every part of the leader shares: its ports, the effects it leaves, its proposals.

The parts (writes, job_writes, workers, membership, upkeep) each hold one
`LeaderContext`, created by the core. Through it they read the committed
state, queue effects for the driver, and propose entries: `propose` stamps an
entry with the leader's time, its replica id and the entry format in use, and
calls back once its outcome is known (None: unknown). The entry format moves
only with an announcement, which only a leader proposes: it is read at a
leadership's start and after each announcement (`forget_format`).

`leadership` is the current one, or None while this replica does not lead; a
callback holding an older leadership compares it with this one before acting.
"""

from __future__ import annotations

import functools
import logging
import random
from collections.abc import Callable
from typing import Protocol, TypeVar, runtime_checkable

from google.protobuf.message import Message

from controller import fsm, proposals, request_ids
from controller.authz import Principal
from controller.fsm import membership as fsm_membership
from controller.fsm import versions
from controller.group_commit import GroupCommit
from controller.leader.effects import Effect, Propose, Reply
from controller.leader.leadership import Leadership
from controller.leader.settings import Consensus, LeaderSettings, StateReader
from controller.tables import Tables
from xce.clock import Clock
from xce.errors import ServiceError, failed_precondition, invalid, unavailable
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

# One name for every part's log lines: operators follow the leader by it.
logger = logging.getLogger("controller.leader")

T = TypeVar("T")
OnDone = Callable[[list[log.Result] | None], None]


@runtime_checkable
class WithRequestId(Protocol):
    request_id: str


class LeaderContext:
    def __init__(self, settings: LeaderSettings, state: StateReader, consensus: Consensus, clock: Clock,
                 rng: random.Random) -> None:
        self.settings = settings
        self.state = state
        self.consensus = consensus
        self.clock = clock
        self.rng = rng
        self.leadership: Leadership | None = None
        self.effects: list[Effect] = []
        self.proposals = proposals.Proposals(clock)
        self._format: int | None = None  # the entry format to propose; None: read it again
        # The audit note of a write being handled whose entry carries it (writes.py: Writes.call), by
        # its call's token: its handler proposes synchronously, through propose_request.
        self.audit_notes: dict[int, api.AuditRequest] = {}

    # ------------------------------------------------------------ effects

    def emit(self, effect: Effect) -> None:
        self.effects.append(effect)

    def reply(self, token: int, response: Message | ServiceError) -> None:
        self.effects.append(Reply(token, response))

    def refusal(self) -> ServiceError:
        """Why this replica does not serve writes now (FAILED_PRECONDITION names the leader)."""
        if self.consensus.leader_term() is not None:
            return unavailable("leader is catching up; retry")
        leader = self.consensus.leader_address()
        if leader is None:
            return unavailable("no leader elected; retry")
        return failed_precondition(f"not the leader; the leader is {leader}", leader)

    # ------------------------------------------------------------ proposing

    def proposal_format(self) -> int:
        if self._format is None:
            with self.state.read() as tables:
                self._format = versions.proposal_format(fsm.read_meta(tables), self.voter_ids(tables))
        return self._format

    def forget_format(self) -> None:
        self._format = None

    def propose(self, entry: log.Entry, on_done: OnDone) -> None:
        entry.stamp_ms = self.clock.now_ms()
        entry.proposer = self.settings.replica_id
        entry.format = self.proposal_format()
        token = self.proposals.new(entry.WhichOneof("body") or "?", on_done)
        self.effects.append(Propose(token, entry))

    def flush(self, leadership: Leadership, group: GroupCommit[tuple[int, T]],
              entry_of: Callable[[list[T]], log.Entry],
              settle: Callable[[Leadership, list[tuple[int, T]], list[log.Result | None]], None]) -> None:
        """Propose what a group commit holds, one entry a batch, while it lets more go; when a
        batch settles, each of its items gets its own result (None: outcome unknown)."""
        while (batch := group.take()) is not None:
            entry = entry_of([item for _, item in batch])
            done = functools.partial(self._batch_done, leadership, group, entry_of, settle, batch)
            self.propose(entry, done)

    def _batch_done(self, leadership: Leadership, group: GroupCommit[tuple[int, T]],
                    entry_of: Callable[[list[T]], log.Entry],
                    settle: Callable[[Leadership, list[tuple[int, T]], list[log.Result | None]], None],
                    batch: list[tuple[int, T]], results: list[log.Result] | None) -> None:
        group.done()
        settle(leadership, batch, per_request(results, len(batch)))
        if self.leadership is leadership:
            self.flush(leadership, group, entry_of, settle)

    def propose_request(self, leadership: Leadership, token: int, entry: log.Entry, request_id: str,
                        respond: Callable[[Tables, log.Result], Message]) -> None:
        """Propose a client's request and answer the call from the state its outcome left; with its
        audit note, if the call has one for its entry (its row is written beside its changes)."""
        note = self.audit_notes.pop(token, None)
        if note is not None:
            entry.audit_note.CopyFrom(note)

        def done(results: list[log.Result] | None) -> None:
            leadership.writes.release_scoped(token)
            with self.state.read() as tables:
                try:
                    settled = proposals.settle(tables, request_id, results[0] if results else None)
                    self.reply(token, respond(tables, settled))
                except ServiceError as exc:
                    self.reply(token, exc)

        self.propose(entry, done)

    def ensure_request_id(self, request: WithRequestId) -> None:
        """Give a request without an id a fresh one; refuse one too long to store."""
        if not request.request_id:
            request.request_id = f"{self.rng.getrandbits(128):032x}"
        fsm.check_request_id(request.request_id)

    # ------------------------------------------------------------ membership as committed

    def members(self, tables: Tables) -> tuple[log.Meta, list[api.Member]]:
        meta = fsm.read_meta(tables)
        return meta, fsm_membership.members(meta, self.settings.bootstrap_members())

    def voter_ids(self, tables: Tables) -> tuple[int, ...]:
        return fsm_membership.voter_ids(fsm.read_meta(tables), self.settings.bootstrap_members())

    def enabled(self, tables: Tables, kind: str) -> bool:
        """Every voter announced code that applies this entry kind."""
        return kind in versions.enabled(fsm.read_meta(tables), self.voter_ids(tables))


def own_request_id(tables: Tables, request: WithRequestId, caller: Principal) -> None:
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


def per_request(results: list[log.Result] | None, count: int) -> list[log.Result | None]:
    """One result per request of a group-committed entry; all unknown unless each has one."""
    if results is not None and len(results) == count:
        return list(results)
    return [None] * count
