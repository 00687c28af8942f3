"""Membership changes, pure parts: the steps apply checks (fsm/membership.py) and the step the leader
takes next (controller/membership.py)."""

from __future__ import annotations

import pytest

from controller import fsm
from controller.fsm import membership as fsm_membership
from controller.membership import CATCH_UP_ENTRIES, ProposeStep, RaftChange, Seen, Transfer, next_step
from controller.read_index import ReadIndex
from controller.tables import MemoryTables
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

BOOT = [api.Member(id=i, grpc_address=f"h{i}:7101", raft_address=f"h{i}:7201") for i in (1, 2, 3)]
KINDS = frozenset({"member_change"})


def _apply(tables: MemoryTables, op: log.MemberOp, member: api.Member, index: int,
           request_id: str = "") -> log.Result:
    meta = fsm.read_meta(tables)
    entry = log.Entry(stamp_ms=1_800_000_000_000, format=2, member_change=log.MemberChange(
        op=op, member=member, bootstrap=[] if meta.membership else BOOT, request_id=request_id))
    results = fsm.apply(tables, index, entry.SerializeToString())
    assert results is not None
    return results[0]


def _roles(tables: MemoryTables) -> dict[int, str]:
    return {m.id: fsm_membership.role_name(m.role) for m in fsm.read_meta(tables).membership}


NEW = api.Member(id=4, grpc_address="h4:7101", raft_address="h4:7201")


def test_an_add_and_a_remove_go_step_by_step_from_the_bootstrap_list() -> None:
    tables = MemoryTables()
    assert _apply(tables, log.ADD_LEARNER, NEW, 1).code == log.OK
    assert _roles(tables) == {1: "voter", 2: "voter", 3: "voter", 4: "learner"}
    assert _apply(tables, log.PROMOTE, api.Member(id=4), 2).code == log.OK
    assert _roles(tables)[4] == "promoting"
    assert _apply(tables, log.BECOME_VOTER, api.Member(id=4), 3).code == log.OK
    assert _apply(tables, log.REMOVE, api.Member(id=2), 4).code == log.OK
    assert _roles(tables)[2] == "removing"
    assert _apply(tables, log.REMOVED, api.Member(id=2), 5).code == log.OK
    assert _roles(tables) == {1: "voter", 3: "voter", 4: "voter"}
    members = {m.id: m for m in fsm.read_meta(tables).membership}
    assert members[4].grpc_address == "h4:7101" and members[4].raft_address == "h4:7201"


@pytest.mark.parametrize(("member", "words"), [
    (api.Member(id=2, grpc_address="h9:7101", raft_address="h9:7201"), "is a member already"),
    (api.Member(id=4, grpc_address="h1:7101", raft_address="h4:7201"), "is replica 1's"),
    (api.Member(id=4, grpc_address="h4:7101", raft_address="h2:7201"), "is replica 2's"),
    (api.Member(id=4, grpc_address="h4", raft_address="h4:7201"), "not HOST:PORT"),
    (api.Member(id=0, grpc_address="h4:7101", raft_address="h4:7201"), "positive"),
    (api.Member(id=4, grpc_address="h4:\u00b2", raft_address="h4:7201"), "not HOST:PORT"),
    (api.Member(id=4, grpc_address="h4:7101", raft_address="h\x004:7201"), "not HOST:PORT"),
])
def test_a_bad_add_is_refused_and_changes_nothing(member: api.Member, words: str) -> None:
    tables = MemoryTables()
    result = _apply(tables, log.ADD_LEARNER, member, 1)
    assert result.code != log.OK and words in result.message
    assert not fsm.read_meta(tables).membership


def test_one_change_at_a_time_and_never_the_last_member() -> None:
    tables = MemoryTables()
    _apply(tables, log.ADD_LEARNER, NEW, 1)
    other = api.Member(id=5, grpc_address="h5:7101", raft_address="h5:7201")
    second = _apply(tables, log.ADD_LEARNER, other, 2)
    assert second.code == log.FAILED_PRECONDITION and "in flight" in second.message
    removal = _apply(tables, log.REMOVE, api.Member(id=1), 3)
    assert removal.code == log.FAILED_PRECONDITION and "in flight" in removal.message
    # Removing the learner cancels the add; then the removals leave one voter, which stays.
    assert _apply(tables, log.REMOVE, api.Member(id=4), 4).code == log.OK
    assert _roles(tables) == {1: "voter", 2: "voter", 3: "voter"}
    for index, member_id in ((5, 2), (7, 3)):
        assert _apply(tables, log.REMOVE, api.Member(id=member_id), index).code == log.OK
        assert _apply(tables, log.REMOVED, api.Member(id=member_id), index + 1).code == log.OK
    last = _apply(tables, log.REMOVE, api.Member(id=1), 9)
    assert last.code == log.FAILED_PRECONDITION and "last member" in last.message
    assert _roles(tables) == {1: "voter"}


