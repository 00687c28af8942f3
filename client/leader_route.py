"""Which replica the next call goes to, and how long to wait before it: one policy for every client.

Theory of operation. A client of the cluster (the CLI's calls, the scheduler's and the recorder's
Sync streams, a worker's session) talks to the replica it believes leads. When that replica
refuses and names the leader, the client goes there at once: a redirect costs no wait. Any other
failure (a dead address, no leader yet, an outcome unknown) moves it to the next replica after a
jittered backoff that doubles up to a cap: short, because an election takes well under a second
and a client sleeping for seconds turns a fast failover into a slow one; jittered, so that a
thousand workers cut off at once do not come back in step. A new call, or a session that worked
for a while, starts the backoff afresh. Redirects without a pause are bounded: two replicas that
each name the other as leader (one of them stale) cost one backoff per round, not a busy loop.

Pure: the caller sleeps, and passes the random source.
"""

from __future__ import annotations

from collections.abc import Sequence

TYPE_CHECKING = False  # not typing's: importing it is ~2 ms of every command's start
if TYPE_CHECKING:
    from typing import Protocol

    class Draws(Protocol):
        """A random source: random.Random, or client.channel's UrandomDraws."""

        def random(self) -> float: ...

INITIAL_BACKOFF_S = 0.02


class LeaderRoute:
    def __init__(self, addresses: Sequence[str], rng: Draws, max_backoff_s: float,
                 initial_backoff_s: float = INITIAL_BACKOFF_S) -> None:
        if not addresses:
            raise ValueError("no controller addresses")
        self.addresses = list(addresses)
        self.target = self.addresses[0]
        self.max_backoff_s = max_backoff_s
        self.initial_backoff_s = initial_backoff_s
        self._rng = rng
        self._backoff_s = initial_backoff_s
        self._hops = 0  # redirects followed without a pause since the last one

    def redirected(self, tried: str, leader: str) -> bool:
        """`tried` refused and named `leader`: the next call goes there. True when it may go at once;
        False when it should wait first (the hint points back where it was, or redirects went round)."""
        self.target = leader
        self._hops += 1
        if leader != tried and self._hops <= len(self.addresses):
            return True
        self._hops = 0
        return False

    def failed(self, tried: str) -> None:
        """`tried` did not answer, or could not serve: the next call goes to the next replica."""
        self.target = self.next_after(tried)

    def next_after(self, address: str) -> str:
        if address not in self.addresses:
            return self.addresses[0]
        return self.addresses[(self.addresses.index(address) + 1) % len(self.addresses)]

    def pause_s(self) -> float:
        """How long to wait before the next try: jittered around the backoff, which then doubles."""
        pause = self._backoff_s * (0.5 + self._rng.random())
        self._backoff_s = min(self._backoff_s * 2, self.max_backoff_s)
        return pause

    def next_pause_s(self) -> float:
        """The backoff the next pause is jittered around (a caller's deadline check)."""
        return self._backoff_s

    def reset(self) -> None:
        """A new call, or a session that worked: the next failure starts the backoff afresh."""
        self._backoff_s = self.initial_backoff_s
        self._hops = 0
