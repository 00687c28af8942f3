"""The counted simulation: a trace on hosts of one slot, the scheduler's rules on slot counts.

Theory of operation. On a machine whose hosts have one slot each, where every
job names only its slots and its estimate in one queue ordered first come,
first served (an SWF or a synthetic trace as `xce sim` makes it, with no
what-if but the queue's backfill), which hosts a job gets changes nothing:
only how many are free does. So the scheduler's decisions can be made on
counts, without the state machine, the view or the pass's host checks, by
the rules of scheduler/backfill.py as they act on such a machine:

- a pass after each event (arrivals before ends at equal times; ends at
  equal times in the order their jobs started), or with the ordering
  "time" one pass once every end and then every arrival of a time are in
  (engine.Settings.ordering); jobs in arrival order;
- a job that fits starts; the first that does not is its queue's head:
  `any` lets any later job that fits start, `none` none of them;
- `easy`: the head's shadow time is the first expected end (start plus
  estimate; a job past its estimate is expected 1 ms from now) at which the
  slots free now plus those of every job ending by then (all those ending
  at that very time) reach its size; the extra slots are those over its
  size then; a later job starts if it fits now and ends by the shadow time,
  or takes no more than the extra slots left (which it then uses up);
- `end_before`: the head's reservation is reckoned so in the first pass in
  which it waits and kept while it waits; a later job starts if it fits now
  and ends strictly before it.

The faithful path (simulator/engine.py: the real apply and the real
scheduler) is the reference: tests/sim/test_counting.py holds the two to the
same start and end for every job on every shared trace and on seeded wide-job
traces, under each mode, and `xce sim --faithful` runs the reference. Any
other workload (hosts of several slots, several queues, run limits, a
recording, actions, what-ifs on the scheduler) runs on the faithful path.

Pure: a workload in, the engine's Result out; no clock, no randomness.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Literal

from controller.fsm import validation
from simulator import engine
from simulator.engine import Finished, Result, Sample, Settings
from simulator.whatif import WhatIf
from simulator.workload import SimJob, Workload
from xce.v1 import api_pb2 as api

MODES = ("any", "none", "easy", "end_before")
ARRIVAL, END = 1, 3  # engine.py's order at equal times


def run(workload: Workload, settings: Settings | None = None,
        progress: Callable[[int, int, int], None] | None = None, faithful: bool = False) -> Result:
    """The workload simulated: counted where that gives the faithful path's results, else (or when
    `faithful`) on the faithful path."""
    settings = settings or Settings()
    counted = None if faithful else countable(workload, settings)
    if counted is None:
        return engine.simulate(workload, settings, progress)
    return simulate(counted, settings.ordering)


def countable(workload: Workload, settings: Settings) -> Workload | None:
    """The workload with its queues' what-ifs applied, if the counted simulation gives the faithful
    path's results for it with these settings; else None."""
    if replace(settings, whatif=WhatIf(), ordering="each") != Settings() or settings.whatif.scheduler:
        return None
    changed = replace(workload, queues=[settings.whatif.queue(q) for q in workload.queues])
    return changed if why_not(changed) is None else None


def why_not(workload: Workload) -> str | None:
    """None if the counted simulation gives the faithful path's results for this workload (its queues as
    they are); else why not."""
    if workload.actions:
        return "the workload has users' actions"
    if len(workload.queues) != 1:
        return "more than one queue"
    queue = workload.queues[0]
    mode = queue.backfill or "any"
    if mode not in MODES or queue != api.Queue(name=queue.name, backfill=queue.backfill):
        return f"queue {queue.name} has settings other than backfill any, none, easy or end_before"
    if any(h.slots != 1 for h in workload.hosts) or any(
            h != api.HostSpec(name=h.name, slots=1) for h in workload.hosts):
        return "hosts of more than one slot (or with more than a name and a slot)"
    for job in workload.jobs:
        spec = job.spec
        plain = api.JobSpec(command=spec.command, queue=queue.name, slots=spec.slots, user=spec.user,
                            estimate_s=spec.estimate_s)
        if spec != plain or job.held or not 0 < spec.estimate_s <= validation.MAX_RUN_LIMIT_S \
                or not 0 < spec.slots <= len(workload.hosts):
            return f"job {job.key} asks for more than slots and an estimate (of at most ten years)"
    return None


def simulate(workload: Workload, ordering: Literal["each", "time"] = "each") -> Result:
    """The workload's jobs, counted (why_not() must be None); `ordering` as engine.Settings'."""
    return _Counted(workload, ordering).run()


