"""Membership changes on the leader: which step of the change in flight comes next.

Theory of operation. A change is committed as steps (fsm/membership.py), and
the Raft configuration (pysyncobj's dynamic membership, one server at a time)
moves between them. The leader looks at three things and returns the one
step that can be taken now, or None:
- the committed membership, whose one non-VOTER member is the change in
  flight;
- the Raft configuration as its log has it (`voters`), and whether a Raft
  change is appended but not yet applied (`raft_busy`);
- what the member itself said when the leader last asked its Status
  (`seen`: learner, standby, its applied index and what its code applies).

Adding replica N:
1. LEARNER: N runs as a learner (raft.py) and receives the log. Once it is
   within CATCH_UP_ENTRIES of the leader and its code applies what the
   cluster uses, PROMOTE.
2. PROMOTING: N sees that in its own state and restarts as a standby voter.
   Once it says `standby`, the Raft configuration takes it in (RaftChange
   add); once that is applied, BECOME_VOTER.
Removing replica N: REMOVING; the Raft configuration lets it go (RaftChange
remove; if N leads, it hands leadership over first), then REMOVED.

Every step is decided afresh from those inputs, so a new leader (the old one
killed at any step) carries on where the committed state and its log say the
change is, and a step that was taken already is never taken twice.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from controller.fsm.membership import in_flight
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

# How far behind the leader's applied index a learner may be when it is promoted: the standby
# gets the rest as a voter, while the configuration counts it, so this is kept short.
CATCH_UP_ENTRIES = 256


@dataclass(frozen=True)
class Seen:
    """A member's own Status, as the leader last heard it."""

    role: str  # learner, standby, follower, leader, candidate, unreachable
    applied_index: int = 0
    entry_format: int = 0
    kinds: frozenset[str] = frozenset()


@dataclass(frozen=True)
class ProposeStep:
    op: log.MemberOp
    member: api.Member


@dataclass(frozen=True)
class RaftChange:
    add: bool
    address: str


@dataclass(frozen=True)
class Transfer:
    """This leader is the member to remove: hand leadership over first."""


Step = ProposeStep | RaftChange | Transfer


def next_step(current: Sequence[api.Member], voters: frozenset[str], raft_busy: bool,
              seen: Mapping[int, Seen], applied_index: int, me: int, needs_format: int,
              needs_kinds: frozenset[str]) -> Step | None:
    member = in_flight(current)
    if member is None:
        return None
    in_raft = member.raft_address in voters
    said = seen.get(member.id)
    if member.role == api.MEMBER_LEARNER:
        if said is not None and said.role == "learner" and caught_up(said, applied_index) \
                and said.entry_format >= needs_format and needs_kinds <= said.kinds:
            return ProposeStep(log.PROMOTE, member)
        return None
    if raft_busy:
        return None  # one Raft change at a time; its outcome decides the next step
    if member.role == api.MEMBER_PROMOTING:
        if in_raft:
            return ProposeStep(log.BECOME_VOTER, member)
        if said is not None and said.role == "standby":
            return RaftChange(True, member.raft_address)
        return None
    # REMOVING
    if not in_raft:
        return ProposeStep(log.REMOVED, member)
    if member.id == me:
        return Transfer()
    return RaftChange(False, member.raft_address)


def caught_up(said: Seen, applied_index: int) -> bool:
    return said.applied_index + CATCH_UP_ENTRIES >= applied_index


def quorum_after(voters: Sequence[str], reachable: frozenset[str]) -> tuple[int, int]:
    """(reachable voters, votes needed) of a configuration: a change that leaves fewer reachable
    than needed would stop every write (etcd's strict reconfiguration check)."""
    return sum(1 for v in voters if v in reachable), len(voters) // 2 + 1
