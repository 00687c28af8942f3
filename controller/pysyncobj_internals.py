"""pysyncobj's internals, each named once: the only module that touches them.

Theory of operation. pysyncobj (pinned exactly in pyproject.toml) is one large class mixing Raft,
timers, threads and pickle; its public API cannot do what XCE's Raft adapter needs, so the adapter
reaches past it. Every such reach is here, behind a function or a hook of ours, and listed in
`INTERNALS` (owner, name, parameters, why); tests/unit/test_unit_pysyncobj_internals.py checks each
against the installed release and fails naming the one that moved. The adapter modules
(controller/raft*.py) use pysyncobj's public API directly and its internals only through this.

The patches, and why each exists:
- The journal factory (`createJournal`, as pysyncobj.syncobj names pysyncobj.journal's): pysyncobj
  creates its log through it, and its own FileJournal never fsyncs. `install_journal_factory`
  hands it our LMDB journal (raft_wal.py) for the paths the adapter marks, its own for any other.
- The connection class (`TcpConnection`, as tcp_server and transport name it): pysyncobj buffers a
  peer's whole frame, whatever length it announces, before the password is checked.
  `install_connection_class` puts in a `Connection` subclass whose hooks (`read_more`,
  `parse_message`) let the adapter bound frames (raft_connection.py).
- The transport (`Transport`, a TCPTransport): every message a peer sends passes `on_message`
  first, so the adapter applies Raft's AppendEntries rule, stamps answers with their term and
  refuses forwarded commands; `deliver` hands a message on to pysyncobj. Utility commands (add,
  remove, transfer by anyone holding the password) are switched off (`disable_utility_commands`).
- The replica's private state and methods, read or driven from the tick thread: the transport, the
  role, the leader's first own entry (`noop_index`), the connected nodes, the election deadline (a
  standby pushes it ahead), a peer's last answer time (a busy follower's `xce_applying` counts as
  one), sending AppendEntries or an answer outside pysyncobj's own schedule, and applying a
  membership entry of the log that pysyncobj has not replayed (`apply_membership_change`).
- Its tick (`_onTick`) and its becoming the leader (`__onBecomeLeader`) overridden (`FlushedTicks`):
  each is followed by the adapter's `flush_log` (the WAL's flush; a tick, preceded), ahead of the
  leader's count of who holds each entry, in which the leader counts itself (its AppendEntries
  leave before its own entries are durable: raft_transport.py).
- Two of its methods overridden (`LazyCommitNotice`): after a tick that applied entries, a leader
  with appendEntriesUseBatch off sends an AppendEntries round only to carry the new commit index;
  the subclass never asks for it and notes the commit index each round carries (`commit_sent`),
  so the adapter sends one only when nothing else carried it soon enough (raft.py).
- Its peer protocol: message types and fields the adapter reads or rewrites, and the first byte
  of a log command (`NO_OP_COMMAND`, `MEMBERSHIP_COMMAND`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pysyncobj.journal as _journal_module
import pysyncobj.syncobj as _syncobj_module
import pysyncobj.tcp_server as _tcp_server_module
import pysyncobj.transport as _transport_module
from pysyncobj import SyncObj
from pysyncobj.tcp_connection import CONNECTION_STATE, TcpConnection
from pysyncobj.transport import TCPTransport

PYSYNCOBJ_VERSION = "0.3.17"  # the release every name below was checked against

# The first byte of a log entry's command (_COMMAND_TYPE).
NO_OP_COMMAND = 1
MEMBERSHIP_COMMAND = 2
ROLES = {0: "follower", 1: "candidate", 2: "leader"}  # _RAFT_STATE

# The peer protocol: message types, and the fields of an AppendEntries and its answer.
APPEND_ENTRIES = "append_entries"
ANSWER = "next_node_idx"
APPLY_COMMAND = "apply_command"
APPLY_COMMAND_RESPONSE = "apply_command_response"
PREV_INDEX = "prevLogIdx"
PREV_TERM = "prevLogTerm"
ENTRIES = "entries"
COMMIT_INDEX = "commit_index"
CHUNK = "transmission"  # present in each chunk of one large entry
SNAPSHOT_PART = "serialized"  # (data, is first, is last): a part of a snapshot
MESSAGE_WORDS = (APPEND_ENTRIES, ANSWER, APPLY_COMMAND, APPLY_COMMAND_RESPONSE, PREV_INDEX, PREV_TERM,
                 ENTRIES, COMMIT_INDEX, CHUNK, SNAPSHOT_PART, "request_id", "term", "type", "error")


@dataclass(frozen=True)
class Internal:
    owner: object  # a class or a module
    name: str  # as seen from outside (mangled)
    parameters: tuple[str, ...] | None  # a method's, after self; None for data
    why: str


INTERNALS: tuple[Internal, ...] = (
    Internal(_journal_module, "createJournal", ("journalFile",), "our journal (install_journal_factory)"),
    Internal(_tcp_server_module, "TcpConnection", None, "bounded frames (install_connection_class)"),
    Internal(_transport_module, "TcpConnection", None, "bounded frames (install_connection_class)"),
    Internal(SyncObj, "_SyncObj__transport", None, "the transport: sends outside pysyncobj's schedule"),
    Internal(SyncObj, "_SyncObj__raftState", None, "the role, read at each tick"),
    Internal(SyncObj, "_SyncObj__noopIDx", None, "a new leader serves once its own first entry applied"),
    Internal(SyncObj, "_SyncObj__connectedNodes", None, "the members that could answer now"),
    Internal(SyncObj, "_SyncObj__raftElectionDeadline", None,
             "a standby starts no election; a follower whose leader's connection dropped starts one soon"),
    Internal(SyncObj, "_SyncObj__lastResponseTime", None, "a busy follower is alive to its leader"),
    Internal(SyncObj, "_SyncObj__raftMatchIndex", None, "tests: what a leader counted"),
    Internal(SyncObj, "_onTick", ("timeToWait",), "the WAL flushed before a leader counts itself"),
    Internal(SyncObj, "_SyncObj__onBecomeLeader", (), "a new leader's first entry flushed first"),
    Internal(SyncObj, "_isLeader", (), "the role, without a status copy"),
    Internal(SyncObj, "_getLeader", (), "the leader this node knows"),
    Internal(SyncObj, "_SyncObj__sendAppendEntries", (),
             "heartbeats from inside a long apply; ReadIndex; the commit index each round carries"),
    Internal(SyncObj, "_SyncObj__applyLogEntries", (), "no AppendEntries round only for a new commit index"),
    Internal(SyncObj, "_SyncObj__sendNextNodeIdx", ("node", "reset", "nextNodeIdx", "success"),
             "the answer to an AppendEntries whose entries are all present"),
    Internal(SyncObj, "_SyncObj__doChangeCluster", ("request", "reverse"),
             "membership entries of the log past the applied index take effect at start"),
    Internal(SyncObj, "_SyncObj__onMessageReceived", ("node", "message"),
             "tests: a message reaching pysyncobj past the adapter"),
    Internal(SyncObj, "_SyncObj__setCurrentTerm", ("term", "votedForNodeId"), "tests: make a leader"),
    Internal(SyncObj, "_SyncObj__onBecomeLeader", (), "tests: make a leader"),
    Internal(TCPTransport, "_syncObj", None, "the replica a transport serves"),
    Internal(TCPTransport, "_connections", None, "a node's connection and its state"),
    Internal(TCPTransport, "_onUtilityMessageCallbacks", None, "utility commands switched off"),
    Internal(TCPTransport, "_onMessageReceived", ("node", "message"), "every message passes on_message"),
    Internal(TCPTransport, "_onDisconnected", ("conn",), "ReadIndex forgets a disconnected node"),
    Internal(TCPTransport, "_connToNode", ("conn",), "the node of a connection"),
    Internal(TcpConnection, "_TcpConnection__processRead", (), "frames bounded as they are read"),
    Internal(TcpConnection, "_TcpConnection__processParseMessage", (), "a peer proves the password"),
    Internal(TcpConnection, "_TcpConnection__readBuffer", None, "the frame being read"),
    Internal(TcpConnection, "_TcpConnection__socket", None, "the peer's address, for the log"),
    Internal(TcpConnection, "recvRandKey", None, "the nonce a peer's frame must carry"),
)


# -------------------------------------------------------------- module-level patches

_original_create_journal = _syncobj_module.createJournal


def install_journal_factory(ours: Callable[[str | None], Any | None]) -> None:
    """pysyncobj creates its journal with ours(path), or its own when ours returns None."""

    def create_journal(journal_file: str | None) -> Any:
        journal = ours(journal_file)
        return _original_create_journal(journal_file) if journal is None else journal

    _syncobj_module.createJournal = create_journal


def install_connection_class(connection_class: type[Connection]) -> None:
    """pysyncobj makes every peer connection (in and out) of `connection_class`."""
    _tcp_server_module.TcpConnection = connection_class
    _transport_module.TcpConnection = connection_class


# -------------------------------------------------------------- the replica (tick thread)

class FlushedTicks(SyncObj):  # type: ignore[misc]
    """pysyncobj's replica, whose log is flushed (`flush_log`) at the start of every tick, before a
    leader counts, at the top of its tick, the members that hold each entry (itself among them), and
    right after it becomes the leader: its first entry of the term is appended then, and a lone voter
    elects itself and counts that entry within the same tick."""

    def flush_log(self) -> None:
        pass

    def _onTick(self, timeToWait: float = 0.0) -> None:  # noqa: N802, N803 - pysyncobj's names
        self.flush_log()
        super()._onTick(timeToWait)

    def _SyncObj__onBecomeLeader(self) -> None:  # noqa: N802 - pysyncobj's name
        super()._SyncObj__onBecomeLeader()
        self.flush_log()


class LazyCommitNotice(FlushedTicks):
    """pysyncobj's replica, but a tick that applied entries asks for no AppendEntries round of its
    own (its `__applyLogEntries` returns whether one is wanted: with appendEntriesUseBatch off,
    always after applying), and each round notes the commit index it carries. Every other round
    (new entries, heartbeats, the adapter's) goes as before."""

    _xce_commit_sent = 0

    def _SyncObj__applyLogEntries(self) -> bool:
        super()._SyncObj__applyLogEntries()
        return False

    def _SyncObj__sendAppendEntries(self) -> None:
        # Noted first: a round that fails on the way leaves it ahead of what the followers heard,
        # which the next heartbeat carries (never later than a heartbeat, as before).
        self._xce_commit_sent = int(self.raftCommitIndex)
        super()._SyncObj__sendAppendEntries()


def commit_sent(replica: LazyCommitNotice) -> int:
    """The commit index the leader's last AppendEntries round carried to its followers."""
    return replica._xce_commit_sent


def transport_of(replica: SyncObj) -> Transport:
    transport: Transport = replica._SyncObj__transport
    return transport


def role(replica: SyncObj) -> str:
    return ROLES.get(replica._SyncObj__raftState, "?")


def is_leader(replica: SyncObj) -> bool:
    return bool(replica._isLeader())


def leader_node(replica: SyncObj) -> Any:
    return replica._getLeader()


def noop_index(replica: SyncObj) -> int | None:
    """The index of the first entry of this leader's term, or None."""
    index = replica._SyncObj__noopIDx
    return None if index is None else int(index)


def connected_nodes(replica: SyncObj) -> list[Any]:
    """A copy; RuntimeError if the tick thread changes the set meanwhile."""
    return list(replica._SyncObj__connectedNodes)


def hold_election(replica: SyncObj, until: float) -> None:
    """Start no election before `until` (pysyncobj's monotonic clock)."""
    replica._SyncObj__raftElectionDeadline = until


def election_deadline(replica: SyncObj) -> float:
    """When this node starts an election unless it hears from a leader first (pysyncobj's clock)."""
    return float(replica._SyncObj__raftElectionDeadline)


def heard_from(replica: SyncObj, node: Any, at: float) -> None:
    """Count `node` as having answered at `at` (pysyncobj's monotonic clock)."""
    replica._SyncObj__lastResponseTime[node] = at


def match_index(replica: SyncObj) -> dict[Any, int]:
    index: dict[Any, int] = replica._SyncObj__raftMatchIndex
    return index


def send_append_entries(replica: SyncObj) -> None:
    replica._SyncObj__sendAppendEntries()


def send_answer(replica: SyncObj, node: Any, next_index: int) -> None:
    """A successful answer to an AppendEntries: `node` should send from `next_index` on."""
    replica._SyncObj__sendNextNodeIdx(node, nextNodeIdx=next_index, success=True)


def apply_membership_change(replica: SyncObj, request: Any) -> bool:
    """Put a membership entry's change (add or remove, a node) in effect; False if it was already."""
    return bool(replica._SyncObj__doChangeCluster(request))


def receive_unchecked(replica: SyncObj, node: Any, message: Any) -> None:
    """pysyncobj's own handling of a message, past the adapter's transport (tests)."""
    replica._SyncObj__onMessageReceived(node, message)


def become_leader(replica: SyncObj, term: int) -> None:
    """Make this replica the leader of `term` (tests)."""
    replica._SyncObj__setCurrentTerm(term, None)
    replica._SyncObj__onBecomeLeader()


# -------------------------------------------------------------- hooks for subclasses

class Transport(TCPTransport):  # type: ignore[misc]
    """pysyncobj's TCP transport, with every received message passing `on_message` first."""

    def _onMessageReceived(self, node: Any, message: Any) -> None:  # pysyncobj's per-message callback
        self.on_message(node, message)

    def on_message(self, node: Any, message: Any) -> None:
        """A message from `node`: by default, pysyncobj's to handle."""
        self.deliver(node, message)

    def deliver(self, node: Any, message: Any) -> None:
        """Hand a message to pysyncobj, as if it had just arrived."""
        TCPTransport._onMessageReceived(self, node, message)

    def _onDisconnected(self, conn: Any) -> None:
        self.on_disconnected(self._connToNode(conn))
        TCPTransport._onDisconnected(self, conn)

    def on_disconnected(self, node: Any) -> None:
        """The connection to `node` (None if it was not yet known) dropped."""

    @property
    def replica(self) -> SyncObj:
        return self._syncObj

    def connected(self, node: Any) -> bool:
        connection = self._connections.get(node)
        return connection is not None and connection.state == CONNECTION_STATE.CONNECTED

    def disable_utility_commands(self) -> None:
        self._onUtilityMessageCallbacks.clear()


class Connection(TcpConnection):  # type: ignore[misc]
    """pysyncobj's peer connection, with its private reader and parser behind overridable hooks."""

    def _TcpConnection__processRead(self) -> bool:
        return self.read_more()

    def read_more(self) -> bool:
        """Read what the socket has into the buffer; False once nothing more is to be read now."""
        return bool(TcpConnection._TcpConnection__processRead(self))

    def _TcpConnection__processParseMessage(self) -> Any:
        return self.parse_message()

    def parse_message(self) -> Any:
        """The next whole frame of the buffer, decrypted and unpickled, or None."""
        return TcpConnection._TcpConnection__processParseMessage(self)

    @property
    def read_buffer(self) -> bytes:
        buffer: bytes = self._TcpConnection__readBuffer
        return buffer

    @property
    def peer_socket(self) -> Any:
        return self._TcpConnection__socket

    @property
    def nonce(self) -> Any:
        """What a peer's frame must carry to decrypt as this connection's (set once keys are swapped)."""
        return self.recvRandKey
