"""The Raft adapter: the only module that imports pysyncobj.

Theory of operation. `RaftNode` replicates opaque entry bytes (xce.v1.Entry)
and hands each committed one, with its log index, to an `apply` function
(the state store). pysyncobj frames our bytes in its own pickled tuple; that
framing never leaves this module and its peer traffic is encrypted with the
cluster password, which is mandatory.

What we change about pysyncobj 0.3.17, and why:
- The journal is raft_wal.LmdbJournal, made durable (flush) before any
  message leaves this node and at the end of every tick. pysyncobj creates
  its journal through a module-level factory; we replace that factory for
  journal paths that carry our marker.
- Snapshots are the state store's LMDB copy (store.write_snapshot), written
  by a thread of their own (SnapshotWriter; no fork, no pickle of our
  state); a snapshot restores only when it is newer than the local state.
- A follower names as its leader only one it is connected to (`leader`),
  and a change of the leader it knows is reported like a change of role.
- A keepalive message every `keepalive_s` to every peer keeps the follower
  to follower connections open: pysyncobj closes a connection silent for
  `connectionTimeout`, and the first vote request after a leader dies would
  otherwise be dropped.
- Every AppendEntries a follower receives goes through Raft's receiver rule
  (raft_append.py) before pysyncobj sees it. pysyncobj cuts the log after
  the message's previous entry whenever the log is longer, matching or not,
  so a delayed or repeated message removed entries the replica had
  acknowledged and applied (and undid the membership changes among them);
  and it raised the commit index over entries the message never covered.
  The transport (DurableTransport) hands pysyncobj only the entries not yet
  present, after the last one that is, with the commit index the message
  justifies; a message whose entries are all present reaches pysyncobj
  without them, and the transport answers for it, as pysyncobj would (the
  next index after the message's last entry: no more than it verified).
  A conflict at an applied entry stops the replica (fail-stop, exit 70),
  and so does any removal pysyncobj attempts beyond the plan
  (`_RemovalGuard`, in the journal's path): neither a bypass nor the chunked
  AppendEntries, which our leaders never send and which are dropped, can
  reach the log unplanned.
- A snapshot from the leader older than what the replica has applied, its
  log going on past it, can only be a delayed or repeated one: pysyncobj
  would clear the whole log to install it (Raft keeps what follows the
  snapshot), dropping acknowledged entries, so the replica stops instead
  (`_refuse_stale_install`).
- Answers to AppendEntries carry the term they were sent in, and a leader
  takes no answer of another term: pysyncobj's carry none, and a leader
  would have counted one sent in its earlier term, about the log it had
  then, in its matchIndex now.
- `leaderFallbackTimeout` ~1 s so a cut-off leader steps down quickly.
- Staggered election windows per replica and a 10 ms tick (pysyncobj only
  looks at its election deadline once per tick), so that the survivors of a
  leader kill do not split the vote.
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
which pysyncobj's later replay of them leaves as they are. pysyncobj 0.3.17
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
import os
import pickle
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TypeGuard

import pysyncobj.syncobj as _syncobj_module
import pysyncobj.tcp_server as _tcp_server_module
import pysyncobj.transport as _transport_module
from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, replicated
from pysyncobj.config import SERIALIZER_STATE
from pysyncobj.monotonic import monotonic
from pysyncobj.node import TCPNode
from pysyncobj.tcp_connection import CONNECTION_STATE, TcpConnection
from pysyncobj.transport import TCPTransport

from controller import fsm
from controller.raft_append import Accept, AppendEntries, Malformed, Reject, RemovesApplied, plan_append
from controller.raft_wal import LmdbJournal
from controller.read_index import Done, ReadIndex
from controller.store import StateStore, StoreError, fsync_path
from xce.clock import REAL_CLOCK, Clock
from xce.private import open_private

log = logging.getLogger(__name__)

_WAL_MARKER = "xce-lmdb-wal:"
_journals: dict[str, LmdbJournal] = {}
_original_create_journal = _syncobj_module.createJournal


# A peer's frame is a 4-byte length and that many bytes, which pysyncobj buffers whole (growing a
# bytes object 8 KiB at a time: quadratic) before it decrypts anything, so before the password
# proves the peer: a length of 2 GiB from anyone who can reach the port made a leader buffer tens of
# MiB and lose its leadership, and even an 8 MiB frame cost seconds of CPU. Until a frame has
# decrypted (the peer knows the password), frames are small: the handshake's are tens of bytes.
# A peer has proven the password once a frame decrypted that carried the nonce this side sent (a
# frame captured from another connection could decrypt, but not with this nonce). Until then only
# one frame at a time is read, so junk queued behind a small first frame is never buffered. After
# that, our largest frame is an AppendEntries batch (APPEND_ENTRIES_BYTES, 2 MiB) or a snapshot
# chunk (64 KiB), compressed.
MAX_FRAME_BYTES = 16 << 20
MAX_UNPROVEN_FRAME_BYTES = 64 << 10


class _BoundedConnection(TcpConnection):  # type: ignore[misc]
    """A peer connection that hangs up on a frame longer than it allows before buffering it:
    MAX_UNPROVEN_FRAME_BYTES until the peer has proven the password, MAX_FRAME_BYTES after."""

    _proven = False

    def _TcpConnection__processRead(self) -> bool:  # overrides the base class's private reader
        if not self._proven and self._first_frame_complete():
            return False  # unproven: parse this frame before reading more
        more = bool(TcpConnection._TcpConnection__processRead(self))
        buffer = self._TcpConnection__readBuffer
        limit = MAX_FRAME_BYTES if self._proven else MAX_UNPROVEN_FRAME_BYTES
        if len(buffer) >= 4:
            (length,) = struct.unpack("i", buffer[:4])
            if not 0 <= length <= limit or len(buffer) > 2 * MAX_FRAME_BYTES + 8:
                log.warning("raft: a frame of %d bytes from %s exceeds %d%s: connection dropped", length,
                            _peer(self._TcpConnection__socket), limit,
                            "" if self._proven else " (before the password was proven)")
                self.disconnect()
                return False
        return more

    def _first_frame_complete(self) -> bool:
        buffer = self._TcpConnection__readBuffer
        return len(buffer) >= 4 and len(buffer) - 4 >= struct.unpack("i", buffer[:4])[0]

    def _TcpConnection__processParseMessage(self) -> Any:
        nonce = self.recvRandKey  # set: the frame must carry it, and the base class checks that it does
        message = TcpConnection._TcpConnection__processParseMessage(self)
        if message is not None and nonce:
            self._proven = True
        return message

    def disconnect(self) -> None:
        self._proven = False
        super().disconnect()


def _peer(sock: Any) -> str:
    if sock is None:
        return "?"
    try:
        return str(sock.getpeername())
    except OSError:
        return "?"


# pysyncobj makes its connections by these module-level names.
_tcp_server_module.TcpConnection = _BoundedConnection
_transport_module.TcpConnection = _BoundedConnection


def _create_journal(journal_file: str | None) -> Any:
    if journal_file is not None and journal_file.startswith(_WAL_MARKER):
        return _journals.pop(journal_file)
    return _original_create_journal(journal_file)


_syncobj_module.createJournal = _create_journal


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
# EX_SOFTWARE: an entry it cannot apply, a bug in apply, storage failing, or an applied entry replaced
FAIL_STOP_EXIT = 70
FAIL_NAMES = {value: name for name, value in vars(FAIL_REASON).items() if name.isupper()}

ProposalCallback = Callable[[Any, int], None]
ChangeCallback = Callable[[bool, str], None]  # (done, why not): in the tick thread
MODES = ("voter", "standby", "learner")
STANDBY_HOLD_S = 3600.0  # a standby's election deadline, pushed this far ahead every tick
MEMBERSHIP_COMMAND = 2  # pysyncobj's _COMMAND_TYPE.MEMBERSHIP: the first byte of a change's command
TRANSFER_TRY_S = 2.0  # a leadership transfer is tried every tick this long (a member must be caught up)


_ROLES = {0: "follower", 1: "candidate", 2: "leader"}  # pysyncobj's _RAFT_STATE


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
    leader_fallback_s: float = 1.0
    heartbeat_s: float = 0.05
    # pysyncobj checks election deadlines only once per tick; a coarse tick
    # leaves few distinct moments for the survivors to time out, and two that
    # time out together split the vote (one more election, ~0.6 s).
    tick_s: float = 0.01
    keepalive_s: float = 0.3
    connection_timeout_s: float = 3.5
    reconnect_s: float = 0.3


    def check(self) -> None:
        """Raise ValueError for settings pysyncobj would refuse or that cannot work."""
        if self.election_min_s <= 3 * self.heartbeat_s:
            raise ValueError("election_min_s must be more than 3 heartbeats (heartbeat_s)")
        if self.election_max_s <= self.election_min_s:
            raise ValueError("election_max_s must be more than election_min_s")
        if self.election_stagger_s < 0 or self.tick_s <= 0 or self.compaction_min_entries < 2:
            raise ValueError("election_stagger_s, tick_s and compaction_min_entries must be positive")


@dataclass(frozen=True)
class RaftStatus:
    role: str
    leader: str | None
    term: int
    commit_index: int
    applied_index: int
    log_length: int
    has_quorum: bool


class _Replica(SyncObj):  # type: ignore[misc]
    def __init__(self, apply_fn: Callable[[int, bytes], Any], *args: Any, **kwargs: Any) -> None:
        self._xce_apply = apply_fn
        super().__init__(*args, **kwargs)

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
        self._snapshots = SnapshotWriter(store, self._snapshot_path, clock)
        guard = self._guard = _RemovalGuard()
        wal = LmdbJournal(data_dir / "wal", before_truncate=self._sync_snapshot_dir,
                          on_failure=_fail_stop, check_removal=guard.check)
        self._wal = wal
        marker = f"{_WAL_MARKER}{data_dir}"
        _journals[marker] = wal
        s = self.settings
        rank = sorted(set(peers) | {self_address}).index(self_address)
        conf = SyncObjConf(
            password=password,
            # Exactly the configured address: pysyncobj would listen on 0.0.0.0 for an IPv4 one.
            bindAddress=self_address,
            journalFile=marker,
            fullDumpFile=str(self._snapshot_path),
            serializer=self._serialize,
            serializeChecker=self._snapshots.state,
            deserializer=self._deserialize,
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
        self._reads = ReadIndex()
        self._read_requests: collections.deque[Done] = collections.deque()  # from any thread
        transport_class = _durable_transport(wal, self._reads, guard)
        self._replica = _Replica(self._apply, None if mode == "learner" else self_address,
                                 [p for p in peers if p != self_address], conf=conf,
                                 transportClass=transport_class)
        guard.last_applied = lambda: int(self._replica.raftLastApplied)
        self._last_keepalive = 0.0
        self._last_pulse = 0.0
        self._known_leader: str | None = None  # as leader() said at the last tick
        self._replica.addOnTickCallback(self._on_tick)
        # pysyncobj's utility commands would let anyone with the password change the configuration.
        self._replica._SyncObj__transport._onUtilityMessageCallbacks.clear()
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
        role = _ROLES.get(raw["state"], str(raw["state"]))
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
        return bool(self._replica._isLeader())

    def leader_term(self) -> int | None:
        """The term this node leads in, or None. Read from the tick thread's
        fields without a lock: a change between the two reads is seen at the
        next call."""
        replica = self._replica
        return int(replica.raftCurrentTerm) if replica._isLeader() else None

    def ready_to_serve(self) -> bool:
        """Leader with its own term's first entry applied, so every earlier
        commit is applied too (a new leader learns the commit point only by
        committing an entry of its own term)."""
        replica = self._replica
        noop = replica._SyncObj__noopIDx
        return bool(replica._isLeader() and noop is not None and replica.raftLastApplied >= noop)

    def leader(self) -> str | None:
        """The leader this node knows and is connected to (itself if it leads), or None. A killed
        leader's connections drop at once, so its followers stop naming it before they elect
        another: a caller referred to it would only meet a closed port."""
        replica = self._replica
        node = replica._getLeader()
        if node is None:
            return None
        if not replica._isLeader() and not replica._SyncObj__transport.connected(node):
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
                connected = frozenset(str(getattr(n, "address", n)) for n in
                                      self._replica._SyncObj__connectedNodes)
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
            if not self._replica._isLeader():
                done(False, "not the leader")
            elif add:
                self._replica.addNodeToCluster(address, callback=callback)
            else:
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
                if replica._SyncObj__doChangeCluster(request):
                    log.info("raft: membership entry %d (%s %s) in the log, not yet applied: in effect",
                             index, request[0], request[1])

    def close(self) -> None:
        self._snapshots.join()
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
            _fail_stop(exc, f"applying entry {index} (kind {kind}, format {format_})")
        if self._on_applied is not None:
            self._on_applied(index)
        return result

    def _pulse(self) -> None:
        """Inside an apply, between two table operations (module docstring). Sending is what a tick
        does after the apply anyway: pysyncobj's AppendEntries reads the log, the commit index and
        each peer's next index, none of which the apply changes."""
        if self._clock.monotonic_s() - self._last_pulse < self.settings.heartbeat_s:
            return
        replica = self._replica
        try:
            if replica._isLeader():
                replica._SyncObj__sendAppendEntries()
            elif (leader := replica._getLeader()) is not None:
                message = {"type": "xce_applying", "term": replica.raftCurrentTerm}
                replica._SyncObj__transport.send(leader, message)
        except Exception:  # a send that fails (a reconnect, say) is the tick's to retry, not a failed apply
            log.exception("sending from inside an apply failed")
        self._last_pulse = self._clock.monotonic_s()  # after: a long send does not bring the next one on

    def read_index(self, done: Done) -> None:
        """Call done(True) in the tick thread once a read that arrives now may be answered from this
        node's state (read_index.py), done(False) if it may not (not the leader, not confirmed in time)."""
        self._read_requests.append(done)

    def _reads_tick(self) -> None:
        replica = self._replica
        leader = bool(replica._isLeader())
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
            replica._SyncObj__sendAppendEntries()
        if self._reads.waiting:
            self._reads.step(leader, int(replica.raftLastApplied), now)

    def _on_tick(self) -> None:
        if not self._replayed and self.mode != "learner":
            self._replayed = True
            self._replay_membership()
        while self._tick_tasks:
            self._tick_tasks.popleft()()
        if self._transfer is not None:
            self._try_transfer()
        if self._standby:  # pysyncobj looks at the deadline before the callbacks of the same tick
            self._replica._SyncObj__raftElectionDeadline = monotonic() + STANDBY_HOLD_S
        self._reads_tick()
        if self._on_role_change is not None and (leader := self.leader()) != self._known_leader:
            self._known_leader = leader  # a follower's leader changed, or went: its role may not have
            self._on_role_change(_ROLES.get(self._replica._SyncObj__raftState, "?"))
        self._wal.flush(lazy_commit_index=True)
        if self._wal.size_bytes > self.settings.compaction_max_bytes:
            self._replica.forceLogCompaction()
        now = self._clock.monotonic_s()
        if now - self._last_keepalive >= self.settings.keepalive_s:
            self._last_keepalive = now
            transport = self._replica._SyncObj__transport
            for node in self._replica.otherNodes:
                transport.send(node, {"type": "xce_keepalive"})

    def _state_changed(self, old: int, new: int) -> None:
        if self._on_role_change is not None:
            self._on_role_change(_ROLES.get(new, "?"))

    def _serialize(self, path: str, data: tuple[Any, ...]) -> None:
        """pysyncobj's compaction, in the tick thread: start the snapshot in a thread of its own
        (SnapshotWriter) and return; pysyncobj asks `_snapshot_state` until it is done."""
        last, prev, cluster = data
        # A learner's own node is None (pysyncobj's read-only node): not a member.
        header = {"last": _entry_json(last), "prev": _entry_json(prev),
                  "cluster": sorted(str(getattr(n, "address", n)) for n in cluster if n is not None)}
        self._snapshots.start(header)
        # pysyncobj renames `path` onto the snapshot as soon as this returns; there is no `path`, so
        # its rename fails (harmlessly: the writer's own rename is what replaces the snapshot).
        Path(path).unlink(missing_ok=True)

    def _deserialize(self, path: str) -> tuple[Any, ...]:
        # pysyncobj swallows any exception here and then never applies again
        # (its log starts past index 2): fail loudly instead.
        self._snapshots.cancel()  # a local copy in progress must not replace what arrived
        try:
            fsync_path(Path(path))  # a received snapshot is written without fsync
            header, _ = StateStore.read_snapshot_header(Path(path))
            if self._guard.installing:
                self._refuse_stale_install(_entry_tuple(header["last"])[1])
            replaced = self.store.restore_snapshot(Path(path))
            mine = self.store.meta().incarnation
            if not replaced and header.get("incarnation", "") != mine:
                # A newer state of another history (replicas restored from different backups, or
                # one forced beside the others): keeping it would apply the leader's log to it.
                raise StoreError(f"a snapshot of history {header.get('incarnation') or '(never restored)'} "
                                 f"at index {header['applied_index']}, and this replica's newer state is of "
                                 f"history {mine or '(never restored)'}: restore every replica from the same "
                                 "backup, or wipe this one")
            last, prev = _entry_tuple(header["last"]), _entry_tuple(header["prev"])
            # As nodes: pysyncobj drops itself from this list by comparing nodes, and a string never
            # equals one (the node would count itself among its peers).
            cluster = [TCPNode(_address(a)) for a in header["cluster"]]
        except Exception as exc:
            _fail_stop(exc, f"loading snapshot {path}")
        log.info("snapshot at index %s %s", header["applied_index"],
                 "installed" if replaced else "older than local state: kept local state")
        # If the log still holds the snapshot's last two entries (a restart
        # after a snapshot, before pysyncobj dropped the entries it covers),
        # drop what precedes them now: pysyncobj keeps the log only when it
        # starts with exactly those two, and would otherwise clear entries
        # this replica may already have acknowledged.
        position = self._wal.position_of(prev)
        if position is not None and self._wal.position_of(last) == position + 1:
            self._wal.deleteEntriesTo(position)
        return last, prev, cluster

    def _refuse_stale_install(self, last_index: int) -> None:
        """pysyncobj clears the whole log to install a snapshot from the leader. Raft keeps the entries
        after the snapshot's last when the log holds them; a snapshot older than what this replica has
        applied, with its log going on past it, can only be a delayed or repeated one, and clearing
        would drop entries this replica acknowledged (a later vote of its could then elect a leader
        without them). So it stops instead (fail-stop); restarted, it has its log and state as they
        were."""
        applied, last_held = int(self._replica.raftLastApplied), int(self._wal[-1][1])
        if applied >= last_index and last_held > last_index:
            _fail_stop(LogRemovalRefused(
                f"a snapshot at entry {last_index} from the leader, and this replica holds entries to "
                f"{last_held}, applied to {applied}: installing it would clear acknowledged entries (a "
                "delayed or repeated snapshot)"), "installing a snapshot")

    def _sync_snapshot_dir(self) -> None:
        fsync_path(self._snapshot_path.parent)


