"""The simulated replicated log: Raft reduced to what XCE relies on.

Theory of operation. Three replicas each hold a log (entries with their term,
after a compacted prefix), a commit index, an applied index and their own
state tables (controller.tables.MemoryTables, written by the real
controller.fsm.apply). Replicas exchange AppendEntries as pysyncobj's do, one
message at a time, and a follower takes each through the real adapter's
plan (controller/raft_append.py: Raft's receiver rule, as the Raft adapter
runs it before pysyncobj sees the message). The rest is exposed one step at
a time so the simulation can interleave it with everything else:

- `replicate(leader, follower, count)`: one AppendEntries round. The leader
  sends from its next index for the follower (pysyncobj's optimistic one:
  moved past what it sends), up to `count` entries; the follower adopts the
  leader's term and answers as the adapter does; on a refusal the leader
  moves its next index back as pysyncobj does and tries again, or installs
  its state when the entries the follower needs were compacted (a snapshot:
  a copy of the tables, as controller/store.py copies the LMDB environment).
  Every message sent stays on the wire (`sent`, bounded): the simulation's
  faults deliver one again later (`deliver`: delayed, repeated), from a
  leader that may have been deposed since. The leader takes an answer only
  in the term it was sent in (the adapter's rule).
- `advance_commit(leader)`: the leader commits the highest index its
  matchIndex shows a majority stores, but only an entry of its own term
  (Raft section 5.4.2). matchIndex comes from the followers' answers alone,
  so an answer that claimed more than its follower verified would commit an
  entry a majority lacks.
- `elect(candidate, voters)`: a new term; voters must find the candidate's
  log at least as up to date as theirs; the winner appends a no-op (like
  pysyncobj, whose no-op never reaches XCE's apply). An old leader that did
  not vote keeps believing it leads until it hears of the higher term.
- `crash` / `restart`: the log, term, commit index and tables are durable
  (LMDB); a restarted replica re-applies from its last compaction point and
  fsm.apply skips what its tables already hold (C2).

So uncommitted entries are lost when a leader changes before a majority
stored them, and never a committed one: that is the part of Raft the XCE
protocol depends on, and what the invariants check it against. A follower
asked to remove a committed entry records a TypeOK violation (the real one
stops before an applied entry goes: fail-stop).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from controller import fsm
from controller.raft_append import Accept, AppendEntries, Log, Plan, Reject, RemovesApplied, plan_append
from controller.tables import MemoryTables
from xce.v1 import log_pb2 as log

SENT_KEPT = 64  # AppendEntries kept on the wire for the faults to deliver again


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
    # A leader's, per follower (pysyncobj's raftNextIndex and raftMatchIndex): reset when it is elected.
    next_index: dict[int, int] = field(default_factory=dict)
    match_index: dict[int, int] = field(default_factory=dict)

    def first_index(self) -> int:
        return self.base_index  # its term is known (base_term): what pysyncobj's first entry is

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


@dataclass(frozen=True)
class AppendMessage:
    """An AppendEntries on the wire, as a pysyncobj leader sends it."""

    sender: int
    to: int
    term: int
    prev_index: int
    prev_term: int
    entries: tuple[tuple[int, LogEntry], ...]  # (index, entry)
    commit: int

    def request(self) -> AppendEntries:
        terms = [(index, entry.term) for index, entry in self.entries]
        return AppendEntries(self.prev_index, self.prev_term, terms, self.commit)

    def describe(self) -> str:
        span = f"{self.entries[0][0]}-{self.entries[-1][0]}" if self.entries else "none"
        return f"r{self.sender}->r{self.to} term {self.term} after {self.prev_index}, entries {span}"


@dataclass(frozen=True)
class Answer:
    """pysyncobj's next_node_idx, with the term the adapter adds."""

    term: int
    next_index: int
    success: bool
    reset: bool


Applied = Callable[[Replica, int, LogEntry, list[log.Result] | None], None]
AppendRule = Callable[[Log, AppendEntries, int], Plan]


