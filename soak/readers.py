"""The soak's readers: clients that only read, each starting at a replica of its own.

Reads are what a stale replica would get wrong (a follower answering from its own state, a cut-off
leader that still thinks it leads), so each reader prefers a different replica: a correct build
refuses a read anywhere but at a confirmed leader (ReadIndex) and the client follows the leader; a
broken one answers where it stands, and the history shows it. Each job the load has just seen
acknowledged is read at once by one reader (in turn: each replica gets its share), where a replica
that has not yet applied it would answer NOT_FOUND; between those, each reader gets a known job
(mostly a recent one) and now and then lists the jobs not yet over. Every read goes into the
history (recorded.py). Seeded, like the load.
"""

from __future__ import annotations

import queue
import random
import threading
from collections.abc import Callable

from client.channel import Client, XceError
from client.credentials import Credentials
from soak.linear.history import History
from soak.recorded import RecordedClient

ACTIVE = ("state:in:PEND,PSUSP,RUN,USUSP,SSUSP,UNKWN",)
LIST_EVERY = 8  # one read in this many is a list


class Readers:
    def __init__(self, addresses: list[str], credentials: Credentials, history: History,
                 known: Callable[[], list[int]], seed: int, period_s: float = 0.25) -> None:
        self.known, self.period_s = known, period_s
        self.clients: list[RecordedClient] = []
        for i, address in enumerate(addresses):
            client = Client(addresses, credentials, deadline_s=10.0, call_timeout_s=2.0)
            client.prefer(address)
            self.clients.append(RecordedClient(f"reader-{i + 1}", client, history))
        self.reads = 0
        self._fresh: list[queue.SimpleQueue[int]] = [queue.SimpleQueue() for _ in self.clients]
        self._turn = 0
        self._rng = random.Random(seed * 7919 + 1)
        self._stop = threading.Event()
        pairs = zip(self.clients, self._fresh, strict=True)
        self._threads = [threading.Thread(target=self._run, args=(c, q, random.Random(self._rng.random())),
                                          name=c.name, daemon=True) for c, q in pairs]

    def acknowledged(self, job_id: int) -> None:
        """A job's submit was just acknowledged (the load's thread): one reader reads it at once."""
        self._fresh[self._turn % len(self._fresh)].put(job_id)
        self._turn += 1

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        for thread in self._threads:
            if thread.is_alive():
                thread.join(timeout=60)
        for client in self.clients:
            client.close()

    def _run(self, client: RecordedClient, fresh: queue.SimpleQueue[int], rng: random.Random) -> None:
        count = 0
        while not self._stop.is_set():
            try:
                pick: int | None = fresh.get(timeout=self.period_s * rng.uniform(0.5, 1.5))
            except queue.Empty:
                pick = None
            if self._stop.is_set():
                break
            count += 1
            try:
                if pick is not None:
                    client.get(pick)
                elif count % LIST_EVERY == 0:
                    client.list(ACTIVE)
                else:
                    known = self.known()
                    if not known:
                        continue
                    # Mostly a recent one: where a lost or stale write shows first.
                    recent = known[-1 - min(len(known) - 1, int(rng.expovariate(0.2)))]
                    client.get(recent if rng.random() < 0.7 else rng.choice(known))
                self.reads += 1
            except XceError:
                pass  # recorded; the next read goes on
