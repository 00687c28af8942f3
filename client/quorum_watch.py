"""What a command says while the cluster cannot answer it: no quorum, no leader, no replica.

Theory of operation. A write (and a linearizable read) needs a leader that a majority of the
replicas follow. Without one, the client retries with the same request id until its deadline
(client/channel.py), which said nothing for 30 s. `QuorumWatch` runs beside the command: if the command
has not finished within `notice_s`, it asks every replica at once what it is (Status, that replica
alone, a short timeout each) and, unless a leader answers with a majority behind it (the command is
only slow), prints one line saying so: how many replicas answer, which, and what a write needs.
`gave_up` words the end of a command that ran out of time: what it asked may still take effect
once a majority is back, and a submit's request id makes its retry find it instead of a second job.

The replicas' answers only describe; the command's own calls decide.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from client.channel import Client, XceError
from client.credentials import Credentials
from xce.v1 import api_pb2 as api

NOTICE_S = 0.3  # the command is taken as waiting for a quorum after this long without an answer
PROBE_S = 0.3   # each replica's answer is waited for this long (they are asked at once)
EX_TEMPFAIL = 75  # sysexits: try again later


class Seen:
    """A replica asked, and its answer. (A plain class: the command line imports neither
    dataclasses nor typing.)"""

    __slots__ = ("address", "replica")

    def __init__(self, address: str, replica: api.ReplicaStatus | None) -> None:
        self.address = address
        self.replica = replica  # None: it did not answer


def probe(addresses: Sequence[str], ask: Callable[[str], api.ReplicaStatus]) -> list[Seen]:
    """Every replica asked at once; `ask(address)` raises XceError (or OSError) if it does not answer."""
    seen: dict[str, api.ReplicaStatus | None] = {}

    def one(address: str) -> None:
        try:
            seen[address] = ask(address)
        except (XceError, OSError):
            seen[address] = None

    threads = [threading.Thread(target=one, args=(a,), daemon=True) for a in addresses]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(PROBE_S * 3)
    return [Seen(a, seen.get(a)) for a in addresses]


def describe(seen: Sequence[Seen]) -> str:
    """One line on why the cluster cannot answer ('' if a leader with a majority answers)."""
    answering = [s for s in seen if s.replica is not None]
    majority = len(seen) // 2 + 1
    leaders = [s for s in answering if s.replica is not None and s.replica.role == "leader"]
    if leaders and len(answering) >= majority:
        return ""
    names = ", ".join(f"replica {s.replica.id} at {s.address} ({s.replica.role}, term {s.replica.term})"
                      for s in answering if s.replica is not None) or "none"
    silent = ", ".join(s.address for s in seen if s.replica is None) or "none"
    if not answering:
        head = f"no replica answers (of {len(seen)}: {silent})"
    elif len(answering) < majority:
        head = (f"the cluster has no quorum: {len(answering)} of {len(seen)} replicas answer: {names}; "
                f"not answering: {silent}; a write needs {majority}")
    else:
        head = f"no leader yet (an election?): answering {names}; not answering: {silent}"
    return head


class QuorumWatch:
    """Started beside a command; says once, after NOTICE_S, why it waits (if it is for a quorum)."""

    def __init__(self, addresses: Sequence[str], credentials: Credentials,
                 say: Callable[[str], None], waiting_for: str = "",
                 make_client: Callable[[str], Client] | None = None) -> None:
        self.addresses = list(addresses)
        self.credentials = credentials
        self.say = say
        self.waiting_for = waiting_for  # what the command waits for, said after the reason
        self.make_client = make_client or self._client
        self.said = ""
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True, name="quorum-watch")

    def __enter__(self) -> QuorumWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()

    def _client(self, address: str) -> Client:
        from client.http2 import Http2Transport

        return Client([address], self.credentials, deadline_s=PROBE_S, call_timeout_s=PROBE_S,
                      follow_leader=False, transport=Http2Transport(self.credentials))

    def _ask(self, address: str) -> api.ReplicaStatus:
        with self.make_client(address) as client:
            return client.status(local_only=True).replicas[0]

    def _watch(self) -> None:
        if self._done.wait(NOTICE_S):
            return
        line = describe(probe(self.addresses, self._ask))
        if line and not self._done.is_set():
            self.said = line
            self.say(f"{line}. {self.waiting_for}" if self.waiting_for else f"{line}.")


def gave_up(what: str, request_id: str, retry: str) -> str:
    """The words of a command that ran out of time: it may still take effect; how to retry safely."""
    words = f"{what} may still take effect once a majority of the replicas is back"
    if request_id:
        words += (f"; its request id is {request_id}: `{retry}` asks again under it, which finds it "
                  "if it was taken instead of making it twice")
    return words
