"""Keeps a View in step with the cluster: the Sync stream's consumer (H3).

Theory of operation. One thread follows the Sync stream with the loop every follower shares
(client/sync_follow.py: which replica, redirects, backoff, the silence watchdog), asking for the
events after the view's revision (a snapshot comes instead when that is too old or the view is
empty) and applying each message to the view under `lock`. Its settings are the scheduler's: a
backoff from 0.05 s capped at 0.1 s, because a scheduler asleep through a failover is a cluster
that dispatches nothing; a stream silent for SILENCE_S (no event, no progress mark) cancelled and
opened again; OUT_OF_RANGE (its revision compacted) clears the view's revision so the next stream,
opened at once, starts with a snapshot; any other refusal retried; it never gives up until stopped.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Sequence

from client.credentials import Credentials
from client.grpc_transport import StreamChannels
from client.leader_route import LeaderRoute
from client.sync_follow import SyncFollow
from client.sync_policy import NEVER_GIVING_UP
from scheduler.view import View
from xce.clock import REAL_CLOCK, Clock
from xce.v1 import log_pb2 as log

log_ = logging.getLogger("xce.scheduler")

SILENCE_S = 2.0  # progress marks come every second
INITIAL_BACKOFF_S = 0.05
MAX_BACKOFF_S = 0.1  # one stream: retrying fast after a failover costs little, sleeping through it much


class Follower:
    def __init__(self, addresses: Sequence[str], credentials: Credentials, view: View | None = None,
                 on_change: Callable[[View], None] | None = None, rng: random.Random | None = None,
                 clock: Clock = REAL_CLOCK, metrics_address: str = "") -> None:
        """`metrics_address`: where this daemon serves its metrics, said in each stream's request
        (the leader shows it in Status)."""
        self.addresses = list(addresses)
        self.metrics_address = metrics_address
        self.credentials = credentials
        self.view = view or View()
        self.lock = threading.Lock()  # held while the view changes; readers take it too
        self._on_change = on_change
        self._stop = threading.Event()
        route = LeaderRoute(self.addresses, rng or random.Random(), MAX_BACKOFF_S, INITIAL_BACKOFF_S)
        # A gRPC channel of its own per stream (client/grpc_transport.py StreamChannels says why).
        self._follow = SyncFollow(StreamChannels(credentials), route, credentials.metadata, self._request,
                                  self._stop, clock.monotonic_s, NEVER_GIVING_UP,
                                  on_compacted=self._compacted, silence_s=SILENCE_S, give_up_s=None,
                                  logger=log_)
        self._opened = log.SyncRequest()  # the last stream's request
        self._first = True  # no event or snapshot yet on the last stream
        self.connections = 0
        self.snapshots = 0  # resyncs by snapshot
        self.resumes = 0    # resyncs by events
        self._thread: threading.Thread | None = None

    @property
    def serving(self) -> str | None:
        """The replica whose stream is open and has spoken: it leads."""
        return self._follow.serving

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, daemon=True, name="sync-follower")
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._follow.cancel()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def run(self) -> None:
        for message in self._follow.messages():
            with self.lock:
                self.view.apply(message)
            kind = message.WhichOneof("body")
            self._count(kind)
            if self._on_change is not None and kind != "progress":
                self._on_change(self.view)

    def _request(self) -> log.SyncRequest:
        """A new stream's request: the events after the view's revision (or a snapshot)."""
        with self.lock:
            request = self.view.sync_request()
        request.metrics_address = self.metrics_address
        self._opened, self._first = request, True
        self.connections += 1
        return request

    def _compacted(self) -> None:
        """The view's revision was compacted on the leader: the next stream starts with a snapshot."""
        with self.lock:
            self.view.compacted()

    def _count(self, kind: str | None) -> None:
        if kind == "snapshot_end":
            self.snapshots += 1
            log_.info("sync: snapshot of revision %d from %s", self.view.revision, self.serving)
        elif self._first and kind == "event":
            self.resumes += 1
            log_.info("sync: resumed from %s with events after revision %d", self.serving,
                      self._opened.from_revision)
        self._first = self._first and kind == "progress"