class SnapshotWriter:
    """A Raft snapshot written off the tick thread (pysyncobj's serializeChecker protocol).

    Copying the state takes about 80 ms per 100,000 jobs; inside the tick thread no heartbeat goes
    out meanwhile, and at a million jobs a leader that compacts would lose its leadership. The copy
    runs in a thread of its own from one LMDB read transaction (store.write_snapshot), to a file
    beside the snapshot that replaces it by rename once synced; `state` tells pysyncobj when it is
    done, and pysyncobj drops the log it covers only then. The state copied may be newer than the
    header's last entry (entries applied meanwhile): a replica that loads it skips them when the
    log replays them, as it skips any entry at or below its applied index.
    """

    def __init__(self, store: StateStore, path: Path, clock: Clock = REAL_CLOCK) -> None:
        self.store = store
        self.path = path
        self.clock = clock
        self.writing = path.with_name(path.name + ".writing")
        self.writing.unlink(missing_ok=True)  # a copy a crash interrupted
        self._thread: threading.Thread | None = None
        self._outcome: bool | None = None  # of the last copy, until pysyncobj has been told
        self.written = 0  # snapshots completed (tests, status)
        self._guard = threading.Lock()  # the rename of a finished copy, against `cancel`
        self._cancelled = False
        self._replacing: int | None = None  # the inode of the snapshot the copy is to replace

    def start(self, header: dict[str, Any]) -> None:
        if self._thread is not None and self._thread.is_alive():
            return  # pysyncobj does not start one while one runs; never two at once regardless
        self._outcome = None
        self._cancelled = False
        self._replacing = _inode(self.path)
        self._thread = threading.Thread(target=self._write, args=(header,), name="raft-snapshot",
                                        daemon=True)
        self._thread.start()

    def _write(self, header: dict[str, Any]) -> None:
        started = self.clock.monotonic_s()
        try:
            with os.fdopen(open_private(self.writing), "wb") as out:
                self.store.write_snapshot(out, header)
            with self._guard:
                # A snapshot received from the leader meanwhile is newer than this copy: it stays.
                if self._cancelled or _inode(self.path) != self._replacing:
                    log.info("Raft snapshot at entry %s dropped: a snapshot from the leader replaced "
                             "the state meanwhile", header["last"][1])
                    self.writing.unlink(missing_ok=True)
                    self._outcome = False
                    return
                os.replace(self.writing, self.path)
            fsync_path(self.path.parent)
        except Exception:
            log.exception("writing the Raft snapshot failed; the log is kept")
            self.writing.unlink(missing_ok=True)
            self._outcome = False
            return
        self.written += 1
        log.info("Raft snapshot at entry %s written in %.2f s (off the tick thread)",
                 header["last"][1], self.clock.monotonic_s() - started)
        self._outcome = True

    def state(self) -> int:
        """SERIALIZER_STATE for pysyncobj: SUCCESS or FAILED exactly once after each copy."""
        if self._thread is None:
            return int(SERIALIZER_STATE.NOT_SERIALIZING)
        if self._thread.is_alive():
            return int(SERIALIZER_STATE.SERIALIZING)
        outcome, self._thread = self._outcome, None
        return int(SERIALIZER_STATE.SUCCESS if outcome else SERIALIZER_STATE.FAILED)

    def join(self) -> None:
        thread = self._thread
        if thread is not None:
            thread.join()

    def cancel(self) -> None:
        """A snapshot from the leader is being installed: a copy in progress is older and must
        never replace it (on a restart that older file would not match the log). Waits for it."""
        with self._guard:
            self._cancelled = True
        self.join()


