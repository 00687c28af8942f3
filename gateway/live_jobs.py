"""Every live job and host as the gateway's event hub sees them, for `GET /xce/v1/stats`.

Theory of operation. The hub's thread hands `observe` each message of its Sync stream: a snapshot
(read aside and swapped in whole at its end, so that a re-read after a gap never shows half a
cluster), then events, each applied once (an event at or below the revision taken is one a
snapshot already held). Records become gateway/stats.py's views and the tally follows them. The
stream sends a progress mark every second, so `observe` is also the minute timer: the first message
after a minute mark samples the tally into the ring. While the stream is down nothing is sampled,
and those minutes stay empty rather than repeat a value nobody saw. Readers (the event loop) take
the lock for the time of one computation over the tally, never over every job.

A failure of ours here must not end the hub's stream (and every client's events): it is logged, the
counts say they are unavailable, and the next snapshot (the hub's next stream) starts them afresh.
"""

from __future__ import annotations

import logging
import struct
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from gateway import stats
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log_pb

logger = logging.getLogger("xce.gateway")


class LiveJobs:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._jobs: dict[int, stats.JobView] = {}
        self._hosts: dict[str, stats.HostView] = {}
        self._tally = stats.Tally()
        self._samples: deque[stats.Sample] = deque(maxlen=stats.SERIES_STEPS)
        self._loading: tuple[dict[int, stats.JobView], dict[str, stats.HostView]] | None = None
        self._next_sample_ms = 0
        self.estimated_until_ms = 0   # samples before this are reconstructed from the first snapshot
        self.revision = 0
        self.ready = False
        self.error = ""

    def observe(self, message: log_pb.SyncMessage) -> None:
        """One message of the hub's stream (its thread)."""
        try:
            self._observe(message)
        except Exception as exc:  # noqa: BLE001 - see the module's opening: the hub's stream lives on
            logger.exception("live counts failed")
            with self._lock:
                self.ready, self.error, self._loading = False, f"{type(exc).__name__}: {exc}", None

    def _observe(self, message: log_pb.SyncMessage) -> None:
        body = message.WhichOneof("body")
        if body == "snapshot_begin":
            self._loading = ({}, {})
        elif body == "snapshot_chunk" and self._loading is not None:
            jobs, hosts = self._loading
            for record in message.snapshot_chunk.records:
                if record.table == "jobs":
                    view = stats.job_view(api.Job.FromString(record.value))
                    jobs[view.id] = view
                elif record.table == "hosts":
                    host = stats.host_view(api.Host.FromString(record.value))
                    hosts[host.name] = host
        elif body == "snapshot_end" and self._loading is not None:
            self._install(*self._loading, message.snapshot_end.revision)
            self._loading = None
        elif body == "event" and self._loading is None and self.ready:
            self._apply(message.event)
        self._tick()

    def _install(self, jobs: dict[int, stats.JobView], hosts: dict[str, stats.HostView],
                 revision: int) -> None:
        tally = stats.Tally()
        for view in jobs.values():
            tally.change(None, view)
        now_ms = int(self._clock() * 1000)
        first = not self._samples
        estimates = stats.reconstruct(jobs.values(), list(hosts.values()), now_ms) if first else []
        with self._lock:
            self._jobs, self._hosts, self._tally = jobs, hosts, tally
            if estimates:
                self._samples.extend(estimates)
                self.estimated_until_ms = now_ms
            self.revision = max(self.revision, revision)
            self.ready, self.error = True, ""

    def _apply(self, event: log_pb.Event) -> None:
        if event.revision <= self.revision:
            return
        with self._lock:
            for change in event.changes:
                if change.table == "jobs" and len(change.key) == 8:
                    job_id = struct.unpack(">Q", change.key)[0]
                    after = None if change.deleted else stats.job_view(api.Job.FromString(change.value))
                    before = self._jobs.pop(job_id, None)
                    if after is not None:
                        self._jobs[job_id] = after
                    self._tally.change(before, after)
                elif change.table == "hosts":
                    name = change.key.decode(errors="replace")
                    if change.deleted:
                        self._hosts.pop(name, None)
                    else:
                        self._hosts[name] = stats.host_view(api.Host.FromString(change.value))
            self.revision = event.revision

    def _tick(self) -> None:
        now_ms = int(self._clock() * 1000)
        if not self.ready or now_ms < self._next_sample_ms:
            return
        mark = now_ms // stats.STEP_MS * stats.STEP_MS
        with self._lock:
            if not self._samples or self._samples[-1].time_ms < mark:
                self._samples.append(self._tally.sample(mark, list(self._hosts.values())))
        self._next_sample_ms = mark + stats.STEP_MS

    def answer(self, viewer: stats.Viewer) -> dict[str, Any]:
        """The caller's counts (the event loop); call only when `ready`."""
        now_ms = int(self._clock() * 1000)
        with self._lock:
            out = stats.answer(viewer, self._tally, list(self._hosts.values()), list(self._samples), now_ms,
                               self.estimated_until_ms)
            out["revision"] = str(self.revision)
        return out
