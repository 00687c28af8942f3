"""The simulated replicated log: Raft reduced to what XCE relies on.

Theory of operation. Three replicas each hold a log (entries with their term,
after a compacted prefix), a commit index, an applied index and their own
state tables (controller.tables.MemoryTables, written by the real
controller.fsm.apply). The network between replicas is not simulated message
by message; instead the steps a Raft implementation takes are exposed one at
a time so the simulation can interleave them with everything else:

- `replicate(leader, follower, count)`: one AppendEntries round. The follower
  adopts the leader's term, drops a conflicting uncommitted suffix, takes up
  to `count` entries (a lagging replica takes few), or installs the leader's
  state when the entries it needs were compacted (a snapshot: a copy of the
  tables, as controller/store.py copies the LMDB environment).
- `advance_commit(leader)`: the leader commits the highest index a majority
  stores, but only an entry of its own term (Raft section 5.4.2).
- `elect(candidate, voters)`: a new term; voters must find the candidate's
  log at least as up to date as theirs; the winner appends a no-op (like
  pysyncobj, whose no-op never reaches XCE's apply). An old leader that did
  not vote keeps believing it leads until it hears of the higher term.
- `crash` / `restart`: the log, term, commit index and tables are durable
  (LMDB); a restarted replica re-applies from its last compaction point and
  fsm.apply skips what its tables already hold (C2).

So uncommitted entries are lost when a leader changes before a majority
stored them, and never a committed one: that is the part of Raft the XCE
protocol depends on, and what the invariants check it against.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from controller import fsm
from controller.tables import MemoryTables
from xce.v1 import log_pb2 as log


@dataclass(frozen=True)
class LogEntry:
    term: int
    data: bytes | None  # None: the no-op a new leader appends; fsm.apply never sees it


@dataclass
class Replica:
    rid: int
    up: bool = True
    term: int = 0
    entries: list[LogEntry] = field(default_factory=list)  # after base_index
    base_index: int = 0  # entries up to here are compacted into the tables
    base_term: int = 0
    commit: int = 0
    applied: int = 0
    leading: bool = False  # believes it leads in `term`
    tables: MemoryTables = field(default_factory=MemoryTables)

    def last_index(self) -> int:
        return self.base_index + len(self.entries)

    def entry(self, index: int) -> LogEntry:
        assert self.base_index < index <= self.last_index(), (self.rid, index, self.base_index)
        return self.entries[index - self.base_index - 1]

    def term_at(self, index: int) -> int:
        if index == self.base_index:
            return self.base_term
        return self.entry(index).term

    def last_term(self) -> int:
        return self.term_at(self.last_index())

    def has(self, index: int, term: int) -> bool:
        """This replica stores entry `index` of `term` (a compacted one counts: it was committed)."""
        if index <= self.base_index:
            return True
        return index <= self.last_index() and self.entry(index).term == term


Applied = Callable[[Replica, int, LogEntry, list[log.Result] | None], None]


class RaftCluster:
    def __init__(self, size: int, on_apply: Applied,
                 handlers: Mapping[str, fsm.Handler] = fsm.HANDLERS) -> None:
        self.replicas = [Replica(rid) for rid in range(1, size + 1)]
        self.on_apply = on_apply
        self.handlers = handlers  # apply's table: the real one, or one with an injected bug
        # Ground truth for the checks: index -> entry, recorded when first committed.
        self.committed: dict[int, LogEntry] = {}

    def majority(self) -> int:
        return len(self.replicas) // 2 + 1

    def leaders(self) -> list[Replica]:
        return [r for r in self.replicas if r.up and r.leading]

    # ------------------------------------------------------------ elections

    def eligible_voters(self, candidate: Replica) -> list[Replica]:
        """Up replicas that would grant `candidate` their vote (log at least as up to date)."""
        mine = (candidate.last_term(), candidate.last_index())
        return [r for r in self.replicas if r.up and r is not candidate
                and (r.last_term(), r.last_index()) <= mine]

    def elect(self, candidate: Replica, voters: list[Replica]) -> bool:
        if not candidate.up or candidate.leading or len(voters) + 1 < self.majority():
            return False
        term = max(r.term for r in self.replicas) + 1
        for voter in voters:
            voter.term = term
            voter.leading = False  # a leader that votes has heard of the higher term
        candidate.term = term
        candidate.leading = True
        candidate.entries.append(LogEntry(term, None))
        return True

    # ------------------------------------------------------------ replication

    def replicate(self, leader: Replica, follower: Replica, count: int) -> str:
        """One AppendEntries round; 'stale' when the leader learns it was deposed."""
        assert leader.leading and leader.up and follower.up and follower is not leader
        if follower.term > leader.term:
            leader.term = follower.term
            leader.leading = False
            return "stale"
        follower.term = leader.term
        follower.leading = False
        match = self._match(leader, follower)
        assert match >= follower.commit, "a committed entry would be cut"
        del follower.entries[match - follower.base_index:]
        for index in range(match + 1, min(leader.last_index(), match + count) + 1):
            follower.entries.append(leader.entry(index))
        follower.commit = max(follower.commit, min(leader.commit, follower.last_index()))
        return "ok"

    def _match(self, leader: Replica, follower: Replica) -> int:
        """The last index where both logs agree (Raft's consistency probe); installs
        the leader's snapshot first when the follower needs compacted entries."""
        match = min(leader.last_index(), follower.last_index())
        while True:
            if leader.base_index <= match <= follower.base_index:
                return match  # compacted on the follower, so committed: the logs agree
            if match < leader.base_index:
                self._install_snapshot(leader, follower)
                return follower.base_index
            if leader.term_at(match) == follower.term_at(match):
                return match
            match -= 1

    def _install_snapshot(self, leader: Replica, follower: Replica) -> None:
        follower.tables = copy_tables(leader.tables)
        follower.applied = leader.applied
        follower.base_index = leader.applied
        follower.base_term = leader.term_at(leader.applied)
        follower.entries = []
        follower.commit = max(follower.commit, leader.applied)

    def advance_commit(self, leader: Replica) -> int:
        for index in range(leader.last_index(), leader.commit, -1):
            if index <= leader.base_index or leader.term_at(index) != leader.term:
                break  # only an entry of the leader's own term commits by counting
            if sum(r.has(index, leader.term) for r in self.replicas) >= self.majority():
                for i in range(leader.commit + 1, index + 1):
                    self.committed.setdefault(i, leader.entry(i))
                leader.commit = index
                break
        return leader.commit

    # ------------------------------------------------------------ apply, compaction, crashes

    def apply(self, replica: Replica, upto: int) -> int:
        """Apply committed entries up to `upto`; returns how many."""
        done = 0
        while replica.applied < min(replica.commit, upto):
            index = replica.applied + 1
            entry = replica.entry(index)
            results = fsm.apply(replica.tables, index, entry.data, self.handlers) if entry.data is not None \
                else None
            replica.applied = index
            done += 1
            self.on_apply(replica, index, entry, results)
        return done

    def compact(self, replica: Replica) -> int:
        if replica.applied <= replica.base_index:
            return 0
        dropped = replica.applied - replica.base_index
        replica.base_term = replica.term_at(replica.applied)
        replica.entries = replica.entries[dropped:]
        replica.base_index = replica.applied
        return dropped

    def crash(self, replica: Replica) -> None:
        replica.up = False
        replica.leading = False

    def restart(self, replica: Replica) -> None:
        replica.up = True
        replica.leading = False
        # pysyncobj reloads its last dump and re-applies the log after it;
        # fsm.apply skips every index the durable tables already applied.
        replica.applied = replica.base_index


def copy_tables(tables: MemoryTables) -> MemoryTables:
    return tables.copy()  # (bytes values: a shallow copy of the rows is the snapshot)


def applied_meta(replica: Replica) -> log.Meta:
    return fsm.read_meta(replica.tables)
