"""The soak's load generator: submits at a set rate, and holds, kills and stops some.

Seeded: the same seed gives the same sequence of requests (their timing
follows the cluster). Every acknowledged submit, kill and stop is recorded
with the time it was acknowledged; the checks compare these with what the
workers and the controller say happened.

Job kinds (shares of submits): plain `sleep` jobs of 0-3 s and 1-4 slots in
the three queues with priorities 0-10 (82 %; a fifth of them reserve a GPU
on each of their hosts, rusage[gpu=1]: the workers have two each; of the
others some 15 % run 2-3 slots one per host, span[ptile=1]); held at submit
and released 1-3 s later (6 %); killed 0-3 s after submit, pending or running (6 %); "tick"
jobs that write a time stamp every 0.1 s for 6 s and are stopped once
running (6 %): the generator resumes one 2 s after its ticks have paused for
a second, or STOP_BOUND_S after the stop if they never do (the checks then
find that stop without effect, unless the job had ended by then).
"""

from __future__ import annotations

import heapq
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from client.channel import Client, XceError
from client.credentials import Credentials
from soak.linear.history import History
from soak.recorded import RecordedClient
from xce.v1 import api_pb2 as api

QUEUES = ("normal", "priority", "idle")
STOP_BOUND_S = 10.0  # a committed stop reaches its job within this, failovers included


def load_name(name: str) -> bool:
    """A name the load gives one submit only (`soak-KIND-N`); the probes' repeat."""
    kind, _, number = name.removeprefix("soak-").rpartition("-")
    return name.startswith("soak-") and bool(kind) and number.isdigit()


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class LoadRecord:
    acknowledged: dict[int, int] = field(default_factory=dict)  # job -> when its submit was acknowledged
    order: list[int] = field(default_factory=list)  # the load's acknowledged jobs, in order (readers' picks)
    kills: dict[int, int] = field(default_factory=dict)         # job -> when its kill was acknowledged
    stops: dict[int, int] = field(default_factory=dict)         # job -> when its stop was acknowledged
    stop_log: dict[int, list[str]] = field(default_factory=dict)  # job -> what the generator saw
    holds: int = 0
    failed_submits: int = 0  # not acknowledged (the outcome is unknown to us; not counted as lost)
    errors: list[str] = field(default_factory=list)


