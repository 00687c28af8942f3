"""The Raft transport's part in ReadIndex (controller/raft_transport.py, read_index.py): each
AppendEntries carries a number, the answer sent while handling it repeats it, and the leader's
ReadIndex takes it. Two transports wired to each other; pysyncobj's handling of an AppendEntries is
modelled by `deliver` (it answers one of its term or later, and ignores one of an older term)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from controller.pysyncobj_internals import ANSWER, APPEND_ENTRIES, CONNECTION_STATE, Transport
from controller.raft_transport import SEQUENCE, DurableTransport
from controller.read_index import ReadIndex


class Wire(Transport):  # type: ignore[misc]
    """Stands behind DurableTransport.send (the C3 order puts it there): keeps what is sent."""

    outbox: list[tuple[Any, dict[str, Any]]]

    def send(self, node: Any, message: Any) -> bool:
        self.outbox.append((node, message))
        return True


class Node(DurableTransport, Wire):
    def deliver(self, node: Any, message: Any) -> None:  # pysyncobj, as far as answers go
        replica = self.replica
        if message.get("type") != APPEND_ENTRIES or message["term"] < replica.raftCurrentTerm:
            return
        replica.raftCurrentTerm = message["term"]
        if "prevLogIdx" in message:  # else the transport answers (nothing to append)
            self.answer(node, message["prevLogIdx"] + 1)

    def answer(self, node: Any, next_index: int, success: bool = True) -> None:
        self.send(node, {"type": ANSWER, "next_node_idx": next_index, "reset": False, "success": success})


class Wal(list[tuple[bytes, int, int]]):
    flushes = 0

    def flush(self, lazy_commit_index: bool = False) -> None:
        self.flushes += 1


def _node(name: str, term: int, peers: list[str], leads: bool = False) -> Node:
    node = object.__new__(Node)
    node.wal, node.reads, node.guard, node.outbox = Wal([(b"", 1, 1)]), ReadIndex(), None, []
    node._syncObj = SimpleNamespace(raftCurrentTerm=term, raftLastApplied=1, name=name, leads=leads,
                                    _isLeader=lambda: node._syncObj.leads,
                                    _SyncObj__sendNextNodeIdx=lambda to, nextNodeIdx, success: node.answer(
                                        to, nextNodeIdx, success))
    node._connections = {p: SimpleNamespace(state=CONNECTION_STATE.CONNECTED) for p in peers}
    return node


def _heartbeat(leader: Node, to: str) -> dict[str, Any]:
    leader.send(to, {"type": APPEND_ENTRIES, "term": leader.replica.raftCurrentTerm, "prevLogIdx": 1,
                     "prevLogTerm": 1, "commit_index": 1, "entries": []})
    return leader.outbox.pop()[1]


def test_the_answer_repeats_the_number_of_the_append_entries_it_answers() -> None:
    leader, follower = _node("a", 3, ["b"]), _node("b", 3, ["a"])
    first, second = _heartbeat(leader, "b"), _heartbeat(leader, "b")
    assert (first[SEQUENCE], second[SEQUENCE]) == (1, 2)
    follower.on_message("a", second)
    (to, answer), = follower.outbox
    assert to == "a" and answer[SEQUENCE] == 2 and answer["term"] == 3
    follower.outbox.clear()
    follower.answer("a", 2)
    assert SEQUENCE not in follower.outbox[0][1]  # sent outside the handling of an AppendEntries


def test_a_leader_deposed_and_elected_again_confirms_a_read_in_one_round() -> None:
    """Its AppendEntries of the old term went unanswered (the follower had moved on); the read
    that arrives once it leads again is confirmed by the answer to the next one."""
    leader, follower = _node("a", 5, ["b", "c"]), _node("b", 6, ["a"])
    for _ in range(3):
        follower.on_message("a", _heartbeat(leader, "b"))
    assert follower.outbox == []  # an older term's: no answer
    leader.replica.raftCurrentTerm = 7  # elected again
    answers: list[bool] = []
    leader.reads.arrived(1, ["b", "c"], 0.0, answers.append)
    follower.on_message("a", _heartbeat(leader, "b"))
    leader.on_message("b", follower.outbox.pop()[1])
    leader.reads.step(leader=True, last_applied=1, now_s=0.01)
    assert answers == [True]


def test_a_number_that_is_not_an_integer_is_neither_repeated_nor_taken() -> None:
    """A malformed number (a string, a boolean) from a peer: the answer carries none, and an answer
    carrying one confirms nothing by it (it is counted as an answer of an earlier build)."""
    leader, follower = _node("a", 3, ["b", "c"]), _node("b", 3, ["a"])
    heartbeat = _heartbeat(leader, "b")
    for bad in ("7", True):
        follower.on_message("a", {**heartbeat, SEQUENCE: bad})
        assert SEQUENCE not in follower.outbox.pop()[1]
    answers: list[bool] = []
    leader.reads.arrived(1, ["b", "c"], 0.0, answers.append)
    leader.on_message("b", {"type": ANSWER, "next_node_idx": 2, "reset": False, "success": True,
                            "term": 3, SEQUENCE: "999"})
    leader.reads.step(leader=True, last_applied=1, now_s=0.01)
    assert answers == []  # counted, but the read wants the answer to one sent after it


def test_a_leader_s_append_entries_leave_unflushed_and_every_other_message_after_a_flush() -> None:
    """The followers write a leader's entries while it writes them (its flush comes at the top of its
    next tick, before it counts itself: FlushedTicks); an answer, a vote, or anything a node that does
    not lead sends, goes out only once its WAL is durable."""
    leader, follower = _node("a", 3, ["b"], leads=True), _node("b", 3, ["a"])
    follower.on_message("a", _heartbeat(leader, "b"))
    assert leader.wal.flushes == 0
    assert follower.wal.flushes == 1 and follower.outbox[0][1]["type"] == ANSWER
    leader.send("b", {"type": "request_vote", "term": 4})
    assert leader.wal.flushes == 1
    leader.replica.leads = False  # deposed: an AppendEntries it still sends is flushed first
    _heartbeat(leader, "b")
    assert leader.wal.flushes == 2
