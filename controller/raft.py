"""The Raft adapter: a replicated log of XCE entries on pysyncobj.

Theory of operation. `RaftNode` replicates opaque entry bytes (xce.v1.Entry)
and hands each committed one, with its log index, to an `apply` function
(the state store). pysyncobj frames our bytes in its own pickled tuple; that
framing never leaves the adapter and its peer traffic is encrypted with the
cluster password, which is mandatory. The adapter is this module and its
parts: raft_transport.py (every message to and from a peer), raft_snapshot.py,
raft_connection.py (bounded frames), raft_wal.py (the LMDB journal),
raft_append.py (Raft's AppendEntries rule, pure); pysyncobj's internals are
reached only through pysyncobj_internals.py, which documents each.

What we change about pysyncobj, and why:
- The journal is raft_wal.LmdbJournal, made durable (flush) before any
  message but a leader's AppendEntries leaves this node, and at the start
  and end of every tick. A leader's AppendEntries goes out before its own
  flush, so that its followers write while it writes (one disk flush less
  per commit round); it counts itself towards a commit only at the start
  of a tick, after the flush (pysyncobj_internals.FlushedTicks).
- Snapshots are the state store's LMDB copy, written off the tick thread; a
  snapshot restores only when it is newer than the local state; one from
  the leader whose last entry the replica holds is dropped in the transport,
  the log kept (Raft's rule: raft_snapshot_arrival.py), and one that got past
  it would stop the replica rather than clear acknowledged entries
  (raft_snapshot.py).
- A follower names as its leader only one it is connected to (`leader`),
  and a change of the leader it knows is reported like a change of role.
- A keepalive message every `keepalive_s` to every peer keeps the follower
  to follower connections open: pysyncobj closes a connection silent for
  `connectionTimeout`, and the first vote request after a leader dies would
  otherwise be dropped.
- Every AppendEntries a follower receives goes through Raft's receiver rule
  before pysyncobj sees it, answers carry their term, and forwarded
  commands are refused (raft_transport.py). A conflict at an applied entry,
  or any removal pysyncobj attempts beyond the plan, stops the replica
  (fail-stop, exit 70: fail_stop.py).
- `leaderFallbackTimeout` ~1 s so a cut-off leader steps down quickly.
- A leader tells its followers of a commit with the next AppendEntries it
  sends anyway, not with one of its own right after applying (pysyncobj's,
  with appendEntriesUseBatch off): under load the next entries follow within
  a millisecond or two and carry the new commit index, and that extra
  message was half the AppendEntries a follower handled (and answered) per
  entry. A commit nothing carried for `commit_notice_s` goes out on its own
  (at the tick after that: 10-15 ms on an idle cluster). When followers
  apply moves, what is committed does not; the leader answers sooner (its
  answer no longer waits for the interpreter's lock behind that round).
- Staggered election windows per replica and a 10 ms tick (pysyncobj only
  looks at its election deadline once per tick), so that the survivors of a
  leader kill do not split the vote.
- A follower that sees its leader's connection drop (a killed process's
  sockets are closed by its kernel) moves its election to `leader_lost_s`
  (0.05 s) from then, staggered by its rank among the other voters, instead
  of waiting out the election timeout (0.3-0.7 s after the last heartbeat).
  A leader that is silent but connected (a partition, a stalled host) is
  still found out by the timeout alone. Safety does not depend on when an
  election starts; a connection that drops under a live leader costs one
  early election (pysyncobj has no pre-vote).
- A node stays heard while it applies an entry that takes long (10,000 jobs
  in one submit, on a busy machine, take a second): pysyncobj applies in its
  tick thread, which neither sends nor reads meanwhile, so a leader would miss
  its heartbeats (its followers elect another after 0.3 s) and followers their
  answers (the leader steps down after `leader_fallback_s`). The store calls
  `_pulse` every 64 table operations of an apply; every heartbeat
  period a leader sends its AppendEntries from there, and a follower tells its
  leader it is alive (`xce_applying`, which the leader counts as an answer).

Membership (pysyncobj's dynamic membership: one server at a time, each change
a log entry that takes effect where it is appended). A node runs in one of
three modes, which its replica picks from the committed membership
(controller/membership.py):
- `voter`: a member.
- `learner`: pysyncobj's read-only node. It connects to the members, which
  send it the log (and a snapshot when it is far behind) like a follower, but
  it neither votes nor counts in any majority. A new replica catches up so
  before it becomes a voter.
- `standby`: a voter that never starts an election (its election deadline is
  pushed ahead every tick) but votes and acknowledges: a learner just
  promoted, until it has applied its own BECOME_VOTER (a node the members do
  not know yet would time out over and over, and the first vote request it
  got through would carry a term high enough to depose the leader that is
  adding it), and a member being removed (it still counts in the old
  configuration's majority, and should not disrupt the new one). The replica
  ends the hold (`end_hold`).
Raft takes a node's configuration from the latest membership entry in its
log, committed or not. pysyncobj starts from the peers its replica passes in,
replaces them with its snapshot header's `cluster`, and replays only the
committed entries after it; at the first tick this node also applies the
membership entries of its log past the applied index (`_replay_membership`),
which pysyncobj's later replay of them leaves as they are. pysyncobj
never records a change in flight (its `__changeClusterIDx` is never set), so
`change_in_flight` looks at the log itself; its utility commands (add,
remove, transfer by anyone with the password) are switched off, and a
command a follower forwards (`apply_command`) is refused: only a leader's
own XCE code proposes.

Everything pysyncobj calls back (apply, proposal callbacks, state changes)
runs in its tick thread; callers hand results to their own threads.
"""

