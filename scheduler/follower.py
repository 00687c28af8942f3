"""Keeps a View in step with the cluster: the Sync stream's driver (H3).

Theory of operation. One thread holds a Sync stream to the replica it
believes leads, asking for the events after the view's revision (a snapshot
comes instead when that is too old or the view is empty). A follower's
refusal names the leader, which it follows at once; a dead replica, no
leader, or "resync required" (OUT_OF_RANGE: its revision was compacted)
moves it on after a capped, jittered backoff (the route every client
follows: client/leader_route.py), the last also clearing its revision so the
next stream starts with a snapshot. A stream that stays
silent for SILENCE_S (no event, no progress mark) is cancelled and
reconnected. It never gives up until stopped.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Sequence

import grpc

from client.credentials import Credentials
from client.grpc_transport import channel_options, leader_hint
from client.leader_route import LeaderRoute
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
                 clock: Clock = REAL_CLOCK) -> None:
        self.addresses = list(addresses)
        self.credentials = credentials
        self.view = view or View()
        self.lock = threading.Lock()  # held while the view changes; readers take it too
        self._on_change = on_change
        self._route = LeaderRoute(self.addresses, rng or random.Random(), MAX_BACKOFF_S, INITIAL_BACKOFF_S)
        self._clock = clock
        self._stop = threading.Event()
        self._call: grpc.Call | None = None
        self.serving: str | None = None  # the replica whose stream is open and has spoken: it leads
        self._last_heard = clock.monotonic_s()
        self.connections = 0
        self.snapshots = 0  # resyncs by snapshot
        self.resumes = 0    # resyncs by events
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, daemon=True, name="sync-follower")
        self._thread.start()
        threading.Thread(target=self._watchdog, daemon=True, name="sync-watchdog").start()

    def stop(self) -> None:
        self._stop.set()
        call = self._call
        if call is not None:
            call.cancel()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def run(self) -> None:
        route = self._route
        while not self._stop.is_set():
            target = route.target
            try:
                self._stream(target)
            except grpc.RpcError as exc:
                code = exc.code()
                leader = leader_hint(exc)
                if leader and leader != target and route.redirected(target, leader):
                    continue
                if code == grpc.StatusCode.OUT_OF_RANGE:
                    with self.lock:
                        self.view.compacted()
                    continue
                if not leader or leader == target:
                    route.failed(target)
                if not self._stop.is_set():
                    log_.info("sync: %s from %s: %s", code.name, target, exc.details())
            self._stop.wait(route.pause_s())

    def _stream(self, target: str) -> None:
        with self.credentials.channel(target, channel_options()) as channel:
            sync = channel.unary_stream("/xce.v1.SyncService/Sync",
                                        request_serializer=log.SyncRequest.SerializeToString,
                                        response_deserializer=log.SyncMessage.FromString)
            with self.lock:
                request = self.view.sync_request()
            call = sync(request, metadata=self.credentials.metadata())
            self._call = call
            self._last_heard = self._clock.monotonic_s()
            self.connections += 1
            try:
                if self._stop.is_set():
                    return
                first = True
                for message in call:
                    self._last_heard = self._clock.monotonic_s()
                    self.serving = target
                    self._route.reset()  # it served: a failure after this one is a first one
                    with self.lock:
                        self.view.apply(message)
                    kind = message.WhichOneof("body")
                    if kind == "snapshot_end":
                        self.snapshots += 1
                        log_.info("sync: snapshot of revision %d from %s", self.view.revision, target)
                    elif first and kind == "event":
                        self.resumes += 1
                        log_.info("sync: resumed from %s with events after revision %d", target,
                                  request.from_revision)
                    first = first and kind == "progress"
                    if self._on_change is not None and message.WhichOneof("body") != "progress":
                        self._on_change(self.view)
            finally:
                self._call = None
                self.serving = None
                call.cancel()

    def _watchdog(self) -> None:
        while not self._stop.wait(0.5):
            call = self._call
            if call is not None and self._clock.monotonic_s() - self._last_heard > SILENCE_S:
                log_.info("sync: %s silent for %.0f s; reconnecting", self._route.target, SILENCE_S)
                call.cancel()
