"""Delayed, repeated and conflicting AppendEntries against the real adapter (controller/raft.py).

One real RaftNode (pysyncobj, the LMDB WAL, a state store) follows a leader that is this test: it
has one peer, at an address nobody listens on, so it never stands for election (pysyncobj starts
one only while connected to someone), and the test hands its transport each message in the tick
thread, as a message from that peer arrives, and records the answers it sends. The entries are
pysyncobj no-ops of the terms the test picks: pysyncobj applies them (the applied index moves)
without calling XCE's apply. One test runs two real replicas instead and replays the AppendEntries
their leader sent.
"""

from __future__ import annotations

import contextlib
import pickle
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import wait_until
from pysyncobj.node import TCPNode
from pysyncobj.transport import TCPTransport

from controller import fail_stop, pysyncobj_internals
from controller.raft import SUCCESS, RaftNode, RaftSettings
from controller.raft_snapshot import entry_json
from controller.raft_wal import LmdbJournal
from controller.store import StateStore
from ops.local_cluster import free_ports
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

NO_OP = bytes([1])  # pysyncobj's _COMMAND_TYPE.NO_OP
MEMBERSHIP = bytes([2])
CLUSTER = "solo"
TESTS = Path(__file__).resolve().parent


class Follower:
    def __init__(self, data: Path, patch: Callable[[object, str, object], None] = setattr) -> None:
        own, peer = (f"127.0.0.1:{port}" for port in free_ports(2))
        self.leader = TCPNode(peer)
        self.answers: list[dict[str, Any]] = []
        send = TCPTransport.send

        def recording(transport: Any, to: Any, message: Any) -> bool:
            if isinstance(message, dict) and message.get("type") == "next_node_idx":
                self.answers.append(message)
            return bool(send(transport, to, message))

        patch(TCPTransport, "send", recording)  # under DurableTransport.send: the answers as they go out
        self.store = StateStore(data / "state", CLUSTER)
        self.raft = RaftNode(own, [own, peer], data, "pw", self.store)
        self.transport = pysyncobj_internals.transport_of(self.raft._replica)

    def deliver(self, message: dict[str, Any]) -> list[dict[str, Any]]:
        """`message` arrives from the leader; the answers it got."""
        before = len(self.answers)
        self.in_tick_thread(lambda: self.transport.on_message(self.leader, message))
        return self.answers[before:]

    def in_tick_thread(self, action: Callable[[], object]) -> None:
        _in_tick_thread(self.raft, action)

    def entries(self) -> list[tuple[int, int]]:
        return [(index, term) for _, index, term in self.raft._wal[:]]

    def applied(self) -> int:
        return int(self.raft._replica.raftLastApplied)

    def members(self) -> set[str]:
        return {str(node.address) for node in self.raft._replica.otherNodes}

    def close(self) -> None:
        self.raft.close()
        self.store.close()


@pytest.fixture
def follower(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Follower]:
    node = Follower(tmp_path, monkeypatch.setattr)
    try:
        yield node
    finally:
        node.close()


def append(term: int, prev: tuple[int, int], entries: list[tuple[int, int]], commit: int,
           commands: dict[int, bytes] | None = None) -> dict[str, Any]:
    """An AppendEntries as pysyncobj's leader sends it: entries are (command, index, term)."""
    commands = commands or {}
    return {"type": "append_entries", "term": term, "commit_index": commit, "prevLogIdx": prev[0],
            "prevLogTerm": prev[1], "entries": [(commands.get(i, NO_OP), i, t) for i, t in entries]}


def success(next_index: int, term: int) -> dict[str, Any]:
    return {"type": "next_node_idx", "next_node_idx": next_index, "reset": False, "success": True,
            "term": term}


def of_term(term: int, first: int, last: int) -> list[tuple[int, int]]:
    return [(index, term) for index in range(first, last + 1)]


def take_ten_and_apply_eight(node: Follower) -> list[tuple[int, int]]:
    """Entries 2-10 of term 1 after pysyncobj's own first entry (1, term 0); 8 committed and applied."""
    first = append(1, (1, 0), of_term(1, 2, 10), commit=1)
    assert node.deliver(first) == [success(11, 1)]
    assert node.deliver(append(1, (10, 1), [], commit=8)) == [success(11, 1)]
    wait_until(lambda: node.applied() == 8, "entries up to 8 applied", timeout_s=10)
    return node.entries()