class _Counted:
    def __init__(self, workload: Workload, ordering: Literal["each", "time"]) -> None:
        self.ordering = ordering
        self.jobs: Sequence[SimJob] = workload.jobs
        self.mode = workload.queues[0].backfill or "any"
        self.queue = workload.queues[0].name
        self.free = len(workload.hosts)
        self.procs = [job.spec.slots for job in self.jobs]
        self.estimate = [job.spec.estimate_s * 1000 for job in self.jobs]
        self.pending: list[int] = []  # job indices, in arrival order
        self.running: list[tuple[int, int, int]] = []  # (expected end ms, start order, job), ascending
        self.slots = len(workload.hosts)
        self.entry: dict[int, tuple[int, int, int]] = {}  # a running job's place in `running`
        self.kept: tuple[int, int] | None = None  # end_before: (head, its reservation ms)
        self.heap: list[tuple[int, int, int, int]] = []
        self.seq = 0
        self.result = Result([], [], len(workload.hosts), path="counted")
        span = (self.jobs[-1].submit_ms - self.jobs[0].submit_ms) if self.jobs else 0
        self.sample_ms = max(1000, span // 1000)
        self.next_sample = -(10**18)

    def run(self) -> Result:
        for i, job in enumerate(self.jobs):
            self._push(job.submit_ms, ARRIVAL, i)
        heap = self.heap
        while heap:
            now, kind, _, i = heapq.heappop(heap)
            if self.ordering == "time":  # every end at this time, then every arrival, then the pass
                events = [(kind, i)]
                while heap and heap[0][0] == now:
                    events.append(heapq.heappop(heap)[1::2])
                for kind, i in sorted(events, key=lambda e: e[0] != END):
                    self._event(kind, i, now)
            else:
                self._event(kind, i, now)
            if self.pending:
                self.result.passes += 1
                self._pass(now)
            if now >= self.next_sample:
                self.result.samples.append(Sample(now, len(self.pending), self.slots - self.free))
                self.next_sample = now + self.sample_ms
        return self.result

    def _event(self, kind: int, i: int, now: int) -> None:
        if kind == ARRIVAL:
            self.pending.append(i)
        else:
            self._ended(i, now)

    # -------------------------------------------------------------- the pass

    def _pass(self, now: int) -> None:
        mode, procs, pending = self.mode, self.procs, self.pending
        started: list[int] = []
        head = -1
        at = extra = 0
        for i in pending:
            size = procs[i]
            if head < 0:
                if size <= self.free:
                    self._start(i, now, started)
                    continue
                if mode == "any":
                    continue
                if mode == "none":
                    break
                head = i
                at, extra = self._reservation(i, now)
                continue
            if self.free == 0:
                break
            if size > self.free:
                continue
            end = now + self.estimate[i]
            if end < at or mode == "easy" and end == at:
                self._start(i, now, started)
            elif mode == "easy" and size <= extra:
                extra -= size
                self._start(i, now, started)
        if mode == "end_before":
            self.kept = (head, at) if head >= 0 else None
        if started:
            gone = set(started)
            self.pending = [i for i in pending if i not in gone]

    def _reservation(self, head: int, now: int) -> tuple[int, int]:
        """(the head's shadow time or kept reservation, the extra slots then)."""
        if self.mode == "end_before" and self.kept is not None and self.kept[0] == head:
            return self.kept[1], 0
        need, free = self.procs[head], self.free
        running, procs = self.running, self.procs
        soonest = now + 1  # a job past its estimate is expected to end any moment
        for k, (end, _, i) in enumerate(running):
            free += procs[i]
            if free >= need:
                at = max(end, soonest)
                for later, _, j in running[k + 1:]:  # every job ending at the very same time
                    if max(later, soonest) != at:
                        break
                    free += procs[j]
                return at, free - need
        raise AssertionError("a head larger than the machine")  # (why_not() leaves such jobs out)

    # -------------------------------------------------------------- starts and ends

    def _start(self, i: int, now: int, started: list[int]) -> None:
        self.free -= self.procs[i]
        started.append(i)
        self.seq += 1
        self.entry[i] = entry = (now + self.estimate[i], self.seq, i)
        insort(self.running, entry)
        self._push(now + self.jobs[i].run_ms, END, i)

    def _ended(self, i: int, now: int) -> None:
        self.free += self.procs[i]
        entry = self.entry.pop(i)
        del self.running[bisect_left(self.running, entry)]
        start = entry[0] - self.estimate[i]
        job = self.jobs[i]
        self.result.finished.append(Finished(job.key, i + 1, self.queue, job.spec.user, job.spec.slots,
                                             job.submit_ms, start, now, api.DONE))

    def _push(self, time_ms: int, kind: int, i: int) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (time_ms, kind, self.seq, i))