from __future__ import annotations

import collections
import logging
import pickle
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pysyncobj import FAIL_REASON, SyncObjConf, replicated
from pysyncobj.monotonic import monotonic

from controller import fail_stop, fsm
from controller.fail_stop import FAIL_STOP_EXIT as FAIL_STOP_EXIT  # the replica's exit code, re-exported
from controller.pysyncobj_internals import (
    MEMBERSHIP_COMMAND,
    ROLES,
    LazyCommitNotice,
    apply_membership_change,
    commit_sent,
    connected_nodes,
    election_deadline,
    hold_election,
    install_connection_class,
    install_journal_factory,
    is_leader,
    leader_node,
    noop_index,
    role,
    send_append_entries,
    transport_of,
)
from controller.raft_connection import BoundedConnection
from controller.raft_snapshot import Snapshots
from controller.raft_transport import APPLYING, KEEPALIVE, RemovalGuard, durable_transport
from controller.raft_wal import LmdbJournal
from controller.read_index import Done, ReadIndex
from controller.store import StateStore, StoreError, fsync_path
from xce.clock import REAL_CLOCK, Clock

log = logging.getLogger(__name__)

_WAL_MARKER = "xce-lmdb-wal:"
_journals: dict[str, LmdbJournal] = {}


def _our_journal(journal_file: str | None) -> LmdbJournal | None:
    if journal_file is not None and journal_file.startswith(_WAL_MARKER):
        return _journals.pop(journal_file)
    return None


install_journal_factory(_our_journal)
install_connection_class(BoundedConnection)


# The outcome of a proposal as pysyncobj reports it. Anything but SUCCESS is a
# hint: the entry may still commit (LEADER_CHANGED, UNKNOWN_OUTCOME) or may
# have committed with the callback lost. Committed state is the truth.
SUCCESS = FAIL_REASON.SUCCESS
# Larger than any entry (group commits and gRPC requests stop at 1 MiB; the
# config caps group_commit max_bytes there too). pysyncobj sends a single
# entry of at least this size in chunks, and its chunking marks the last
# chunk by the entry's length instead of the pickled length, so some sizes
# arrive truncated, every time: that follower could never get past the
# entry. Below this size an entry goes whole, in one message. Not larger:
# the same figure bounds a catch-up message, compressed in the tick thread.
APPEND_ENTRIES_BYTES = 2 << 20
MAX_ENTRY_BYTES = 3 << 19  # 1.5 MiB
FAIL_NAMES = {value: name for name, value in vars(FAIL_REASON).items() if name.isupper()}