def test_a_step_out_of_order_or_repeated_changes_nothing() -> None:
    tables = MemoryTables()
    _apply(tables, log.ADD_LEARNER, NEW, 1, request_id="add-4")
    assert _apply(tables, log.BECOME_VOTER, api.Member(id=4), 2).code == log.FAILED_PRECONDITION
    assert _apply(tables, log.REMOVED, api.Member(id=3), 3).code == log.FAILED_PRECONDITION
    again = _apply(tables, log.ADD_LEARNER, NEW, 4, request_id="add-4")  # a retry: the first answer
    assert again.code == log.OK
    assert _roles(tables) == {1: "voter", 2: "voter", 3: "voter", 4: "learner"}


def _members(**roles: int) -> list[api.Member]:
    out = [api.Member(id=m.id, grpc_address=m.grpc_address, raft_address=m.raft_address) for m in BOOT]
    out.append(api.Member(id=4, grpc_address=NEW.grpc_address, raft_address=NEW.raft_address))
    for m in out:
        m.role = roles.get(f"r{m.id}", api.MEMBER_VOTER)
    return out


VOTERS = frozenset({"h1:7201", "h2:7201", "h3:7201"})


def _step(current: list[api.Member], voters: frozenset[str] = VOTERS, busy: bool = False,
          seen: dict[int, Seen] | None = None, applied: int = 1000, me: int = 1) -> object:
    return next_step(current, voters, busy, seen or {}, applied, me, 2, KINDS)


def test_a_learner_is_promoted_only_once_it_has_caught_up_with_code_that_applies_everything() -> None:
    learner = _members(r4=api.MEMBER_LEARNER)
    behind = Seen("learner", 1000 - CATCH_UP_ENTRIES - 1, 2, KINDS)
    assert _step(learner, seen={4: behind}) is None
    assert _step(learner, seen={4: Seen("learner", 990, 1, KINDS)}) is None  # an older entry format
    assert _step(learner, seen={4: Seen("learner", 990, 2, frozenset())}) is None  # lacks a kind in use
    assert _step(learner, seen={4: Seen("unreachable")}) is None
    assert _step(learner, seen={4: Seen("learner", 990, 2, KINDS)}) == ProposeStep(log.PROMOTE, learner[3])


def test_a_promoted_member_joins_the_raft_configuration_once_it_stands_by() -> None:
    promoting = _members(r4=api.MEMBER_PROMOTING)
    assert _step(promoting, seen={4: Seen("learner", 1000, 2, KINDS)}) is None  # still restarting
    assert _step(promoting, seen={4: Seen("standby", 1000, 2, KINDS)}) == RaftChange(True, "h4:7201")
    with_4 = VOTERS | {"h4:7201"}
    assert _step(promoting, voters=with_4, busy=True) is None  # appended, not applied yet
    assert _step(promoting, voters=with_4) == ProposeStep(log.BECOME_VOTER, promoting[3])


def test_a_removal_leaves_the_raft_configuration_first_and_a_leader_hands_over() -> None:
    removing = _members(r2=api.MEMBER_REMOVING)[:3]
    assert _step(removing) == RaftChange(False, "h2:7201")
    assert _step(removing, me=2) == Transfer()
    assert _step(removing, voters=VOTERS - {"h2:7201"}) == ProposeStep(log.REMOVED, removing[1])
    assert _step(removing, voters=VOTERS - {"h2:7201"}, busy=True) is None
    assert _step(_members()[:3]) is None  # nothing in flight


def test_a_read_counts_the_majority_of_the_membership_it_arrived_under() -> None:
    index = ReadIndex()
    answers: list[bool] = []
    index.arrived(5, ["a", "b", "c"], 0.0, answers.append)  # four members: the leader and 3 peers
    for peer in ("a", "b", "c"):
        index.sent(peer)
    index.answered("a")
    index.step(leader=True, last_applied=5, now_s=0.1)
    assert answers == []  # 2 of 4 is no majority
    index.answered("b")
    index.step(leader=True, last_applied=5, now_s=0.1)
    assert answers == [True]