def test_a_repeated_or_delayed_append_entries_leaves_the_follower_log_as_it_was(follower: Follower) -> None:
    """pysyncobj alone cuts the log after the previous entry of any message that finds it longer:
    each of these would have removed entries up to 10, 8 of them applied."""
    log = take_ten_and_apply_eight(follower)
    assert log == [(1, 0), *of_term(1, 2, 10)]
    late = [
        append(1, (1, 0), of_term(1, 2, 10), commit=1),  # the first message again
        append(1, (4, 1), [], commit=3),  # a heartbeat from when the leader thought it had sent 4
        append(1, (4, 1), of_term(1, 5, 6), commit=5),  # a resend of 5-6
    ]
    for message in late:
        last = message["prevLogIdx"] + len(message["entries"])
        assert follower.deliver(message) == [success(last + 1, 1)]  # what the message verified, no more
        assert follower.entries() == log
    assert follower.applied() == 8
    assert follower.raft.status().commit_index == 8  # a late message's commit index lowers nothing


def test_the_commit_index_covers_only_entries_the_message_verified(follower: Follower) -> None:
    """Entries 6-8 here are a deposed leader's (term 1), never committed; the new leader (term 2) has
    its own at 6-9 and has committed them. Its heartbeat that matches at 5 must not commit the stale
    6-8 (pysyncobj: min(leader's commit 9, log end 8))."""
    follower.deliver(append(1, (1, 0), of_term(1, 2, 8), commit=3))
    wait_until(lambda: follower.applied() == 3, "entries up to 3 applied", timeout_s=10)
    assert follower.deliver(append(2, (5, 1), [], commit=9)) == [success(6, 2)]
    assert follower.raft.status().commit_index == 5
    assert follower.deliver(append(2, (5, 1), of_term(2, 6, 9), commit=9)) == [success(10, 2)]
    assert follower.entries() == [(1, 0), *of_term(1, 2, 5), *of_term(2, 6, 9)]
    wait_until(lambda: follower.applied() == 9, "entries up to 9 applied", timeout_s=10)


def test_a_conflict_past_the_applied_entries_replaces_the_suffix_and_undoes_its_membership_change(
        follower: Follower) -> None:
    """Entry 9 of the deposed leader adds a member; Raft takes a configuration from the log, so the
    member counts while the entry is there (whatever a late message of its term says) and stops
    counting when a conflict removes it."""
    added = f"127.0.0.1:{free_ports(1)[0]}"
    change = {9: MEMBERSHIP + pickle.dumps(["add", added])}
    follower.deliver(append(1, (1, 0), of_term(1, 2, 10), commit=6, commands=change))
    wait_until(lambda: follower.applied() == 6, "entries up to 6 applied", timeout_s=10)
    assert added in follower.members()
    follower.deliver(append(1, (3, 1), of_term(1, 4, 7), commit=6))  # late: pysyncobj would undo the add
    assert added in follower.members() and len(follower.entries()) == 10
    assert follower.deliver(append(2, (7, 1), of_term(2, 8, 8), commit=6)) == [success(9, 2)]
    assert follower.entries() == [(1, 0), *of_term(1, 2, 7), (8, 2)]
    assert added not in follower.members()
    assert follower.applied() == 6


def test_a_chunked_append_entries_is_dropped_unanswered(follower: Follower) -> None:
    """pysyncobj's chunks of one large entry would reach its append path without a plan; our leaders
    never send them (entries stay below APPEND_ENTRIES_BYTES)."""
    log = take_ten_and_apply_eight(follower)
    chunk = {**append(1, (2, 1), [], commit=8), "transmission": "finish",
             "data": pickle.dumps((NO_OP, 3, 1))}
    del chunk["entries"]
    assert follower.deliver(chunk) == []
    assert follower.entries() == log


