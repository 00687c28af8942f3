"""Which of this host's GPU indices each job instance or part holds.

Theory of operation. A host has `count` GPUs, indices 0..count-1 (its
[resources] gpu). A job's part on a host that reserved N of them
(rusage[gpu=N]) gets the N lowest free indices when it starts there, and
holds them until its last process here has ended (its command and its
tasks), or across a worker restart (they are journaled with the instance and
given back by `restore`). The planner counted them free; a failure here
means a record from before says otherwise, and the caller says so.
"""

from __future__ import annotations

import threading

from xce.rules import feasibility
from xce.v1 import api_pb2 as api

Key = tuple[int, int]


class GpuIndices:
    def __init__(self, count: int) -> None:
        self.count = count
        self._lock = threading.Lock()  # taken under the instances' lock too, never the other way
        self._held: dict[Key, list[int]] = {}

    def take(self, key: Key, job: api.Job, host: str) -> list[int] | None:
        """The indices the job's part on `host` holds (taken now if it holds none yet); None if
        not so many are free."""
        wanted = next((int(p.resources.get("gpu", 0)) for p in feasibility.allocation_of(job)
                       if p.host == host), 0)
        with self._lock:
            if key in self._held:
                return self._held[key]
            if not wanted or not self.count:
                return []
            held = {index for indices in self._held.values() for index in indices}
            free = [index for index in range(self.count) if index not in held]
            if len(free) < wanted:
                return None
            self._held[key] = free[:wanted]
            return self._held[key]

    def restore(self, key: Key, indices: list[int]) -> None:
        """After a restart: what the journal says the instance holds."""
        with self._lock:
            self._held[key] = list(indices)

    def release(self, key: Key) -> None:
        with self._lock:
            self._held.pop(key, None)

    def held_text(self) -> str:
        with self._lock:
            held = sorted(self._held.items())
        return ", ".join(f"{j}.{a}: {indices}" for (j, a), indices in held) or "none"
