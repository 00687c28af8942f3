"""The committed membership: which replicas there are, with their addresses and roles.

Theory of operation. `meta.membership` is empty until the first change: the
members are then the cluster file's replicas, all voters (`members` needs
the caller's list for that case). The first change's entry carries that list
(`bootstrap`, as the leader had it), so from then on the membership is in
the state, the same on every replica, whatever their files say.

A change is a sequence of steps, each an entry (controller/membership.py
drives them), and only one change is in flight at a time: a member in any
role but VOTER is the change in flight, and nothing else may start until it
is done (or, for a learner, cancelled by removing it).
- add: ADD_LEARNER (a new member that receives the log and never votes),
  PROMOTE (it has caught up), BECOME_VOTER (the Raft configuration took it
  in);
- remove: REMOVE (the member is REMOVING; a LEARNER leaves at once), REMOVED
  (the Raft configuration let it go; its announced capabilities go too).
Apply checks each step against the state, so a step proposed twice, or by a
leader that had not seen the last one, is refused without effect.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from controller.fsm.applier import Applier
from controller.fsm.requests import guarded
from xce.errors import ServiceError
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

VOTING = (api.MEMBER_VOTER, api.MEMBER_PROMOTING, api.MEMBER_REMOVING)
MAX_ADDRESS = 255
MAX_MEMBERS = 15


def members(meta: log.Meta, bootstrap: Iterable[api.Member]) -> list[api.Member]:
    """The committed membership (copies); `bootstrap` (the cluster file's replicas) if never changed."""
    if meta.membership:
        return [api.Member(id=m.id, grpc_address=m.grpc_address, raft_address=m.raft_address, role=m.role)
                for m in meta.membership]
    return [api.Member(id=m.id, grpc_address=m.grpc_address, raft_address=m.raft_address,
                       role=api.MEMBER_VOTER) for m in bootstrap]


def voter_ids(meta: log.Meta, bootstrap: Iterable[api.Member]) -> tuple[int, ...]:
    """The members that vote, or are about to, or still do: whose code must understand every entry."""
    return tuple(sorted(m.id for m in members(meta, bootstrap) if m.role in VOTING))


def in_flight(current: Sequence[api.Member]) -> api.Member | None:
    """The member whose change is in flight, if one is."""
    return next((m for m in current if m.role != api.MEMBER_VOTER), None)


def role_name(role: int) -> str:
    return api.MemberRole.Name(role).removeprefix("MEMBER_").lower()


_HOST_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_[]:")


def check_address(address: str, what: str) -> None:
    host, _, port = address.rpartition(":")
    if not host or not port.isascii() or not port.isdigit() or not 0 < int(port) < 65536 \
            or len(address) > MAX_ADDRESS or not set(host) <= _HOST_CHARS:
        raise ServiceError(log.INVALID_ARGUMENT, f"{what} {address[:80]!r} is not HOST:PORT")


def check_add(current: Sequence[api.Member], member: api.Member) -> None:
    """Why `member` cannot be added as a learner now (ServiceError), or nothing."""
    if member.id <= 0:
        raise ServiceError(log.INVALID_ARGUMENT, "a member id is a positive number")
    check_address(member.grpc_address, "gRPC address")
    check_address(member.raft_address, "Raft address")
    if member.grpc_address == member.raft_address:
        raise ServiceError(log.INVALID_ARGUMENT, "the gRPC and Raft addresses must differ")
    busy = in_flight(current)
    if busy is not None:
        raise ServiceError(log.FAILED_PRECONDITION,
                           f"a membership change is in flight: replica {busy.id} is {role_name(busy.role)}; "
                           "one change at a time (wait for it, or cancel a learner with "
                           f"`xce member remove {busy.id}`)")
    for m in current:
        if m.id == member.id:
            raise ServiceError(log.ALREADY_EXISTS, f"replica {member.id} is a member already")
        for mine in (member.grpc_address, member.raft_address):
            if mine in (m.grpc_address, m.raft_address):
                raise ServiceError(log.ALREADY_EXISTS, f"address {mine} is replica {m.id}'s")
    if len(current) >= MAX_MEMBERS:
        raise ServiceError(log.FAILED_PRECONDITION, f"at most {MAX_MEMBERS} members")


def check_remove(current: Sequence[api.Member], member_id: int) -> api.Member:
    """The member to remove, or why it cannot be removed now (ServiceError)."""
    target = next((m for m in current if m.id == member_id), None)
    if target is None:
        raise ServiceError(log.NOT_FOUND, f"replica {member_id} is not a member "
                                          f"(members: {', '.join(str(m.id) for m in current)})")
    if target.role == api.MEMBER_LEARNER:
        return target  # cancels the add in flight
    if target.role == api.MEMBER_REMOVING:
        raise ServiceError(log.FAILED_PRECONDITION, f"replica {member_id} is being removed already")
    busy = in_flight(current)
    if busy is not None and busy.id != member_id:
        raise ServiceError(log.FAILED_PRECONDITION,
                           f"a membership change is in flight: replica {busy.id} is {role_name(busy.role)}; "
                           "one change at a time")
    if not any(m.role in VOTING and m.id != member_id for m in current):
        raise ServiceError(log.FAILED_PRECONDITION, f"replica {member_id} is the last member; a cluster "
                                                    "cannot remove its last member")
    return target


def apply_member_change(applier: Applier) -> list[log.Result]:
    change, meta = applier.entry.member_change, applier.meta

    def body() -> log.Result:
        current = members(meta, change.bootstrap)
        if not current:
            raise ServiceError(log.FAILED_PRECONDITION, "no membership to change (no bootstrap list)")
        target = change.member
        if change.op == log.ADD_LEARNER:
            check_add(current, target)
            current.append(api.Member(id=target.id, grpc_address=target.grpc_address,
                                      raft_address=target.raft_address, role=api.MEMBER_LEARNER))
        elif change.op == log.REMOVE:
            found = check_remove(current, target.id)
            if found.role == api.MEMBER_LEARNER:
                current.remove(found)
                meta.members.pop(found.id, None)
            else:
                found.role = api.MEMBER_REMOVING
        elif change.op in _STEPS:
            before, after = _STEPS[change.op]
            step = next((m for m in current if m.id == target.id), None)
            if step is None or step.role != before:
                raise ServiceError(log.FAILED_PRECONDITION,
                                   f"replica {target.id} is not {role_name(before)}: step "
                                   f"{log.MemberOp.Name(change.op)} does not apply")
            if after is None:
                current.remove(step)
                meta.members.pop(step.id, None)
            else:
                step.role = after
        else:
            raise ServiceError(log.INVALID_ARGUMENT, f"unknown membership step {change.op}")
        del meta.membership[:]
        meta.membership.extend(sorted(current, key=lambda m: m.id))
        return log.Result(code=log.OK, revision=applier.index)

    return [guarded(change.request_id, applier, body)]


_STEPS = {
    log.PROMOTE: (api.MEMBER_LEARNER, api.MEMBER_PROMOTING),
    log.BECOME_VOTER: (api.MEMBER_PROMOTING, api.MEMBER_VOTER),
    log.REMOVED: (api.MEMBER_REMOVING, None),
}