ProposalCallback = Callable[[Any, int], None]
ChangeCallback = Callable[[bool, str], None]  # (done, why not): in the tick thread
MODES = ("voter", "standby", "learner")
STANDBY_HOLD_S = 3600.0  # a standby's election deadline, pushed this far ahead every tick
TRANSFER_TRY_S = 2.0  # a leadership transfer is tried every tick this long (a member must be caught up)


@dataclass(frozen=True)
class RaftSettings:
    compaction_min_entries: int = 200_000
    # pysyncobj keeps the whole log in memory until a snapshot; large entries
    # (group-committed batches) would exhaust memory long before the entry
    # count bound, so past this many bytes we force a snapshot.
    compaction_max_bytes: int = 256 << 20
    compaction_min_time_s: float = 3600.0
    # Each replica draws its election timeout from its own window: the
    # replica at position k (in address order) from [min + k*stagger,
    # max + k*stagger]. Disjoint windows mean the two survivors of a leader
    # kill never time out together, so the first election does not split
    # (with one shared window about 1 kill in 5 split the vote; +0.6 s).
    election_min_s: float = 0.3
    election_max_s: float = 0.4
    election_stagger_s: float = 0.15
    # A leader whose process died closes its connections: a follower that
    # sees its leader's connection drop starts its election this soon after
    # (plus its rank among the others times the stagger, so the survivors do
    # not split the vote), not a whole election timeout after the last
    # heartbeat. A leader that is silent while connected (a partition, a
    # stalled host) is still found out by the timeout alone. 0 turns it off.
    leader_lost_s: float = 0.05
    leader_fallback_s: float = 1.0
    heartbeat_s: float = 0.05
    # pysyncobj checks election deadlines only once per tick; a coarse tick
    # leaves few distinct moments for the survivors to time out, and two that
    # time out together split the vote (one more election, ~0.6 s).
    tick_s: float = 0.01
    # A commit no AppendEntries has carried to the followers for this long gets one of its own.
    commit_notice_s: float = 0.005
    keepalive_s: float = 0.3
    connection_timeout_s: float = 3.5
    reconnect_s: float = 0.3

    def check_voters(self, voters: int) -> None:
        """Raise ValueError unless every one of `voters` replicas' election windows fits pysyncobj's
        rule (its connection timeout at least the latest election timeout: else a bare
        AssertionError when the replica starts)."""
        latest = self.election_max_s + (voters - 1) * self.election_stagger_s
        if self.connection_timeout_s < latest:
            raise ValueError(f"connection_timeout_s ({self.connection_timeout_s:g}) must be at least "
                             f"election_max_s + {voters - 1} x election_stagger_s ({latest:g}) with "
                             f"{voters} replicas")

    def check(self) -> None:
        """Raise ValueError for settings pysyncobj would refuse or that cannot work."""
        if self.election_min_s <= 3 * self.heartbeat_s:
            raise ValueError("election_min_s must be more than 3 heartbeats (heartbeat_s)")
        if self.election_max_s <= self.election_min_s:
            raise ValueError("election_max_s must be more than election_min_s")
        if self.election_stagger_s < 0 or self.tick_s <= 0 or self.compaction_min_entries < 2:
            raise ValueError("election_stagger_s, tick_s and compaction_min_entries must be positive")
        if self.leader_lost_s < 0:
            raise ValueError("leader_lost_s must not be negative (0 turns it off)")
        if not 0 <= self.commit_notice_s < self.heartbeat_s:
            raise ValueError("commit_notice_s must be at least 0 and less than a heartbeat (heartbeat_s)")


