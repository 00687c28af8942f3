"""Raft's ReadIndex: when a leader may answer a read with its own state (C1, linearizable reads).

Theory of operation (Raft thesis 6.4; etcd's default). A read that arrives
at the leader records the commit index at that moment. It is answered once:
- a majority (the leader included) has acknowledged an AppendEntries the
  leader sent after the read arrived, so no other leader had been elected
  by then: an old leader cut off from the others never gets there;
- the leader has applied up to that commit index, so the answer includes
  every write acknowledged before the read arrived.

pysyncobj's answers carry no request id, but a follower answers each
AppendEntries exactly once, in order, on one connection, or not at all (an
AppendEntries of an old term; a snapshot chunk before the last; one the Raft
adapter drops, which no leader of ours sends). Every answer counts here,
whatever term it names (raft.py hands pysyncobj only those of its term): it
answers an AppendEntries counted when it was sent. So it is
enough to count, per peer and per connection, the AppendEntries sent and the
answers received. The read wants, of each peer, the answer to the next
AppendEntries sent after it arrived. A lost connection starts the counts
over, and the reads waiting on that peer wait on the others. Counting can
only fall short, never run ahead, so a read is never confirmed early.

Falling short lasts, though: an AppendEntries a follower does not answer (one
of an old term, sent by a leader about to learn it was deposed) leaves the
counts of that connection one apart for good, and when this node leads again
every read waits one more round per answer missing (after a minute of a lossy
network, half a second a read). So each AppendEntries also carries a sequence
number of its own (`sent` returns it, per peer, never reused in the process),
which the follower's answer repeats (raft_transport.py): an answer repeating a
number at or past the first sent after the read arrived confirms it, whatever
went unanswered before. Counting stays for answers without a number (a peer of
an earlier build); a peer whose answers carry numbers is not counted (an
answer on a new connection to an AppendEntries sent on the old one would make
the counts run ahead). Numbers start at a random point per process
(`first_sequence`, drawn by the driver: this module stays pure), and an answer
repeating a number this process has not sent to that peer is ignored: a late
answer to the AppendEntries of an earlier process of this replica, reaching
it on a connection pysyncobj kept, confirms nothing.

The majority is of the membership the read arrived under (the peers passed
to `arrived`): members come and go through the log (membership.py), and a
learner, which receives AppendEntries too, is never among them.

Pure: the Raft driver (raft.py) calls it from pysyncobj's tick thread.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

Done = Callable[[bool], None]  # True: answer from local state now; False: refuse (not leader, timed out)


@dataclass
class _Read:
    commit_index: int
    wants: dict[Hashable, tuple[int, int, int]]  # peer -> (connection generation, answers needed,
    #   the sequence number an answer must repeat at least)
    deadline_s: float
    done: Done


@dataclass
class ReadIndex:
    timeout_s: float = 2.0
    first_sequence: int = 0  # numbers sent to each peer are first_sequence + 1, + 2, ...
    _sent: dict[Hashable, int] = field(default_factory=dict)
    _answered: dict[Hashable, int] = field(default_factory=dict)
    _generation: dict[Hashable, int] = field(default_factory=dict)
    _sequence: dict[Hashable, int] = field(default_factory=dict)  # the last sent, per peer
    _answered_sequence: dict[Hashable, int] = field(default_factory=dict)  # the highest repeated
    _waiting: list[_Read] = field(default_factory=list)

    # ------------------------------------------------------------ the transport

    def sent(self, peer: Hashable) -> int:
        """An AppendEntries goes out to `peer`: the sequence number it carries."""
        self._sent[peer] = self._sent.get(peer, 0) + 1
        self._sequence[peer] = sequence = self._sequence.get(peer, self.first_sequence) + 1
        return sequence

    def answered(self, peer: Hashable, sequence: int | None = None) -> None:
        """`peer` answered an AppendEntries (the one numbered `sequence`, if the answer says)."""
        if sequence is None:
            self._answered[peer] = self._answered.get(peer, 0) + 1
        elif self.first_sequence < sequence <= self._sequence.get(peer, self.first_sequence) \
                and sequence > self._answered_sequence.get(peer, 0):
            self._answered_sequence[peer] = sequence

    def disconnected(self, peer: Hashable) -> None:
        """The connection to `peer` is gone: what was sent on it may never be answered."""
        self._generation[peer] = self._generation.get(peer, 0) + 1
        self._sent[peer] = self._answered[peer] = 0

    # ------------------------------------------------------------ reads

    def arrived(self, commit_index: int, peers: list[Hashable], now_s: float, done: Done) -> None:
        """A read arrived at a leader whose commit index is `commit_index`."""
        wants = {p: (self._generation.get(p, 0), self._sent.get(p, 0) + 1,
                     self._sequence.get(p, self.first_sequence) + 1) for p in peers}
        self._waiting.append(_Read(commit_index, wants, now_s + self.timeout_s, done))

    def step(self, leader: bool, last_applied: int, now_s: float) -> None:
        """Answer what can be answered: confirmed and applied, or refused."""
        still: list[_Read] = []
        for read in self._waiting:
            if not leader or now_s > read.deadline_s:
                read.done(False)
            elif self._confirmed(read) and last_applied >= read.commit_index:
                read.done(True)
            else:
                still.append(read)
        self._waiting = still

    def refuse_all(self) -> None:
        for read in self._waiting:
            read.done(False)
        self._waiting = []

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def _confirmed(self, read: _Read) -> bool:
        acks = 1 + sum(1 for peer, (generation, needed, sequence) in read.wants.items()
                       if self._answered_sequence.get(peer, 0) >= sequence
                       or (self._generation.get(peer, 0) == generation
                           and self._answered.get(peer, 0) >= needed))
        return acks > (len(read.wants) + 1) // 2
