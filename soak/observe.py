"""What the soak watches while it runs: dispatches, the leader, memory.

- `DispatchWatch`: a Follower of its own (the scheduler's view code) that
  notes when each job is seen going to RUN, with the event's revision: after
  a leader kill, the first such event past the last revision seen before the
  kill is the first new committed dispatch.
- `LeaderWatch`: which replica leads, sampled every 0.25 s.
- `MemoryWatch`: the resident memory of every daemon process, every second,
  by process (a restarted daemon is a new series).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from client.channel import Client, XceError
from client.credentials import Credentials
from scheduler.follower import Follower
from scheduler.view import View
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log


class _DispatchView(View):
    def __init__(self, on_run: Callable[[int, int], None]) -> None:
        super().__init__()
        self._on_run = on_run

    def _apply_event(self, event: log.Event) -> None:
        if event.revision > self.revision:
            for change in event.changes:
                if change.table == "jobs" and not change.deleted:
                    job = api.Job.FromString(change.value)
                    before = self.tables["jobs"].get(change.key)
                    was_pending = before is None or api.Job.FromString(before).state == api.PEND
                    if job.state == api.RUN and was_pending:
                        self._on_run(job.id, event.revision)
        super()._apply_event(event)


class DispatchWatch:
    def __init__(self, addresses: list[str], credentials: Credentials) -> None:
        self.dispatches: list[tuple[float, int]] = []  # (wall time, revision)
        self.follower = Follower(addresses, credentials, _DispatchView(self._seen))

    def _seen(self, job_id: int, revision: int) -> None:
        self.dispatches.append((time.time(), revision))

    @property
    def revision(self) -> int:
        return self.follower.view.revision

    def first_after(self, when: float, revision: int) -> float | None:
        for seen, rev in list(self.dispatches):
            if seen >= when and rev > revision:
                return seen
        return None

    def start(self) -> None:
        self.follower.start()

    def stop(self) -> None:
        self.follower.stop()


class LeaderWatch:
    def __init__(self, addresses: list[str], credentials: Credentials) -> None:
        self.addresses = addresses
        self.credentials = credentials
        self.samples: list[tuple[float, int]] = []  # (wall time, leader id or 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="leader-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        clients = [Client([a], self.credentials, deadline_s=0.2, call_timeout_s=0.2, follow_leader=False)
                   for a in self.addresses]
        try:
            while not self._stop.wait(0.25):
                leader = 0
                for replica_id, client in enumerate(clients, start=1):
                    try:
                        if client.status(local_only=True).replicas[0].role == "leader":
                            leader = replica_id
                            break
                    except XceError:
                        continue
                self.samples.append((time.time(), leader))
        finally:
            for client in clients:
                client.close()


class MemoryWatch:
    def __init__(self, processes: Callable[[], dict[str, int]]) -> None:
        self._processes = processes  # name -> pid, asked anew every sample
        self.samples: dict[str, list[tuple[float, float]]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memory-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            now = time.time()
            for name, pid in self._processes().items():
                rss = rss_mb(pid)
                if rss is not None:
                    self.samples.setdefault(f"{name}#{pid}", []).append((now, rss))


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None