@dataclass(frozen=True)
class RaftStatus:
    role: str
    leader: str | None
    term: int
    commit_index: int
    applied_index: int
    log_length: int
    has_quorum: bool


class _Replica(LazyCommitNotice):
    def __init__(self, apply_fn: Callable[[int, bytes], Any], flush_log: Callable[[], None], *args: Any,
                 **kwargs: Any) -> None:
        self._xce_apply = apply_fn
        self._xce_flush_log = flush_log
        super().__init__(*args, **kwargs)

    def flush_log(self) -> None:
        self._xce_flush_log()

    @replicated  # type: ignore[untyped-decorator]
    def apply_entry(self, data: bytes) -> Any:
        # Inside an apply, raftLastApplied + 1 is this entry's index.
        return self._xce_apply(self.raftLastApplied + 1, data)


class RaftNode:
    def __init__(self, self_address: str, peers: list[str], data_dir: Path, password: str,
                 store: StateStore, settings: RaftSettings | None = None,
                 on_role_change: Callable[[str], None] | None = None,
                 on_applied: Callable[[int], None] | None = None, clock: Clock = REAL_CLOCK,
                 mode: str = "voter") -> None:
        """`peers`: the members' Raft addresses as this node starts (itself included when it is one)."""
        if not password:
            raise ValueError("a cluster password is mandatory: pysyncobj's peer format is pickle")
        if mode not in MODES:
            raise ValueError(f"mode {mode!r} is not one of {', '.join(MODES)}")
        self.mode = mode
        self._standby = mode == "standby"  # no elections until the replica ends the hold
        self._replayed = False  # the log's membership entries past the applied index (first tick)
        self._transfer: tuple[float, ChangeCallback] | None = None
        self._tick_tasks: collections.deque[Callable[[], None]] = collections.deque()  # from any thread
        self.settings = settings or RaftSettings()
        self.store = store
        self._clock = clock
        self.self_address = self_address
        self._on_role_change = on_role_change
        self._on_applied = on_applied
        data_dir = Path(data_dir)
        self._snapshot_path = data_dir / "snapshot"
        guard = RemovalGuard()
        wal = LmdbJournal(data_dir / "wal", before_truncate=self._sync_snapshot_dir,
                          on_failure=lambda exc: fail_stop.fail_stop(exc), check_removal=guard.check)
        self._wal = wal
        applied = store.meta().applied_index
        if not self._snapshot_path.exists() and len(wal) and wal[0][1] > applied + 1:
            wal.close()
            raise StoreError(  # (the entries between were dropped for a snapshot, which is gone)
                f"the state in {data_dir} holds entries up to {applied}, this replica's log starts at "
                f"entry {wal[0][1]}, and there is no Raft snapshot to fill the gap (the state was set "
                "aside after the machine went down, or lost): replace the replica as a dead one is "
                "replaced (`xce member remove`, then a new data directory added with `xce member add`: "
                "docs/DEPLOY.md)")
        store.start_syncing(lambda exc: fail_stop.fail_stop(exc, "syncing the state"))
        self._snapshots = Snapshots(store, self._snapshot_path, wal, guard,
                                    lambda: int(self._replica.raftLastApplied), clock)
        marker = f"{_WAL_MARKER}{data_dir}"
        _journals[marker] = wal
        s = self.settings
        rank = sorted(set(peers) | {self_address}).index(self_address)
        s.check_voters(rank + 1)
        conf = SyncObjConf(
            password=password,
            # Exactly the configured address: pysyncobj would listen on 0.0.0.0 for an IPv4 one.
            bindAddress=self_address,
            journalFile=marker,
            fullDumpFile=str(self._snapshot_path),
            serializer=self._snapshots.save,
            serializeChecker=self._snapshots.writer.state,
            deserializer=self._snapshots.load,
            logCompactionMinEntries=s.compaction_min_entries,
            logCompactionMinTime=s.compaction_min_time_s,
            raftMinTimeout=s.election_min_s + rank * s.election_stagger_s,
            raftMaxTimeout=s.election_max_s + rank * s.election_stagger_s,
            leaderFallbackTimeout=s.leader_fallback_s,
            appendEntriesPeriod=s.heartbeat_s,
            autoTickPeriod=s.tick_s,
            appendEntriesUseBatch=False,
            appendEntriesBatchSizeBytes=APPEND_ENTRIES_BYTES,
            connectionTimeout=s.connection_timeout_s,
            connectionRetryTime=s.reconnect_s,
            dynamicMembershipChange=True,
            onStateChanged=self._state_changed,
            commandsQueueSize=100_000,
        )
        # Its numbers start at a random point: an answer to an earlier process's AppendEntries
        # repeats a number this one never sends (read_index.py).
        self._reads = ReadIndex(first_sequence=secrets.randbits(62))
        self._read_requests: collections.deque[Done] = collections.deque()  # from any thread
        transport_class = durable_transport(wal, self._reads, guard)
        self._replica = _Replica(self._apply, self._flush_log, None if mode == "learner" else self_address,
                                 [p for p in peers if p != self_address], conf=conf,
                                 transportClass=transport_class)
        guard.last_applied = lambda: int(self._replica.raftLastApplied)
        self._transport = transport_of(self._replica)
        self._last_keepalive = 0.0
        self._commit_owed_since: float | None = None  # when the leader's commit got ahead of its sends
        self._last_pulse = 0.0
        self._known_leader: str | None = None  # as leader() said at the last tick
        self._lost_leader: Any = None  # the leader node whose connection this follower saw drop
        self._replica.addOnTickCallback(self._on_tick)
        # pysyncobj's utility commands would let anyone with the password change the configuration.
        self._transport.disable_utility_commands()
        store.pulse = self._pulse

    # -------------------------------------------------------------- proposing

    def propose(self, data: bytes, callback: ProposalCallback) -> None:
        """Replicate `data`; callback(result, error) runs in the tick thread."""
        if len(data) > MAX_ENTRY_BYTES:
            raise ValueError(f"a log entry of {len(data)} bytes (at most {MAX_ENTRY_BYTES})")
        self._replica.apply_entry(data, callback=callback)

    # -------------------------------------------------------------- inspection

    def status(self) -> RaftStatus:
        for _ in range(10):
            try:  # pysyncobj's dicts may change under us in its tick thread
                raw = self._replica.getStatus()
                break
            except RuntimeError:
                continue
        else:
            raw = self._replica.getStatus()
        role = ROLES.get(raw["state"], str(raw["state"]))
        if self.mode == "learner":
            role = "learner"
        elif self._standby:
            role = "standby"
        leader = raw.get("leader")
        return RaftStatus(role=role, leader=None if leader is None else str(leader),
                          term=int(raw["raft_term"]), commit_index=int(raw["commit_idx"]),
                          applied_index=int(raw["last_applied"]), log_length=int(raw["log_len"]),
                          has_quorum=bool(self._replica.hasQuorum))

    def is_leader(self) -> bool:
        return is_leader(self._replica)

    def leader_term(self) -> int | None:
        """The term this node leads in, or None. Read from the tick thread's
        fields without a lock: a change between the two reads is seen at the
        next call."""
        replica = self._replica
        return int(replica.raftCurrentTerm) if is_leader(replica) else None

    def ready_to_serve(self) -> bool:
        """Leader with its own term's first entry applied, so every earlier
        commit is applied too (a new leader learns the commit point only by
        committing an entry of its own term)."""
        replica = self._replica
        noop = noop_index(replica)
        return is_leader(replica) and noop is not None and replica.raftLastApplied >= noop

    def leader(self) -> str | None:
        """The leader this node knows and is connected to (itself if it leads), or None. A killed
        leader's connections drop at once, so its followers stop naming it before they elect
        another: a caller referred to it would only meet a closed port."""
        replica = self._replica
        node = leader_node(replica)
        if node is None:
            return None
        if not is_leader(replica) and not self._transport.connected(node):
            return None
        return str(node.address)

    def election_s(self) -> float:
        """How long an election may take: the latest election timeout of any replica, twice (a
        split vote and the one after it)."""
        s, replicas = self.settings, len(self._replica.otherNodes) + 1
        return 2 * (s.election_max_s + (replicas - 1) * s.election_stagger_s)

    def force_compaction(self) -> None:
        self._replica.forceLogCompaction()

    # -------------------------------------------------------------- membership

    def voters(self) -> frozenset[str]:
        """The Raft addresses of the members as this node's log has them (a change counts from
        where it is appended, committed or not). A learner's: the members it follows."""
        for _ in range(10):
            try:  # the tick thread may change the set while it is copied
                others = frozenset(str(n.address) for n in self._replica.otherNodes)
                break
            except RuntimeError:
                continue
        else:
            others = frozenset(str(n.address) for n in self._replica.otherNodes)
        return others if self.mode == "learner" else others | {self.self_address}

    def reachable(self) -> frozenset[str]:
        """The members this node is connected to, and itself: who could answer it now."""
        for _ in range(10):
            try:
                connected = frozenset(str(getattr(n, "address", n)) for n in connected_nodes(self._replica))
                break
            except RuntimeError:
                continue
        else:
            connected = frozenset()
        return (connected & self.voters()) | {self.self_address}

    def change_in_flight(self) -> bool:
        """A membership change is in this node's log past its applied index (one at a time)."""
        applied = int(self._replica.raftLastApplied)
        tail = self._wal[-256:]  # what is not applied yet is at the end (a leader applies as it commits)
        marker = bytes([MEMBERSHIP_COMMAND])
        return any(index > applied and command[:1] == marker for command, index, _ in tail)

    def change_membership(self, add: bool, address: str, done: ChangeCallback) -> None:
        """Add or remove the voter at `address` through the log; done(True, "") once the change is
        committed, else done(False, why). Only while this node leads (pysyncobj would forward it)."""

        def callback(result: Any, error: int) -> None:
            done(error == SUCCESS, "" if error == SUCCESS else FAIL_NAMES.get(error, str(error)))

        def change() -> None:
            if not is_leader(self._replica):
                done(False, "not the leader")
            elif add:
                self._replica.addNodeToCluster(address, callback=callback)
            else:
                # Dropped from the peers as the change is appended: the commits no round carried yet
                # (its REMOVING, which makes it hold its elections) go to it first.
                if self._commit_uncarried():
                    send_append_entries(self._replica)
                self._replica.removeNodeFromCluster(address, callback=callback)

        self._tick_tasks.append(change)

    def transfer_leadership(self, done: ChangeCallback) -> None:
        """Hand leadership to the most caught-up connected member (Raft's TimeoutNow). pysyncobj sends
        it only to a member whose log matches the leader's to the last entry, which under writes holds
        only now and then: tried every tick for TRANSFER_TRY_S. done(True, "") once sent, else
        done(False, why)."""
        self._tick_tasks.append(lambda: self._start_transfer(done))

    def _start_transfer(self, done: ChangeCallback) -> None:
        if self._transfer is not None:
            done(False, "a transfer is being tried already")
            return
        self._transfer = (self._clock.monotonic_s() + TRANSFER_TRY_S, done)

    def _try_transfer(self) -> None:  # tick thread, after this tick's commands were appended
        assert self._transfer is not None
        deadline, done = self._transfer
        outcome: list[int] = []
        self._replica.transferLeadership(None, lambda result, error: outcome.append(error))
        error = outcome[0] if outcome else FAIL_REASON.REQUEST_DENIED
        if error == SUCCESS or error == FAIL_REASON.NOT_LEADER or self._clock.monotonic_s() > deadline:
            self._transfer = None
            done(error == SUCCESS, "" if error == SUCCESS else FAIL_NAMES.get(error, str(error)))

    def standing_by(self) -> bool:
        """Holding its elections (a standby)."""
        return self._standby

    def hold(self) -> None:
        """Start no election from now on (a member being removed)."""
        if not self._standby:
            self._standby = True
            log.info("raft: %s holds its elections (it is being removed)", self.self_address)

    def end_hold(self) -> None:
        """Start elections again: the replica applied its own BECOME_VOTER."""
        if self._standby:
            self._standby = False
            log.info("raft: %s is a voter that may stand for election from now on", self.self_address)

    def _replay_membership(self) -> None:  # tick thread, once: after pysyncobj loaded its snapshot
        replica = self._replica
        applied = int(replica.raftLastApplied)
        for command, index, _ in list(self._wal[:]):
            if index > applied and command[:1] == bytes([MEMBERSHIP_COMMAND]):
                request = pickle.loads(command[1:])
                if apply_membership_change(replica, request):
                    log.info("raft: membership entry %d (%s %s) in the log, not yet applied: in effect",
                             index, request[0], request[1])

    def close(self) -> None:
        self._snapshots.writer.join()
        self._replica.destroy()
        # destroy() stops the tick thread asynchronously; it closes the WAL.
        deadline = 50
        while self._replica.tick_thread_alive() and deadline:
            threading.Event().wait(0.05)
            deadline -= 1

    # -------------------------------------------------------------- tick thread

    def _apply(self, index: int, data: bytes) -> Any:
        try:
            result = self.store.apply(index, data)
        except Exception as exc:
            # An entry this code cannot apply, a bug in apply, or a storage
            # failure: never retried forever by pysyncobj nor skipped, and never
            # recorded as a rejection (replicas on different code would diverge).
            # Stop before applying anything else; the WAL keeps the entry.
            kind, format_ = fsm.describe(data)
            fail_stop.fail_stop(exc, f"applying entry {index} (kind {kind}, format {format_})")
        if self._on_applied is not None:
            self._on_applied(index)
        return result

    def _flush_log(self) -> None:
        self._wal.flush(lazy_commit_index=True)  # a leader's entries sent unflushed, before it counts

    def _pulse(self) -> None:
        """Inside an apply, between two table operations (module docstring), once a heartbeat period
        after the last tick ended (it sent what was due): an apply that is not long sends nothing.
        Sending is what the tick would do at the heartbeat anyway: pysyncobj's AppendEntries reads
        the log, the commit index and each peer's next index, none of which the apply changes."""
        if self._clock.monotonic_s() - self._last_pulse < self.settings.heartbeat_s:
            return
        replica = self._replica
        try:
            if is_leader(replica):
                send_append_entries(replica)
            elif (leader := leader_node(replica)) is not None:
                self._transport.send(leader, {"type": APPLYING, "term": replica.raftCurrentTerm})
        except Exception:  # a send that fails (a reconnect, say) is the tick's to retry, not a failed apply
            log.exception("sending from inside an apply failed")
        self._last_pulse = self._clock.monotonic_s()  # after: a long send does not bring the next one on

    def read_index(self, done: Done) -> None:
        """Call done(True) in the tick thread once a read that arrives now may be answered from this
        node's state (read_index.py), done(False) if it may not (not the leader, not confirmed in time)."""
        self._read_requests.append(done)

    def _reads_tick(self) -> None:
        replica = self._replica
        leader = is_leader(replica)
        now = self._clock.monotonic_s()
        arrived = False
        while self._read_requests:
            done = self._read_requests.popleft()
            if leader:
                self._reads.arrived(int(replica.raftCommitIndex), list(replica.otherNodes), now, done)
                arrived = True
            else:
                done(False)
        if arrived:  # confirm at once rather than at the next heartbeat
            send_append_entries(replica)
        if self._reads.waiting:
            self._reads.step(leader, int(replica.raftLastApplied), now)

    def _commit_uncarried(self) -> bool:  # tick thread
        """This node leads, and its commit index is past what its last AppendEntries round carried."""
        replica = self._replica
        return is_leader(replica) and int(replica.raftCommitIndex) > commit_sent(replica)

    def _notice_commit(self) -> None:  # tick thread
        """A leader's commit that no AppendEntries has carried for commit_notice_s gets a round."""
        due, self._commit_owed_since = commit_notice(self._commit_uncarried(), self._commit_owed_since,
                                                     self._clock.monotonic_s(), self.settings.commit_notice_s)
        if due:
            send_append_entries(self._replica)

    def _on_tick(self) -> None:
        if not self._replayed and self.mode != "learner":
            self._replayed = True
            self._replay_membership()
        while self._tick_tasks:
            self._tick_tasks.popleft()()
        if self._transfer is not None:
            self._try_transfer()
        if self._standby:  # pysyncobj looks at the deadline before the callbacks of the same tick
            hold_election(self._replica, monotonic() + STANDBY_HOLD_S)
        else:
            self._elect_soon_if_leader_lost()
        self._reads_tick()
        self._notice_commit()
        if self._on_role_change is not None and (leader := self.leader()) != self._known_leader:
            self._known_leader = leader  # a follower's leader changed, or went: its role may not have
            self._on_role_change(role(self._replica))
        self._flush_log()
        self._last_pulse = self._clock.monotonic_s()  # the next tick's applies pulse from now (_pulse)
        if self._wal.size_bytes > self.settings.compaction_max_bytes:
            self._replica.forceLogCompaction()
        now = self._clock.monotonic_s()
        if now - self._last_keepalive >= self.settings.keepalive_s:
            self._last_keepalive = now
            for node in self._replica.otherNodes:
                self._transport.send(node, {"type": KEEPALIVE})

    def _elect_soon_if_leader_lost(self) -> None:  # tick thread
        """A follower whose leader's connection dropped (its process died, or it closed the
        connection) moves its election deadline to `leader_lost_s` from now, staggered by its rank
        among the other voters, once per lost connection."""
        replica, delay_s = self._replica, self.settings.leader_lost_s
        node = leader_node(replica)
        if node is None or delay_s <= 0 or self.mode == "learner" or is_leader(replica) \
                or self._transport.connected(node):
            self._lost_leader = None
            return
        if self._lost_leader is node:
            return
        self._lost_leader = node
        others = sorted(self.voters() - {str(node.address)})
        rank = others.index(self.self_address) if self.self_address in others else 0
        soon = monotonic() + delay_s + rank * self.settings.election_stagger_s
        if soon < election_deadline(replica):
            hold_election(replica, soon)
            log.info("the leader's connection (%s) dropped: an election in %.2f s unless it is back",
                     node.address, soon - monotonic())

    def _state_changed(self, old: int, new: int) -> None:
        if self._on_role_change is not None:
            self._on_role_change(ROLES.get(new, "?"))

    def _sync_snapshot_dir(self) -> None:
        fsync_path(self._snapshot_path.parent)


def commit_notice(ahead: bool, owed_since: float | None, now: float,
                  wait_s: float) -> tuple[bool, float | None]:
    """(send a round now, since when one is owed) for a leader whose commit index is `ahead` of
    what its last round carried, or not: owed from the first tick that sees it ahead, due once
    `wait_s` passed without another round carrying it."""
    if not ahead:
        return False, None
    since = now if owed_since is None else owed_since
    return (True, None) if now - since >= wait_s else (False, since)