def test_a_removal_without_a_plan_stops_the_replica(follower: Follower,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The journal's guard: a message that reached pysyncobj's append path past the adapter (here handed
    to pysyncobj directly) and would remove entries is stopped before anything is removed."""
    stops = _record_fail_stops(monkeypatch)
    log = take_ten_and_apply_eight(follower)
    replica = follower.raft._replica

    def bypass(node: object, message: dict[str, Any]) -> None:
        pysyncobj_internals.receive_unchecked(replica, node, message)

    with pytest.raises(_Stopped):
        follower.in_tick_thread(lambda: bypass(follower.leader, append(1, (9, 1), [], commit=8)))
    assert "entries from 10 would be removed; the AppendEntries plan allowed None" in stops[0]
    with pytest.raises(_Stopped):
        follower.in_tick_thread(lambda: bypass(follower.leader, append(1, (4, 1), [], commit=8)))
    assert "entries from 5 would be removed, and 8 is applied" in stops[1]
    assert follower.entries() == log


def test_a_conflict_at_an_applied_entry_stops_the_replica_with_exit_70(tmp_path: Path) -> None:
    """The real fail-stop, in a process of its own: a leader of term 2 replaces entry 6, applied."""
    path = [str(TESTS), str(TESTS.parent)]  # this module, and conftest's
    run = subprocess.run([sys.executable, "-c", f"import sys; sys.path[:0] = {path!r}; "
                          f"import test_raft_append_entries as t; t.conflict_at_applied({str(tmp_path)!r})"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == fail_stop.FAIL_STOP_EXIT, run.stderr[-2000:]
    assert "FATAL: following 127.0.0.1:" in run.stderr
    assert "its entry 6 conflicts with this replica's, which is applied (last applied 8)" in run.stderr
    wal = LmdbJournal(tmp_path / "wal")
    assert [(i, t) for _, i, t in wal[:]] == [(1, 0), *of_term(1, 2, 10)]  # the WAL as it was
    wal.close()


def conflict_at_applied(data: str) -> None:
    """The child of the test above."""
    node = Follower(Path(data))
    take_ten_and_apply_eight(node)
    node.deliver(append(2, (5, 1), of_term(2, 6, 7), commit=8))
    raise SystemExit("still running after a conflict at an applied entry")


def test_a_leader_counts_no_answer_of_another_term(follower: Follower) -> None:
    """An answer verified the log the leader had in the term it was sent in. pysyncobj's answers name
    no term; ours do, and a leader drops one of another term (it would count it in its matchIndex)."""
    replica = follower.raft._replica
    follower.in_tick_thread(lambda: pysyncobj_internals.become_leader(replica, 3))
    match = pysyncobj_internals.match_index(replica)
    follower.in_tick_thread(lambda: follower.transport.on_message(follower.leader, success(2, 2)))
    assert match[follower.leader] == 0
    follower.in_tick_thread(lambda: follower.transport.on_message(follower.leader, success(2, 3)))
    assert match[follower.leader] == 1


def test_append_entries_captured_from_a_real_leader_and_replayed_change_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Two real replicas; every AppendEntries with entries the leader sends is captured, and once
    the follower has applied everything they all arrive again, the oldest last (pysyncobj alone leaves
    the log cut after that one's entries). The follower's log and applied index stay; the leader
    still commits with it."""
    captured: list[dict[str, Any]] = []
    send = TCPTransport.send

    def capturing(transport: Any, to: Any, message: Any) -> bool:
        if isinstance(message, dict) and message.get("type") == "append_entries" and message.get("entries"):
            captured.append(message)
        return bool(send(transport, to, message))

    monkeypatch.setattr(TCPTransport, "send", capturing)
    with _two_replicas(tmp_path) as (leader, follower):
        for i in range(5):
            _propose(leader, _submit(i))
        done = leader.status().applied_index
        wait_until(lambda: follower.status().applied_index == done, "the follower applies everything", 10)
        before = list(follower._wal[:])
        mine = [m for m in captured if m["term"] == leader.status().term]
        assert len(mine) >= 5, mine
        transport, sender = pysyncobj_internals.transport_of(follower._replica), TCPNode(leader.self_address)
        for message in reversed(mine):
            _in_tick_thread(follower, lambda m=message: transport.on_message(sender, m))
        assert list(follower._wal[:]) == before
        assert follower.status().applied_index == done
        _propose(leader, _submit(9))  # a majority of two: the follower still answers right
        assert "truncating already-applied" not in caplog.text


def test_a_commit_rides_on_the_next_append_entries_not_a_round_of_its_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two real replicas, entries proposed one after another: each new commit index reaches the
    follower on the AppendEntries of the next entry (or a heartbeat), not on a round the leader
    sends only for it after applying (pysyncobj's own, with appendEntriesUseBatch off, sent one
    per commit). Heartbeats are slow here, and commit_notice_s nearly as slow, so that on a busy
    machine (an entry proposed only after the last one applied) neither carries the commits."""
    sent: list[dict[str, Any]] = []
    send = TCPTransport.send

    def capturing(transport: Any, to: Any, message: Any) -> bool:
        if isinstance(message, dict) and message.get("type") == "append_entries":
            sent.append(message)
        return bool(send(transport, to, message))

    monkeypatch.setattr(TCPTransport, "send", capturing)
    slow = RaftSettings(heartbeat_s=0.5, election_min_s=1.6, election_max_s=2.0, leader_fallback_s=5.0,
                        commit_notice_s=0.45)
    slow.check()
    with _two_replicas(tmp_path, slow) as (leader, follower):
        first = len(sent)
        proposed = 20
        for i in range(proposed):
            _propose(leader, _submit(i))
        term = leader.status().term
        carried, alone = 0, 0
        for message in sent[first:]:
            if message["term"] != term or message["commit_index"] <= carried:
                continue
            carried = message["commit_index"]
            alone += not message.get("entries")  # a new commit index, and nothing else to send
        assert carried >= leader.status().commit_index - 1, (carried, leader.status())
        assert alone < proposed // 2, f"{alone} of {proposed} commits went out on a round of their own"
        done = leader.status().applied_index
        wait_until(lambda: follower.status().applied_index == done, "the follower applies everything", 10)


@contextlib.contextmanager
def _two_replicas(tmp_path: Path,
                  settings: RaftSettings | None = None) -> Iterator[tuple[RaftNode, RaftNode]]:
    """(leader, follower) of two real replicas, the cluster's first entry committed; both closed after."""
    addresses = [f"127.0.0.1:{port}" for port in free_ports(2)]
    stores = [StateStore(tmp_path / f"r{k}" / "state", CLUSTER) for k in range(2)]
    nodes = [RaftNode(address, addresses, tmp_path / f"r{k}", "pw", store, settings)
             for k, (address, store) in enumerate(zip(addresses, stores, strict=True))]
    try:
        leader = wait_until(lambda: next((n for n in nodes if n.ready_to_serve()), None), "a leader", 15)
        _propose(leader, log.Entry(init=log.InitCluster(cluster_id=CLUSTER, config_digest="d",
                                                        queues=[api.Queue(name="normal")])))
        yield leader, next(n for n in nodes if n is not leader)
    finally:
        for node, store in zip(nodes, stores, strict=True):
            node.close()
            store.close()


def _propose(node: RaftNode, entry: log.Entry) -> None:
    done = threading.Event()
    errors: list[int] = []
    entry.stamp_ms = 1_700_000_000_000
    node.propose(entry.SerializeToString(), lambda result, error: (errors.append(error), done.set()))
    assert done.wait(10) and errors == [SUCCESS], errors


def _submit(i: int) -> log.Entry:
    request = api.SubmitJobsRequest(request_id=f"r{i}", jobs=[api.JobSpec(command=["true"])])
    return log.Entry(submit=log.SubmitBatch(requests=[request]))


def _in_tick_thread(node: RaftNode, action: Callable[[], object]) -> None:
    """Run `action` in pysyncobj's tick thread, where messages are handled, and wait for it."""
    done = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        try:
            action()
        except BaseException as exc:  # a fail-stop a test turned into an exception
            failure.append(exc)
        finally:
            done.set()

    node._tick_tasks.append(run)
    assert done.wait(10), "the tick thread did not run the task"
    if failure:
        raise failure[0]


class _Stopped(Exception):
    pass


def _record_fail_stops(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    stops: list[str] = []

    def record(exc: BaseException, doing: str = "") -> None:
        stops.append(f"{doing}: {exc}")
        raise _Stopped(stops[-1])

    monkeypatch.setattr(fail_stop, "fail_stop", record)
    return stops


def leader_snapshot(tmp_path: Path, follower: Follower, last: tuple[bytes, int, int]) -> bytes:
    """A snapshot file as a leader sends it, ending at entry `last` (command, index, term)."""
    source = StateStore(tmp_path / "leader-state", CLUSTER)
    snapshot = tmp_path / "leader.snapshot"
    with open(snapshot, "wb") as out:
        source.write_snapshot(out, {"last": entry_json(last), "prev": entry_json((NO_OP, last[1] - 1, 1)),
                                    "cluster": sorted(follower.members())})
    source.close()
    return snapshot.read_bytes()


def in_parts(body: bytes, size: int, term: int = 1, commit: int = 8) -> list[dict[str, Any]]:
    """The snapshot's messages as pysyncobj's leader sends them: parts of `size` bytes, then an empty last."""
    parts = [(body[at:at + size], at == 0, False) for at in range(0, len(body), size)]
    return [{"type": "append_entries", "term": term, "commit_index": commit, "serialized": part}
            for part in [*parts, (b"", False, True)]]


@pytest.mark.parametrize("last", [(NO_OP, 5, 1), (NO_OP * 100_000, 9, 1)],
                         ids=["applied", "held-large-header"])
def test_a_snapshot_whose_last_entry_the_replica_holds_leaves_its_log_as_it_was(
        follower: Follower, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        last: tuple[bytes, int, int]) -> None:
    """pysyncobj clears the whole log to install a snapshot. One at entry 5 arriving after the replica
    took entries to 10 and applied 8 (a delayed or repeated one) would drop acknowledged entries 9
    and 10; so would one at entry 9 (held, not applied), whose header (a large last command) spans
    several parts. Raft's rule keeps the log after the snapshot's last entry: nothing is installed,
    and the answer, once, covers the log to that entry."""
    stops = _record_fail_stops(monkeypatch)
    log = take_ten_and_apply_eight(follower)
    messages = in_parts(leader_snapshot(tmp_path, follower, last), 16_384)
    answers = [answer for message in messages for answer in follower.deliver(message)]
    assert not stops
    assert answers == [success(last[1] + 1, 1)]
    assert follower.entries() == log
    wait_until(lambda: follower.applied() == 8, "entries up to 8 still applied", timeout_s=10)
    assert follower.raft.status().commit_index == 8  # the snapshot's commit index lowers nothing
    # and the leader's next entries go on from the log as it is
    assert follower.deliver(append(1, (10, 1), of_term(1, 11, 11), commit=10)) == [success(12, 1)]
    wait_until(lambda: follower.applied() == 10, "entries up to 10 applied", timeout_s=10)


def test_a_snapshot_ending_at_an_entry_of_another_term_is_installed(
        follower: Follower, tmp_path: Path) -> None:
    """The log holds entry 9 of term 1, not applied; the leader's snapshot ends at entry 9 of term 2:
    the log conflicts, so Raft discards it and the snapshot is installed."""
    take_ten_and_apply_eight(follower)
    answers = [a for m in in_parts(leader_snapshot(tmp_path, follower, (NO_OP, 9, 2)), 16_384, term=2)
               for a in follower.deliver(m)]
    assert answers == [success(10, 2)]
    assert follower.entries() == [(8, 1), (9, 2)]
    assert follower.applied() == 9


def test_a_stale_snapshot_reaching_pysyncobj_stops_the_replica_instead_of_clearing_it(
        follower: Follower, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The last resort, past the transport (which drops such a snapshot): installing one at entry 5
    after the replica took entries to 10 and applied 8 would clear acknowledged entries; the replica
    stops instead, its log as it was."""
    stops = _record_fail_stops(monkeypatch)
    log = take_ten_and_apply_eight(follower)
    replica = follower.raft._replica
    guard = follower.transport.guard
    for message in in_parts(leader_snapshot(tmp_path, follower, (NO_OP, 5, 1)), 1 << 30):
        def unchecked(message: dict[str, Any] = message) -> None:
            guard.installing = bool(message["serialized"][2])
            try:
                pysyncobj_internals.receive_unchecked(replica, follower.leader, message)
            finally:
                guard.installing = False
        follower.in_tick_thread(unchecked)  # pysyncobj logs the loader's exception and goes on
    assert stops and "a snapshot at entry 5 from the leader, and this replica holds entries to 10, " \
        "applied to 8: installing it would clear acknowledged entries" in stops[0], stops
    assert follower.entries() == log