def _inode(path: Path) -> int | None:
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return None


def _fail_stop(exc: BaseException, doing: str = "writing the Raft log") -> NoReturn:
    log.critical("FATAL: %s failed; stopping this replica (exit %d): %r", doing, FAIL_STOP_EXIT, exc,
                 exc_info=exc)
    logging.shutdown()
    os._exit(FAIL_STOP_EXIT)


def _address(raw: object) -> str:
    """A member's HOST:PORT from a snapshot header (ValueError otherwise)."""
    text = str(raw)
    host, _, port = text.rpartition(":")
    if not host or not port.isascii() or not port.isdigit():
        raise ValueError(f"snapshot header names a member {text[:80]!r} that is not HOST:PORT")
    return text


def _entry_json(entry: tuple[bytes, int, int]) -> list[Any]:
    return [bytes(entry[0]).hex(), entry[1], entry[2]]


def _entry_tuple(raw: list[Any]) -> tuple[bytes, int, int]:
    return bytes.fromhex(raw[0]), int(raw[1]), int(raw[2])


class LogRemovalRefused(RuntimeError):
    """pysyncobj was about to remove log entries that Raft's rule keeps (raft_append.py)."""


class _RemovalGuard:
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
            _fail_stop(LogRemovalRefused(f"entries from {first_removed} would be removed, and {applied} "
                                         "is applied: a committed entry would be replaced"),
                       "removing conflicting Raft log entries")
        if first_removed != self.allowed:
            _fail_stop(LogRemovalRefused(f"entries from {first_removed} would be removed; the AppendEntries "
                                         f"plan allowed {self.allowed}"),
                       "removing conflicting Raft log entries")


