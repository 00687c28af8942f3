"""The Raft transport: what every message to and from a peer passes through.

Theory of operation. pysyncobj sends and receives through its TCP transport; ours
(`DurableTransport`) stands in front of it:
- Sending: the WAL is flushed before any message but a leader's AppendEntries leaves this node (an
  acknowledgement never covers an entry not on disk; the leader counts itself as holding its
  entries only after its own flush: pysyncobj_internals.FlushedTicks); AppendEntries and their
  answers are counted for ReadIndex (read_index.py), and each AppendEntries carries a sequence
  number (`SEQUENCE`), which the answer sent while handling it repeats; an answer carries the term
  it was sent in (pysyncobj's carry none).
- Receiving an AppendEntries: Raft's receiver rule (raft_append.py) plans it before pysyncobj sees
  it. pysyncobj cuts the log after the message's previous entry whenever the log is longer,
  matching or not, so a delayed or repeated message removed entries the replica had acknowledged
  and applied; and it raised the commit index over entries the message never covered. pysyncobj
  gets only the entries not yet present, after the last one that is, with the commit index the
  message justifies; a message whose entries are all present reaches it without them, and the
  transport answers as pysyncobj would (the next index after the message's last entry). A conflict
  at an applied entry stops the replica (fail-stop), and so does any removal pysyncobj attempts
  beyond the plan (`RemovalGuard`, in the journal's path). Chunks of one large entry, which our
  leaders never send, are dropped.
- Receiving a snapshot from the leader (in parts): Raft's InstallSnapshot rule (raft_append's
  `snapshot_is_held`) is decided from its header, in its first parts, before pysyncobj sees any.
  pysyncobj would clear the whole log to install it; one whose last entry this replica applied or
  holds (a repeated or delayed one, or a second sent while the first was on its way) is dropped,
  the log after it kept, and the answer covers the log to that entry.
- Receiving an answer: a leader takes none of another term (it would count one sent in its
  earlier term, about the log it had then, in its matchIndex now).
- A command a follower forwards is refused: only a leader's own XCE code proposes.
- `xce_applying` from a follower of this term busy applying counts as an answer for pysyncobj's
  step down after leader_fallback_s (not for ReadIndex).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeGuard

from pysyncobj import FAIL_REASON
from pysyncobj.monotonic import monotonic

from controller import fail_stop
from controller.fail_stop import LogRemovalRefused
from controller.pysyncobj_internals import (
    ANSWER,
    APPEND_ENTRIES,
    APPLY_COMMAND,
    APPLY_COMMAND_RESPONSE,
    CHUNK,
    COMMIT_INDEX,
    ENTRIES,
    PREV_INDEX,
    PREV_TERM,
    SNAPSHOT_PART,
    Transport,
    heard_from,
    is_leader,
    send_answer,
)
from controller.raft_append import (
    Accept,
    AppendEntries,
    Malformed,
    Reject,
    RemovesApplied,
    plan_append,
    snapshot_is_held,
)
from controller.raft_snapshot_arrival import SnapshotArrival
from controller.raft_wal import LmdbJournal
from controller.read_index import ReadIndex

log = logging.getLogger(__name__)

APPLYING = "xce_applying"  # a follower of this term, busy applying: alive
KEEPALIVE = "xce_keepalive"  # keeps a silent connection from timing out
SEQUENCE = "xce_seq"  # an AppendEntries' number for ReadIndex, repeated by its answer


class RemovalGuard:
    """The last word on removing entries from the end of the log, which pysyncobj does through the
    journal (LmdbJournal.deleteEntriesFrom): allowed only from the index where the plan of the
    AppendEntries being handled found a conflict, and never of an applied entry. Anything else means
    a message reached pysyncobj's append path without its plan (a bug here); letting pysyncobj carry on
    without the removal would leave it appending over entries it meant to replace, so either way the
    replica stops (fail-stop), its WAL as it was."""

    def __init__(self) -> None:
        self.allowed: int | None = None  # set only while pysyncobj handles a planned AppendEntries
        self.last_applied: Callable[[], int] = lambda: 0
        self.installing = False  # while pysyncobj takes the last chunk of a snapshot from the leader

    def check(self, first_removed: int) -> None:
        applied = self.last_applied()
        if first_removed <= applied:
            fail_stop.fail_stop(LogRemovalRefused(
                f"entries from {first_removed} would be removed, and {applied} is applied: a committed "
                "entry would be replaced"), "removing conflicting Raft log entries")
        if first_removed != self.allowed:
            fail_stop.fail_stop(LogRemovalRefused(
                f"entries from {first_removed} would be removed; the AppendEntries plan allowed "
                f"{self.allowed}"), "removing conflicting Raft log entries")


class WalLog:
    """The WAL as raft_append.Log: pysyncobj's log always holds at least one entry (its first no-op,
    or a snapshot's last two)."""

    def __init__(self, wal: LmdbJournal) -> None:
        self._wal = wal
        self._first = int(wal[0][1])

    def first_index(self) -> int:
        return self._first

    def last_index(self) -> int:
        return int(self._wal[-1][1])

    def term_at(self, index: int) -> int:
        return int(self._wal[index - self._first][2])


