"""What a follower does with an AppendEntries: Raft's receiver rules, as a plan.

Theory of operation. Raft (Figure 2, AppendEntries, receiver steps 2-5) says:
refuse the message unless the log holds its previous entry (index and
term); then, for each of its entries, keep one the log already holds (same
index, same term), and at the first conflict (same index, another term)
delete that entry and everything after it; append what is new; and raise the
commit index to the leader's, but never past the last entry the message
itself covered. A message whose entries are all present therefore changes
nothing, however late or often it arrives; the log holds entries past the
message only if they are newer than it, and they stay.

pysyncobj 0.3.17 instead deletes everything after the previous entry on
every message that finds its log longer, and re-appends the message's
entries: a delayed or repeated AppendEntries shortens the log below entries
the replica acknowledged and applied. Its commit index is the leader's,
bounded by the log's end, which covers entries the message never vouched
for. The Raft adapter (raft.py) therefore hands each AppendEntries here
first and passes pysyncobj only what the plan says: the entries not yet
present, after the last one that is, and the commit index the message
justifies. A conflict at or below the last applied entry means a committed
entry would be replaced (a Raft safety violation somewhere): the plan says
so, and the replica stops instead of diverging. The protocol simulation
(tests/protocol_sim/raft.py) replicates through the same function.

The plan's answer to the leader is pysyncobj's: on success the next index
after the message's last entry (what the log now verifiably shares with the
leader, no more); on a refusal, the log's end + 1 when the previous index is
outside the log, the previous index itself when its term differs.

A snapshot from the leader follows Raft's InstallSnapshot rule (receiver
step 6): if the replica has applied the snapshot's last entry, or its log
holds that entry with the same term, the snapshot adds nothing; the entries
after it stay and the answer covers the log up to that entry
(`snapshot_is_held`). pysyncobj would instead clear the whole log to install
it, so the transport drops such a snapshot before pysyncobj sees a byte.

Pure: no I/O, no clock, no pysyncobj.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


class Log(Protocol):
    """A replica's log as the plan reads it: the indexes it holds and the term of each."""

    def first_index(self) -> int: ...

    def last_index(self) -> int: ...

    def term_at(self, index: int) -> int:
        """The term of entry `index`, first_index() <= index <= last_index()."""
        ...


@dataclass(frozen=True)
class AppendEntries:
    """What the plan needs of a message: its previous entry, its entries' (index, term), in order,
    and the leader's commit index. The message's term was checked before (an older term is ignored)."""

    prev_index: int
    prev_term: int
    entries: Sequence[tuple[int, int]]
    leader_commit: int

    @property
    def last_index(self) -> int:
        return self.prev_index + len(self.entries)


@dataclass(frozen=True)
class Malformed:
    """Not a message a Raft leader sends (its entries do not follow its previous entry one by one)."""

    why: str


@dataclass(frozen=True)
class Reject:
    """The log does not hold the previous entry: nothing changes; the answer is failure, with where
    the leader should try next."""

    next_index: int


@dataclass(frozen=True)
class Accept:
    """The previous entry matches. The first `present` entries of the message are in the log already
    and stay; the log keeps everything below `truncate_from` (None: everything) and takes the
    message's entries from position `present` on, whose previous entry is (prev_index, prev_term)."""

    present: int
    prev_index: int
    prev_term: int
    truncate_from: int | None
    commit_index: int  # min(leader's commit index, last_verified): never past what the message covers
    last_verified: int  # the message's last entry: the logs agree up to here (the answer is this + 1)

    @property
    def next_index(self) -> int:
        return self.last_verified + 1


@dataclass(frozen=True)
class RemovesApplied:
    """The first conflict is at or below the last applied entry: replacing it would change what this
    replica's state machine already holds. The replica stops (fail-stop)."""

    index: int
    last_applied: int


Plan = Malformed | Reject | Accept | RemovesApplied


def plan_append(log: Log, message: AppendEntries, last_applied: int) -> Plan:
    """Raft's rule for `message` against `log` (module docstring)."""
    entries = message.entries
    expected = range(message.prev_index + 1, message.last_index + 1)
    if any(index != want for (index, _), want in zip(entries, expected, strict=True)):
        return Malformed(f"entries {[i for i, _ in entries][:4]}... do not follow entry {message.prev_index}")
    first, last = log.first_index(), log.last_index()
    if not first <= message.prev_index <= last:
        return Reject(next_index=last + 1)
    if log.term_at(message.prev_index) != message.prev_term:
        return Reject(next_index=message.prev_index)
    present = _present(log, entries, last)
    prev_index, prev_term = entries[present - 1] if present else (message.prev_index, message.prev_term)
    conflict = entries[present][0] if present < len(entries) and entries[present][0] <= last else None
    if conflict is not None and conflict <= last_applied:
        return RemovesApplied(conflict, last_applied)
    return Accept(present=present, prev_index=prev_index, prev_term=prev_term, truncate_from=conflict,
                  commit_index=min(message.leader_commit, message.last_index),
                  last_verified=message.last_index)


def _present(log: Log, entries: Sequence[tuple[int, int]], last: int) -> int:
    """How many of `entries`, from the first, the log holds (same index, same term)."""
    for position, (index, term) in enumerate(entries):
        if index > last or log.term_at(index) != term:
            return position
    return len(entries)


def snapshot_is_held(log: Log, last_index: int, last_term: int, last_applied: int) -> bool:
    """Whether a snapshot ending at entry `last_index` of `last_term` adds nothing to this replica
    (module docstring): it applied that entry (committed entries are the same everywhere), or its
    log holds it with the same term (Raft's log matching: then every entry before it matches too)."""
    if last_index <= last_applied:
        return True
    return log.first_index() <= last_index <= log.last_index() and log.term_at(last_index) == last_term