class RaftCluster:
    def __init__(self, size: int, on_apply: Applied,
                 handlers: Mapping[str, fsm.Handler] = fsm.HANDLERS,
                 append_rule: AppendRule = plan_append, violations: list[str] | None = None) -> None:
        self.replicas = [Replica(rid) for rid in range(1, size + 1)]
        self.on_apply = on_apply
        self.handlers = handlers  # apply's table: the real one, or one with an injected bug
        self.append_rule = append_rule  # a follower's: the adapter's plan, or an injected bug's
        # Ground truth for the checks: index -> entry, recorded when first committed.
        self.committed: dict[int, LogEntry] = {}
        self.sent: deque[AppendMessage] = deque(maxlen=SENT_KEPT)
        self.violations = violations if violations is not None else []

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
        # pysyncobj's __onBecomeLeader: every follower's next index just past the log, matching nothing.
        others = [r.rid for r in self.replicas if r is not candidate]
        candidate.next_index = dict.fromkeys(others, candidate.last_index() + 1)
        candidate.match_index = dict.fromkeys(others, 0)
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
        # Each refusal moves the next index back by one or to the follower's end: bounded by the logs.
        for _ in range(2 * (leader.last_index() + follower.last_index()) + 4):
            message = self._append_entries(leader, follower, count)
            if message is None:
                self._install_snapshot(leader, follower)
                continue
            answer = self.deliver(message)
            if answer is None:
                return "stopped"  # the follower fail-stopped (a violation is recorded)
            if answer.success:
                return "ok"
        raise AssertionError(f"r{leader.rid} and r{follower.rid} found no entry they agree on")

    def _append_entries(self, leader: Replica, follower: Replica, count: int) -> AppendMessage | None:
        """What pysyncobj's __sendAppendEntries sends `follower` now (None: the entries it needs are
        compacted: a snapshot). The next index moves past what is sent, before any answer."""
        next_index = leader.next_index[follower.rid]
        if next_index - 1 < leader.base_index:
            return None
        last = min(leader.last_index(), next_index + count - 1)
        entries = tuple((index, leader.entry(index)) for index in range(next_index, last + 1))
        if entries:
            leader.next_index[follower.rid] = last + 1
        message = AppendMessage(leader.rid, follower.rid, leader.term, next_index - 1,
                                leader.term_at(next_index - 1), entries, leader.commit)
        self.sent.append(message)
        return message

    def deliver(self, message: AppendMessage) -> Answer | None:
        """`message` reaches its follower (now, or late: a fault), and the answer its sender; None:
        the follower is down, of a later term (it ignores the message, as pysyncobj does), or stops."""
        follower = self.replicas[message.to - 1]
        if not follower.up or message.term < follower.term:
            return None
        follower.term = message.term
        follower.leading = False
        answer = self._take(follower, message)
        if answer is None:
            return None
        sender = self.replicas[message.sender - 1]
        if sender.up and sender.leading and sender.term == answer.term:
            self._answered(sender, follower.rid, answer)
        return answer

    def _take(self, follower: Replica, message: AppendMessage) -> Answer | None:
        """The follower's side, through the adapter's plan."""
        plan = self.append_rule(follower, message.request(), follower.applied)
        if isinstance(plan, Reject):
            return Answer(follower.term, plan.next_index, success=False, reset=True)
        if isinstance(plan, RemovesApplied):  # the real replica stops, its log as it was
            self.violations.append(f"TypeOK: r{follower.rid} fail-stops: {message.describe()} would replace "
                                   f"entry {plan.index}, applied (up to {plan.last_applied})")
            return None
        assert isinstance(plan, Accept), plan  # our leaders send nothing malformed
        committed = [follower.entry(i) for i in range(follower.base_index + 1, follower.commit + 1)]
        if plan.truncate_from is not None:
            del follower.entries[plan.truncate_from - follower.base_index - 1:]
        for index, entry in message.entries[plan.present:]:
            assert index == follower.last_index() + 1, (follower.rid, index)
            follower.entries.append(entry)
        follower.commit = min(follower.commit, follower.last_index())  # as pysyncobj bounds it, after
        if follower.entries[:len(committed)] != committed:
            self.violations.append(f"TypeOK: r{follower.rid} lost or replaced committed entries (up to "
                                   f"{follower.base_index + len(committed)}; its log now ends at "
                                   f"{follower.last_index()}) on {message.describe()}")
        follower.commit = max(follower.commit, plan.commit_index)
        return Answer(follower.term, plan.next_index, success=True, reset=False)

    @staticmethod
    def _answered(leader: Replica, rid: int, answer: Answer) -> None:
        """pysyncobj's leader on next_node_idx."""
        if answer.reset:
            leader.next_index[rid] = answer.next_index
        if answer.success and leader.match_index[rid] < answer.next_index - 1:
            leader.match_index[rid] = answer.next_index - 1
            leader.next_index[rid] = answer.next_index

    def _install_snapshot(self, leader: Replica, follower: Replica) -> None:
        follower.term = leader.term
        follower.leading = False
        follower.tables = copy_tables(leader.tables)
        follower.applied = leader.applied
        follower.base_index = leader.applied
        follower.base_term = leader.term_at(leader.applied)
        follower.entries = []
        follower.commit = max(follower.commit, leader.applied)
        # pysyncobj: the next index past the snapshot, and the follower's answer (its log's end) matched.
        leader.next_index[follower.rid] = follower.base_index + 1
        leader.match_index[follower.rid] = max(leader.match_index[follower.rid], follower.base_index)

    def advance_commit(self, leader: Replica) -> int:
        for index in range(leader.last_index(), leader.commit, -1):
            if index <= leader.base_index or leader.term_at(index) != leader.term:
                break  # only an entry of the leader's own term commits by counting
            stored = 1 + sum(match >= index for match in leader.match_index.values())
            if stored >= self.majority():
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