def as_request(message: dict[str, Any]) -> AppendEntries | None:
    """The plan's view of pysyncobj's message; None if it is not the shape pysyncobj sends."""
    entries = message.get(ENTRIES, [])
    prev_index, prev_term = message.get(PREV_INDEX), message.get(PREV_TERM)
    commit = message.get(COMMIT_INDEX)
    if not (_is_int(prev_index) and _is_int(prev_term) and _is_int(commit)) or not isinstance(entries, list):
        return None
    if not all(isinstance(e, tuple) and len(e) == 3 and _is_int(e[1]) and _is_int(e[2]) for e in entries):
        return None  # pysyncobj sends a list of its log's (command, index, term) tuples
    return AppendEntries(prev_index, prev_term, [(e[1], e[2]) for e in entries], commit)


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _kind(message: Any) -> Any:
    return message.get("type") if isinstance(message, dict) else None


class DurableTransport(Transport):
    """Flushes the WAL before any Raft message but a leader's AppendEntries leaves this node;
    counts AppendEntries and their answers for ReadIndex; hands pysyncobj each AppendEntries as
    Raft's rule plans it, and an answer only of the term it leads in; refuses commands forwarded by
    followers. pysyncobj makes the transport itself, from a class: `durable_transport` binds one to
    a replica's parts."""

    wal: LmdbJournal
    reads: ReadIndex
    guard: RemovalGuard
    arrival: SnapshotArrival | None = None  # the snapshot whose parts are arriving
    answering: tuple[Any, int] | None = None  # (leader, its AppendEntries' number) while handling one

    def send(self, node: Any, message: Any) -> bool:
        kind = _kind(message)
        if kind != APPEND_ENTRIES or not is_leader(self.replica):
            self.wal.flush(lazy_commit_index=True)
        # A leader's AppendEntries leaves before its own entries are durable: the followers write
        # theirs while it writes its own (Raft allows it: Ongaro's thesis, 10.2.1). The leader
        # counts itself as holding its entries only at the top of a tick, after the WAL's flush
        # (FlushedTicks, raft.py's _Replica); an entry lost in a crash before that flush was
        # never committed, and the followers that hold it keep it or lose it by Raft's rule like
        # any entry of a deposed leader.
        if kind == APPEND_ENTRIES:
            if self.connected(node):  # it goes out on this connection
                message = {**message, SEQUENCE: self.reads.sent(node)}
        elif kind == ANSWER:
            # pysyncobj's answer names no term; a leader would count the answer to an AppendEntries
            # of its earlier term, which verified the log it had then, in its matchIndex now. Every
            # answer is sent while handling the message it answers, whose term is this node's now.
            message = {**message, "term": self.replica.raftCurrentTerm}
            if self.answering is not None and self.answering[0] == node:
                message[SEQUENCE] = self.answering[1]
        return bool(super().send(node, message))

    def on_message(self, node: Any, message: Any) -> None:
        kind = _kind(message)
        handler = _RECEIVERS.get(kind)
        sequence = message.get(SEQUENCE) if kind == APPEND_ENTRIES else None
        self.answering = (node, sequence) if _is_int(sequence) else None
        try:
            if handler is None or handler(self, node, message):
                self.deliver(node, message)
        finally:
            self.answering = None

    def _answer(self, node: Any, message: dict[str, Any]) -> bool:
        # One answer per AppendEntries, whatever its term: counts stay aligned (read_index.py).
        sequence = message.get(SEQUENCE)
        self.reads.answered(node, sequence if _is_int(sequence) else None)
        term = message.get("term")  # absent from a replica of an earlier build
        return term is None or term == self.replica.raftCurrentTerm

    def _command(self, node: Any, message: dict[str, Any]) -> bool:
        # Only a leader's own code proposes (a follower's XCE core proposes nothing); a forwarded
        # command would be appended with no check of ours (a membership change).
        if "request_id" in message:
            self.send(node, {"type": APPLY_COMMAND_RESPONSE, "request_id": message["request_id"],
                             "error": FAIL_REASON.REQUEST_DENIED})
        return False

    def _applying(self, node: Any, message: dict[str, Any]) -> bool:
        replica = self.replica
        if is_leader(replica) and message.get("term") == replica.raftCurrentTerm:
            heard_from(replica, node, monotonic())
        return False

    def _append_entries(self, node: Any, message: dict[str, Any]) -> bool:
        replica = self.replica
        term = message.get("term")
        if not _is_int(term) or term < replica.raftCurrentTerm:
            self.deliver(node, message)  # pysyncobj ignores an earlier term's
            return False
        if PREV_INDEX not in message:
            self._snapshot_part(node, message)
            return False
        # Chunks of one large entry: our leaders never send them (raft.APPEND_ENTRIES_BYTES), and
        # pysyncobj would append the assembled entry without a plan. Dropped unanswered, as if lost.
        request = None if CHUNK in message else as_request(message)
        if request is None:
            log.error("raft: an AppendEntries from %s that no XCE leader sends (%s): dropped", node,
                      "a chunk" if CHUNK in message else "malformed")
            return False
        plan = plan_append(WalLog(self.wal), request, int(replica.raftLastApplied))
        if isinstance(plan, Malformed):
            log.error("raft: an AppendEntries from %s dropped: %s", node, plan.why)
        elif isinstance(plan, Reject):
            self.deliver(node, message)  # pysyncobj refuses it alike, and answers
        elif isinstance(plan, RemovesApplied):
            fail_stop.fail_stop(LogRemovalRefused(
                f"its entry {plan.index} conflicts with this replica's, which is applied (last applied "
                f"{plan.last_applied}): a committed entry would be replaced"), f"following {node}")
        elif plan.present == len(request.entries):
            self._all_present(node, message, plan)
        else:
            self._append_planned(node, message, plan)
        return False

    def _snapshot_part(self, node: Any, message: dict[str, Any]) -> None:
        """A part of a snapshot from the leader (module docstring): held until its header says
        whether this replica takes it; then pysyncobj gets every part (its last installs it:
        raft_snapshot.Snapshots.load) or none (`_keep_log`)."""
        part = message.get(SNAPSHOT_PART)
        if not (isinstance(part, tuple) and len(part) == 3 and isinstance(part[0], bytes)):
            self._to_pysyncobj(node, message)  # not a part (pysyncobj ignores it)
            return
        if part[1]:
            self.arrival = SnapshotArrival()
        arrival = self.arrival
        if part[2]:
            self.arrival = None
        if arrival is None:
            self._to_pysyncobj(node, message)  # no first part: pysyncobj refuses it too
            return
        for verdict, held in arrival.take(message, part[0], bool(part[2]), self._held):
            if verdict == SnapshotArrival.INSTALL:
                self._to_pysyncobj(node, held)
            else:
                self._keep_log(node, held, arrival, answer=verdict == SnapshotArrival.KEEP_ANSWER)

    def _held(self, last_index: int, last_term: int) -> bool:
        return snapshot_is_held(WalLog(self.wal), last_index, last_term, int(self.replica.raftLastApplied))

    def _to_pysyncobj(self, node: Any, message: dict[str, Any]) -> None:
        part = message.get(SNAPSHOT_PART)
        self.guard.installing = isinstance(part, tuple) and len(part) == 3 and bool(part[2])
        try:
            self.deliver(node, message)
        finally:
            self.guard.installing = False

    def _keep_log(self, node: Any, message: dict[str, Any], arrival: SnapshotArrival, answer: bool) -> None:
        """A part of a snapshot this replica holds: pysyncobj gets the message without it, for what
        else it carries (term, leader, election timer), with the commit index it justifies (no
        further than the snapshot's last entry); the answer, once, says the log matches to there."""
        last = arrival.last_index
        commit = message.get(COMMIT_INDEX)
        self.deliver(node, {**message, SNAPSHOT_PART: None,
                            COMMIT_INDEX: min(commit, last) if _is_int(commit) else 0})
        if answer:
            log.info("raft: a snapshot at entry %s from %s dropped: this replica holds that entry "
                     "(log to %s, applied to %s); its log is kept", last, node, self.wal[-1][1],
                     self.replica.raftLastApplied)
            send_answer(self.replica, node, last + 1)

    def _append_planned(self, node: Any, message: dict[str, Any], plan: Accept) -> None:
        self.guard.allowed = plan.truncate_from
        try:
            entries = message[ENTRIES][plan.present:]
            self.deliver(node, {**message, PREV_INDEX: plan.prev_index, PREV_TERM: plan.prev_term,
                                ENTRIES: entries, COMMIT_INDEX: plan.commit_index})
        finally:
            self.guard.allowed = None

    def _all_present(self, node: Any, message: dict[str, Any], plan: Accept) -> None:
        """Nothing to append or remove. Whenever the log is longer than the previous entry,
        pysyncobj's append path would cut it there (and undo the membership changes after it):
        pysyncobj gets the message without its entries, for what else it carries (term, leader,
        election timer, commit index), and the answer is the one it would give."""
        rest = {k: v for k, v in message.items() if k not in (PREV_INDEX, PREV_TERM, ENTRIES)}
        self.deliver(node, {**rest, COMMIT_INDEX: plan.commit_index})
        send_answer(self.replica, node, plan.next_index)

    def on_disconnected(self, node: Any) -> None:
        if node is not None:
            self.reads.disconnected(node)


# Per message type: handle it, and say whether pysyncobj should then have it as it came.
_RECEIVERS: dict[Any, Callable[[DurableTransport, Any, dict[str, Any]], bool]] = {
    APPEND_ENTRIES: DurableTransport._append_entries,
    ANSWER: DurableTransport._answer,
    APPLY_COMMAND: DurableTransport._command,
    APPLYING: DurableTransport._applying,
}


def durable_transport(wal: LmdbJournal, reads: ReadIndex, guard: RemovalGuard) -> type[DurableTransport]:
    """pysyncobj's transport class for one replica, bound to its WAL, ReadIndex and removal guard."""
    return type("DurableTransport", (DurableTransport,), {"wal": wal, "reads": reads, "guard": guard})