class _WalLog:
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


def _as_request(message: dict[str, Any]) -> AppendEntries | None:
    """The plan's view of pysyncobj's message; None if it is not the shape pysyncobj sends."""
    entries = message.get("entries", [])
    prev_index, prev_term = message.get("prevLogIdx"), message.get("prevLogTerm")
    commit = message.get("commit_index")
    if not (_is_int(prev_index) and _is_int(prev_term) and _is_int(commit)) or not isinstance(entries, list):
        return None
    if not all(isinstance(e, tuple) and len(e) == 3 and _is_int(e[1]) and _is_int(e[2]) for e in entries):
        return None  # pysyncobj sends a list of its log's (command, index, term) tuples
    return AppendEntries(prev_index, prev_term, [(e[1], e[2]) for e in entries], commit)


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _durable_transport(wal: LmdbJournal, reads: ReadIndex, guard: _RemovalGuard) -> type:
    class DurableTransport(TCPTransport):  # type: ignore[misc]
        """Flushes the WAL before any Raft message leaves this node; counts AppendEntries and their
        answers for ReadIndex (read_index.py); hands pysyncobj each AppendEntries as Raft's rule
        plans it (raft_append.py), and an answer only of the term it leads in; refuses commands
        forwarded by followers."""

        def send(self, node: Any, message: Any) -> bool:
            wal.flush(lazy_commit_index=True)
            kind = message.get("type") if isinstance(message, dict) else None
            if kind == "append_entries":
                connection = self._connections.get(node)
                if connection is not None and connection.state == CONNECTION_STATE.CONNECTED:
                    reads.sent(node)  # it goes out on this connection
            elif kind == "next_node_idx":
                # pysyncobj's answer names no term; a leader would count the answer to an AppendEntries
                # of its earlier term, which verified the log it had then, in its matchIndex now. Every
                # answer is sent while handling the message it answers, whose term is this node's now.
                message = {**message, "term": self._syncObj.raftCurrentTerm}
            return bool(super().send(node, message))

        def _onMessageReceived(self, node: Any, message: Any) -> None:
            kind = message.get("type") if isinstance(message, dict) else None
            if kind == "append_entries":
                self._append_entries(node, message)
                return
            if kind == "next_node_idx":
                reads.answered(node)  # one answer per AppendEntries, whatever its term: counts stay aligned
                term = message.get("term")  # absent from a replica of an earlier build
                if term is not None and term != self._syncObj.raftCurrentTerm:
                    return
            elif kind == "apply_command":
                # Only a leader's own code proposes (a follower's XCE core proposes nothing); a
                # forwarded command would be appended with no check of ours (a membership change).
                if "request_id" in message:
                    self.send(node, {"type": "apply_command_response", "request_id": message["request_id"],
                                     "error": FAIL_REASON.REQUEST_DENIED})
                return
            elif kind == "xce_applying":
                # A follower of this term busy applying: alive, which is all that pysyncobj's
                # last-answer time is for (the step down after leader_fallback_s). ReadIndex
                # counts only answers to AppendEntries.
                replica = self._syncObj
                if replica._isLeader() and message.get("term") == replica.raftCurrentTerm:
                    replica._SyncObj__lastResponseTime[node] = monotonic()
                return
            super()._onMessageReceived(node, message)

        def _append_entries(self, node: Any, message: dict[str, Any]) -> None:
            replica = self._syncObj
            term = message.get("term")
            if "prevLogIdx" not in message or not _is_int(term) or term < replica.raftCurrentTerm:
                chunk = message.get("serialized")
                guard.installing = isinstance(chunk, tuple) and len(chunk) == 3 and bool(chunk[2])
                try:  # a snapshot's (its last chunk installs it: _refuse_stale_install), or an old term's
                    super()._onMessageReceived(node, message)
                finally:
                    guard.installing = False
                return
            # Chunks of one large entry: our leaders never send them (APPEND_ENTRIES_BYTES), and pysyncobj
            # would append the assembled entry without a plan. Dropped unanswered, as if lost.
            request = None if "transmission" in message else _as_request(message)
            if request is None:
                log.error("raft: an AppendEntries from %s that no XCE leader sends (%s): dropped", node,
                          "a chunk" if "transmission" in message else "malformed")
                return
            plan = plan_append(_WalLog(wal), request, int(replica.raftLastApplied))
            if isinstance(plan, Malformed):
                log.error("raft: an AppendEntries from %s dropped: %s", node, plan.why)
            elif isinstance(plan, Reject):
                super()._onMessageReceived(node, message)  # pysyncobj refuses it alike, and answers
            elif isinstance(plan, RemovesApplied):
                _fail_stop(LogRemovalRefused(
                    f"its entry {plan.index} conflicts with this replica's, which is applied (last applied "
                    f"{plan.last_applied}): a committed entry would be replaced"), f"following {node}")
            elif plan.present == len(request.entries):
                self._all_present(node, message, plan)
            else:
                guard.allowed = plan.truncate_from
                try:
                    super()._onMessageReceived(node, {
                        **message, "prevLogIdx": plan.prev_index, "prevLogTerm": plan.prev_term,
                        "entries": message["entries"][plan.present:], "commit_index": plan.commit_index})
                finally:
                    guard.allowed = None

        def _all_present(self, node: Any, message: dict[str, Any], plan: Accept) -> None:
            """Nothing to append or remove. Whenever the log is longer than the previous entry,
            pysyncobj's append path would cut it there (and undo the membership changes after it):
            pysyncobj gets the message without its entries, for what else it carries (term, leader,
            election timer, commit index), and the answer is the one it would give."""
            rest = {k: v for k, v in message.items() if k not in ("prevLogIdx", "prevLogTerm", "entries")}
            super()._onMessageReceived(node, {**rest, "commit_index": plan.commit_index})
            self._syncObj._SyncObj__sendNextNodeIdx(node, nextNodeIdx=plan.next_index, success=True)

        def connected(self, node: Any) -> bool:
            connection = self._connections.get(node)
            return connection is not None and connection.state == CONNECTION_STATE.CONNECTED

        def _onDisconnected(self, conn: Any) -> None:
            node = self._connToNode(conn)
            if node is not None:
                reads.disconnected(node)
            super()._onDisconnected(conn)

    return DurableTransport