class LoadGenerator:
    def __init__(self, addresses: list[str], credentials: Credentials, rate: float, seed: int,
                 ticks_dir: Path, history: History, on_ack: Callable[[int], None] = lambda job: None) -> None:
        self.rate = rate
        self.rng = random.Random(seed)
        self.ticks_dir = ticks_dir
        ticks_dir.mkdir(parents=True, exist_ok=True)
        client = Client(addresses, credentials, deadline_s=30.0, call_timeout_s=2.0)
        self.client = RecordedClient("load", client, history)
        self._submitted = 0
        self._on_ack = on_ack
        self.record = LoadRecord()
        self._stop = threading.Event()
        self._later: list[tuple[float, int, Callable[[], None]]] = []  # (when, seq, action)
        self._seq = 0
        self._thread = threading.Thread(target=self._run, name="load", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def abort(self) -> None:
        """Stop submitting and forget what was planned (the run is being torn down)."""
        self._stop.set()
        self._later.clear()

    def stop(self) -> None:
        """Stop submitting; actions already planned (releases, resumes) are still done."""
        self._stop.set()
        self._thread.join(timeout=120)
        while self._later:
            when, _, action = heapq.heappop(self._later)
            time.sleep(max(0.0, when - time.monotonic()))
            self._do(action)
        self.client.close()

    def _later_do(self, delay_s: float, action: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self._later, (time.monotonic() + delay_s, self._seq, action))

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            while self._later and self._later[0][0] <= time.monotonic():
                self._do(heapq.heappop(self._later)[2])
            if time.monotonic() >= next_at:
                self._submit_one()
                next_at += self.rng.expovariate(self.rate)
            self._stop.wait(max(0.0, min(next_at, self._later[0][0] if self._later else next_at)
                                - time.monotonic()))

    def _do(self, action: Callable[[], None]) -> None:
        try:
            action()
        except XceError as exc:  # the job ended meanwhile, or the cluster was busy: not an error of ours
            self.record.errors.append(str(exc)[:200])

    def _submit_one(self) -> None:
        rng = self.rng
        kind = rng.choices(("plain", "hold", "kill", "tick"), weights=(82, 6, 6, 6))[0]
        spec = api.JobSpec(command=["sleep", f"{rng.uniform(0, 3):.2f}"], slots=rng.randint(1, 4),
                           queue=rng.choice(QUEUES), priority=rng.randint(0, 10),
                           name=f"soak-{kind}-{self._submitted}")
        self._submitted += 1
        if kind == "plain" and rng.random() < 0.2:  # a GPU on each of its hosts: checked per resource
            spec.resource_req = "rusage[gpu=1]"
        elif kind == "plain" and rng.random() < 0.15:  # over 2-3 hosts, whatever is free: all or nothing
            spec.slots, spec.resource_req = rng.randint(2, 3), "span[ptile=1]"
        if kind == "tick":
            # Ticks by the host's uptime clock, which no wall-clock fault moves (the soak turns it into
            # its own wall time, run.py); 10 ms is fine enough for ticks 0.1 s apart.
            script = (f'f={self.ticks_dir}/$XCE_JOB_ID; i=0; while [ $i -lt 60 ]; do '
                      'read up _ < /proc/uptime; echo "$up" >> "$f"; sleep 0.1; i=$((i+1)); done')
            spec.command[:] = ["sh", "-c", script]
            spec.slots = 1
        delay = rng.uniform(1, 3) if kind == "hold" else rng.uniform(0, 3)
        try:
            job = self.client.submit(spec)
        except XceError as exc:
            self.record.failed_submits += 1
            self.record.errors.append(f"submit: {exc}"[:200])
            return
        self.record.acknowledged[job.id] = _now_ms()
        self.record.order.append(job.id)
        self._on_ack(job.id)
        if kind == "hold":
            self._do(lambda: self._hold(job.id, delay))
        elif kind == "kill":
            self._later_do(delay, lambda: self._kill(job.id))
        elif kind == "tick":
            self._later_do(1.0, lambda: self._stop_when_running(job.id, tries=10))

    def _hold(self, job_id: int, release_after_s: float) -> None:
        self.client.control(job_id, api.HOLD)  # refused if it was dispatched already: fine
        self.record.holds += 1
        self._later_do(release_after_s, lambda: self._do_control(job_id, api.RELEASE))

    def _kill(self, job_id: int) -> None:
        self.client.control(job_id, api.KILL)
        self.record.kills[job_id] = _now_ms()

    def _stop_when_running(self, job_id: int, tries: int) -> None:
        job = self.client.get(job_id)
        if job.state == api.RUN and job.pid > 0:
            self.client.control(job_id, api.STOP)
            self.record.stops[job_id] = _now_ms()
            self._later_do(0.5, lambda: self._resume_when_paused(job_id, time.monotonic() + STOP_BOUND_S))
        elif job.state in (api.PEND, api.RUN) and tries > 0:
            self._later_do(0.5, lambda: self._stop_when_running(job_id, tries - 1))

    def _resume_when_paused(self, job_id: int, deadline: float) -> None:
        try:
            last = (self.ticks_dir / str(job_id)).stat().st_mtime
        except OSError:
            last = 0.0  # stopped before its first tick
        quiet = time.time() - max(last, self.record.stops[job_id] / 1000)
        log = self.record.stop_log.setdefault(job_id, [])
        if quiet >= 1.0:
            log.append(f"{time.time():.2f} paused (quiet {quiet:.1f} s); resume in 2 s")
            self._later_do(2.0, lambda: self._do_control(job_id, api.RESUME))
        elif time.monotonic() < deadline:
            self._later_do(0.2, lambda: self._resume_when_paused(job_id, deadline))
        else:
            log.append(f"{time.time():.2f} no pause seen; resume")
            self._do_control(job_id, api.RESUME)

    def _do_control(self, job_id: int, action: api.ControlAction) -> None:
        self.client.control(job_id, action)
