"""The simulated cluster: the real state machine and the real scheduler on a virtual clock.

Theory of operation. One replica's state lives in memory (MemoryTables) and
every change is a log entry applied by the real `fsm.apply`, stamped with
the virtual time: the cluster's start (InitCluster, a lease), each host's
join, each submit, each decision batch, each worker report. The scheduler is
the real `Decider` (planner, pickers, allocation, backfill, preemption, fair
share) reading a real `View`, fed each applied entry's event as the Sync
stream would feed it. No Raft, no gRPC, no processes, no wall clock.

Time moves from event to event (a heap; arrivals before ends at equal
times; with Settings.ordering "time", every end and then every arrival of
a time before its passes), with passes after each event, as many as keep
making decisions (a
live scheduler passes after each change it sees, and again at once after a
batch): the published simulations pass so too (bench/published_figures.py). The simulated workers
watch the events as real workers watch their streams: a job that became
RUN on their host starts and ends after its run time (or its -W run limit:
killed, RUNLIMIT), its start time the dispatch's (they report no start
unless Settings.start_reports: see there); a job to be killed (a kill, a requeue-mode preemption) is
reported ended at once; a job suspended by a preemption is reported stopped
at once and its clock stops until it runs again. Deterministic: the same
workload and settings give the same entries, so the same figures.
"""

from __future__ import annotations

import copy
import heapq
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Literal

from controller import fsm
from controller.fsm import validation
from controller.fsm.versions import ENTRY_FORMAT
from controller.tables import MemoryTables
from scheduler import picker, planner
from scheduler.core import CoreConfig
from scheduler.decider import Decider
from scheduler.lease import Lease
from scheduler.view import View
from simulator.whatif import WhatIf
from simulator.workload import Action, SimJob, Workload
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

SCHEDULER = "sim"
# The workload's time 0 is this on the cluster's clock: apply takes a time of 0 for "none".
EPOCH_MS = 10**12
LEASE_S = 10.0**9  # for the whole run
RECOUNT_MS = 3600 * 1000  # pending reasons whose only change is in their counts: hourly (cosmetic)
PASSES_AT_ONCE = 50  # passes at one virtual time while they keep deciding (a bound against a loop)
KILLED = 9  # SIGKILL

# At equal times, in this order: what workers do at once (a start, a suspension, a kill, reported
# before the next pass), arrivals, what users do (a recording's actions), ends.
REACT, ARRIVAL, ACTION, END = 0, 1, 2, 3


@dataclass(frozen=True)
class Settings:
    default_picker: str = "fcfs"
    whatif: WhatIf = field(default_factory=WhatIf)
    max_dispatches: int = 10**6  # a pass may fill the whole machine: time does not move within it
    sample_every_ms: int = 0  # queue length and busy slots, at most this often (0: about 1,000 samples)
    # Skip the pass after a batch when it could decide nothing new (Engine.one_pass), and a pass where
    # nothing waits whose bookkeeping the next pass does the same (planner.idle); False passes after
    # every event and again after every batch, as a live scheduler does (the tests hold both to the
    # same results).
    skip_idle_passes: bool = True
    # Whether the simulated workers report each start, as real workers do. A dispatch already stamps
    # the job's start time (entry format 18), and a report at the same virtual instant changes only
    # the job's pid: without them, a quarter fewer entries (the tests hold both to the same results).
    start_reports: bool = False
    # When passes run: "each" (a pass after each event, arrivals before ends at equal times: the
    # RLScheduler code base's order, and a live scheduler's) or "time" (at each time, every end, then
    # every arrival, then the passes: AccaSim's order).
    ordering: Literal["each", "time"] = "each"

    def __post_init__(self) -> None:
        if self.ordering not in ("each", "time"):
            raise ValueError(f"ordering {self.ordering!r}: each or time")


@dataclass
class Finished:
    key: int
    job_id: int
    queue: str
    user: str
    slots: int
    submit_ms: int
    start_ms: int
    end_ms: int
    state: int
    exit_reason: str = ""
    attempts: int = 1


@dataclass
class _Run:
    attempt: int
    host: str
    generation: int
    left_ms: int  # of its run time
    since_ms: int  # when its clock last started (-1: stopped)
    limit_kill: bool  # its run limit ends it before its run time
    slots: int
    ticket: int = 0  # the end that counts (earlier ones were moved)
    ending: bool = False


@dataclass
class Sample:
    time_ms: int
    pending: int
    busy_slots: int


@dataclass
class Result:
    finished: list[Finished]
    samples: list[Sample]
    slots: int
    passes: int = 0
    batches: int = 0
    entries: int = 0
    unfinished: int = 0  # jobs still pending or running when nothing more could happen
    actions: int = 0  # a workload's actions done (holds, kills, modifications...)
    actions_refused: int = 0  # ... refused by apply, as the simulated job was not where it was then
    path: str = "faithful"  # or "counted" (simulator/counting.py)


class Engine:
    def __init__(self, workload: Workload, settings: Settings | None = None,
                 progress: Callable[[int, int, int], None] | None = None) -> None:
        self.workload = workload
        self.settings = settings or Settings()
        self.progress = progress
        self.tables = MemoryTables()
        self.index = 0
        self.now_ms = EPOCH_MS + (workload.jobs[0].submit_ms if workload.jobs else 0)
        self.view = View()
        config = planner.PlannerConfig(CoreConfig(max_dispatches=self.settings.max_dispatches),
                                       recount_ms=RECOUNT_MS)
        self.decider = Decider(Lease(SCHEDULER, LEASE_S), picker.load, self.settings.default_picker,
                               config=config)
        self._scheduler_what_if(self.settings.whatif)
        self.last_batch: api.DecisionBatch | None = None  # the last pass's decisions (interactive)
        self.last_outcomes: list[api.DecisionOutcome] = []  # per decision
        self._begun = False
        self._again = True  # whether a pass at once after the last batch could decide something new
        self._last_jobs: set[int] = set()  # the jobs the last entry changed
        # Whether a pass's placements may move what the next decides, and of what (the default picker,
        # the queues)
        self._moves_others = False
        self._moves_key: tuple[str, tuple[bytes, ...]] | None = None
        self._heap: list[tuple[int, int, int, object]] = []
        self._seq = 0
        self._jobs: dict[int, SimJob] = {}  # job id -> what it is in the workload
        self._ids: dict[int, int] = {}  # a workload job's key -> its job id
        self._runs: dict[int, _Run] = {}
        self._pending: set[int] = set()
        self._ended: set[tuple[int, int]] = set()
        self._busy = 0
        self.result = Result([], [], workload.slots)
        span = (workload.jobs[-1].submit_ms - workload.jobs[0].submit_ms) if workload.jobs else 0
        self._sample_ms = self.settings.sample_every_ms or max(1000, span // 1000)
        self._next_sample = 0

    # -------------------------------------------------------------- the run

    def run(self) -> Result:
        while self.step():
            pass
        return self.finish()

    def begin(self) -> None:
        """The cluster, its hosts and the arrivals to come (once; step() begins if need be)."""
        if self._begun:
            return
        self._begun = True
        self._start()
        for job in self.workload.jobs:
            self._push(EPOCH_MS + job.submit_ms, ARRIVAL, job)
        for action in self.workload.actions:
            self._push(EPOCH_MS + action.time_ms, ACTION, action)

    def step(self) -> bool:
        """The next event and the passes after it; False once nothing is left to happen."""
        self.begin()
        if not self._heap:
            return False
        self.now_ms, kind, _, payload = heapq.heappop(self._heap)
        if self.settings.ordering == "time":
            for each, what in self._at_once(kind, payload):
                self._event(each, what)
        else:
            self._event(kind, payload)
        self._passes()  # after each event, as a live scheduler passes after each change it sees
        self._sample()
        return True

    def _event(self, kind: int, payload: object) -> None:
        if kind == ARRIVAL:
            self._arrive(payload)  # type: ignore[arg-type]
        elif kind == ACTION:
            self._act(payload)  # type: ignore[arg-type]
        else:
            self._end(*payload)  # type: ignore[misc]

    def _at_once(self, kind: int, payload: object) -> list[tuple[int, object]]:
        """Every event at this time (the first given), ends first, each kind in its order."""
        events = [(kind, payload)]
        while self._heap and self._heap[0][0] == self.now_ms:
            _, more, _, what = heapq.heappop(self._heap)
            events.append((more, what))
        first = {END: 0, REACT: 1, ARRIVAL: 2, ACTION: 3}
        return sorted(events, key=lambda e: first[e[0]])  # (stable: each kind in its order)

    def next_event_ms(self) -> int | None:
        """When the next event happens (the workload's time), if any."""
        self.begin()
        return self._heap[0][0] - EPOCH_MS if self._heap else None

    def finish(self) -> Result:
        self.result.unfinished = len(self._pending) + len(self._runs)
        self.result.entries = self.index
        return self.result

    def snapshot(self) -> Engine:
        """A copy of the whole simulated state (tables, view, planner, workers, clock) that runs on
        independently; the workload's jobs are shared (never changed)."""
        memo: dict[int, object] = {id(job): job for job in self.workload.jobs}
        memo[id(self.workload)] = self.workload
        memo[id(self.progress)] = self.progress
        return copy.deepcopy(self, memo)

    def what_if(self, changes: WhatIf) -> list[str]:
        """Apply what-ifs from now on: the scheduler's settings at once, a queue's through a
        put_queue entry as a configuration change would. Returns the queues changed."""
        self.begin()
        self._scheduler_what_if(changes)
        changed = []
        for queue in self.view.queues():
            after = changes.queue(queue)
            if after is not queue and after != queue:
                result = self._apply(log.Entry(put_queue=log.PutQueueEntry(queue=after,
                                                                           request_id=f"sim-{self.index}")))
                if result and result[0].code != log.OK:
                    raise SimulationError(f"queue {queue.name}: {result[0].message}")
                changed.append(queue.name)
        self.settings = replace(self.settings, whatif=changes)
        return changed

    def _scheduler_what_if(self, changes: WhatIf) -> None:
        if "picker" in changes.scheduler:
            self.decider.default_picker = str(changes.scheduler["picker"])
        if "max_dispatches" in changes.scheduler:
            core = replace(self.decider.config.core, max_dispatches=int(changes.scheduler["max_dispatches"]))
            self.decider.config = replace(self.decider.config, core=core)

    def _start(self) -> None:
        queues = [self.settings.whatif.queue(q) for q in self.workload.queues]
        # Finished jobs leave the live tables at once (the report keeps them); few events are kept.
        # A job may be as wide as the machine (an SWF trace's widest), past a cluster's default cap.
        widest = max(validation.DEFAULT_MAX_SLOTS, sum(h.slots for h in self.workload.hosts))
        init = log.InitCluster(cluster_id="sim", config_digest="sim", queues=queues, events_kept=1000,
                               clean_period_ms=1, default_queue=queues[0].name if queues else "",
                               max_slots_per_job=min(widest, 2**31 - 1))
        self._apply(log.Entry(init=init))
        lease = self._apply(log.Entry(lease=log.LeaseEntry(scheduler_id=SCHEDULER,
                                                          duration_ms=int(LEASE_S * 1000))))[0]
        now_s = self.now_ms / 1000
        self.decider.lease_answered(api.LeaseResponse(granted=True, epoch=lease.lease_epoch), now_s, now_s)
        for spec in self.workload.hosts:
            self._apply(log.Entry(join_host=spec))

    def _arrive(self, job: SimJob) -> None:
        # Made in place: messages made apart are copied into the entry (the job's spec, twice). No
        # request id: one is there to answer a retry with the first result, and nothing retries here.
        entry = log.Entry()
        entry.submit.requests.add().jobs.append(job.spec)
        entry.submit.by.add(name=job.spec.user, role="user", via="sim")
        result = self._apply(entry)[0]
        if result.code != log.OK:
            raise SimulationError(f"job {job.key} was refused at submit: {result.message}")
        for job_id in result.job_ids:
            self._jobs[int(job_id)] = job
            self._ids[job.key] = int(job_id)
            self._pending.add(int(job_id))
        if job.held:  # (before any pass)
            self._act(Action(job.submit_ms, job.key, api.HOLD, by=f"user:{job.spec.user}"))

    def _act(self, action: Action) -> None:
        """A user's action on the job of its key (it arrived before: a recording's actions follow the
        submits they act on), as the request that did it: who asked is recorded, as it was."""
        job_id = self._ids.get(action.key)
        if job_id is None:  # (an action before its job's submit: not in a recording)
            self.result.actions_refused += 1
            return
        if action.control == api.REQUEUE and job_id not in self._runs:
            self.result.actions_refused += 1  # a requeue of a job that ended: it ends once here
            return
        role, _, name = action.by.partition(":")
        by = log.Principal(name=name or role, role=role if name else "user", via="sim")
        request_id = f"sim-action-{self.index}"
        if action.control:
            control = api.ControlJobRequest(job_id=str(job_id), action=action.control,  # type: ignore[arg-type]
                                            request_id=request_id)
            entry = log.Entry(control=control, by=by)
        else:
            changed = {name: getattr(action, name) for name in ("priority", "queue", "resource_req")}
            modify = api.ModifyJobRequest(job_id=str(job_id), request_id=request_id,
                                          **{k: v for k, v in changed.items() if v is not None})
            entry = log.Entry(modify=modify, by=by)
        outcome = self._apply(entry)[0]
        if outcome.code == log.OK:
            self.result.actions += 1
        else:
            self.result.actions_refused += 1

    def _passes(self) -> None:
        if self.settings.skip_idle_passes and self.decider.idle(self.view.waiting(), self.now_ms / 1000):
            return
        for _ in range(PASSES_AT_ONCE):
            if self.one_pass() is None or (self.settings.skip_idle_passes and not self._again):
                return

    def one_pass(self) -> api.DecisionBatch | None:
        """A pass at the current time, its decisions applied (None: it decided nothing)."""
        self.begin()
        self.result.passes += 1
        batch = self.decider.decide(planner.pass_view(self.view), self.now_ms / 1000, self.now_ms)
        if batch is None:
            return None
        self.result.batches += 1
        outcome = self._apply(log.Entry(decisions=batch))[0]
        self.last_batch, self.last_outcomes = batch, list(outcome.outcomes)
        reply = api.DecisionBatchResponse(revision=self.index, outcomes=outcome.outcomes)
        self.decider.batch_answered(batch, reply, self.now_ms / 1000)
        # The pass placed, preempted and explained with what it saw, and took its own placements into
        # account: a pass at once after it decides something new only if the batch was cut or refused
        # in part, preempted (victims give back), changed jobs it did not name (a -w started(...) now
        # holds), placed jobs where what runs moves the others (_placements_move_others), or the
        # workers did more than start what it placed.
        kinds = [d.WhichOneof("body") for d in batch.decisions]
        named = {getattr(d, kind).job_id for d, kind in zip(batch.decisions, kinds, strict=True)}
        dispatched = kinds.count("dispatch")
        self._again = (self.decider.deferred > 0 or dispatched >= self.decider.config.core.max_dispatches
                       or "preempt" in kinds or bool(self._last_jobs - named)
                       or (dispatched > 0 and self._placements_move_others())
                       or any(o.code != api.DECISION_ACCEPTED for o in outcome.outcomes))
        # What the workers do at once (starts, suspended reports, kills) comes before the next pass.
        while self._heap and self._heap[0][0] == self.now_ms and self._heap[0][1] == REACT:
            _, _, _, payload = heapq.heappop(self._heap)
            self._again |= payload[3] != "started"  # type: ignore[index]
            self._end(*payload)  # type: ignore[misc]
        return batch

    # -------------------------------------------------------------- the state machine

    def _apply(self, entry: log.Entry) -> list[log.Result]:
        self.index += 1
        entry.stamp_ms = self.now_ms
        entry.format = ENTRY_FORMAT
        kind = entry.WhichOneof("body")
        applied = fsm.apply_entry(self.tables, self.index, entry)
        if applied is None:
            raise SimulationError(f"entry {self.index} ({kind}) was not applied")
        self._last_jobs = set()
        jobs: list[tuple[bytes, bytes]] = []
        self.view.apply_event(applied.event, jobs)
        self._watch(jobs)
        return applied.results

    # -------------------------------------------------------------- the simulated workers

    def _placements_move_others(self) -> bool:
        """Whether what a pass places may change what the next one decides for the jobs it left: a
        picker in use orders by what runs (reads_context: fair share), or a queue keeps its order or
        reservations (backfill other than `any`: a blocked job's reservation is worked out when the
        pass meets it, from what ran then, not from what the pass places after it)."""
        key = (self.decider.default_picker, tuple(self.view.tables["queues"].values()))
        if self._moves_key != key:
            queues = self.view.queues()
            names = {self.decider.default_picker, *(q.job_pick_plugin for q in queues if q.job_pick_plugin)}
            self._moves_key, self._moves_others = key, any(
                getattr(self.decider.pickers(name), "reads_context", False) for name in names) or any(
                q.backfill not in ("", "any") for q in queues)
        return self._moves_others

    def _watch(self, jobs: list[tuple[bytes, bytes]]) -> None:
        """The job records an entry wrote (not those it deleted: a finished job cleaned), in order."""
        changed = self._last_jobs
        for key, value in jobs:
            job = self.view.parsed_job(key, value)
            changed.add(job.id)
            if job.id not in self._jobs:
                continue  # an array's own record
            run = self._runs.get(job.id)
            if run is not None and run.attempt != job.attempt:
                self._stopped_running(job.id)
                run = None
            if job.state in (api.DONE, api.EXIT):
                self._pending.discard(job.id)
                if run is not None:
                    self._stopped_running(job.id)
                if (job.id, job.attempt) not in self._ended:
                    self._ended.add((job.id, job.attempt))
                    self._finished(job)
            elif job.state in (api.PEND, api.PSUSP):
                self._pending.add(job.id)
            elif job.state == api.RUN and run is None and job.host:
                self._pending.discard(job.id)
                self._started(job)
            elif run is not None and not run.ending:
                self._changed(job, run)

    def _started(self, job: api.Job) -> None:
        sim = self._jobs[job.id]
        host = fsm.read_host(self.tables, job.host)
        limit_ms = job.spec.run_limit_s * 1000
        limited = 0 < limit_ms < sim.run_ms
        slots = sum(a.slots for a in job.allocation) or job.spec.slots
        run = _Run(job.attempt, job.host, host.generation if host else 0, limit_ms if limited else sim.run_ms,
                   self.now_ms, limited, slots)
        self._runs[job.id] = run
        self._busy += slots
        if not self.settings.start_reports:
            self._schedule_end(job.id, run)
            return
        run.ticket += 1
        self._push(self.now_ms, REACT, (job.id, run.attempt, run.ticket, "started"))

    def _stopped_running(self, job_id: int) -> None:
        self._busy -= self._runs.pop(job_id).slots

    def _changed(self, job: api.Job, run: _Run) -> None:
        if job.kill_requested:
            run.ending, run.ticket = True, run.ticket + 1
            self._push(self.now_ms, REACT, (job.id, run.attempt, run.ticket, "killed"))
        elif job.state in (api.SSUSP, api.USUSP) and run.since_ms >= 0:
            run.left_ms -= self.now_ms - run.since_ms
            run.since_ms = -1
            run.ticket += 1
            if job.state == api.SSUSP and not job.released:
                self._push(self.now_ms, REACT, (job.id, run.attempt, run.ticket, "suspended"))
        elif job.state == api.RUN and run.since_ms < 0:
            run.since_ms = self.now_ms
            self._schedule_end(job.id, run)

    def _schedule_end(self, job_id: int, run: _Run) -> None:
        run.ticket += 1
        self._push(self.now_ms + max(run.left_ms, 0), END, (job_id, run.attempt, run.ticket, "end"))

    def _end(self, job_id: int, attempt: int, ticket: int, why: str) -> None:
        run = self._runs.get(job_id)
        if run is None or run.attempt != attempt or run.ticket != ticket:
            return  # moved on meanwhile (stopped, resumed, requeued)
        # Made in place: messages made apart are copied into the entry (each level again).
        entry = log.Entry()
        entry.report.host, entry.report.generation = run.host, run.generation
        report = entry.report.report
        report.job_id, report.attempt = job_id, attempt
        if why == "started":  # as a worker reports it, with the time the job started
            report.started.SetInParent()
            report.started.pid, report.started.time_ms = job_id, self.now_ms
            self._schedule_end(job_id, run)
        elif why == "suspended":
            report.suspended.SetInParent()
            report.suspended.time_ms = self.now_ms
        else:
            finished = report.finished
            finished.SetInParent()
            if why == "killed" or run.limit_kill:
                finished.term_signal = KILLED
            finished.time_ms = self.now_ms
            if why != "killed" and run.limit_kill:
                finished.exit_reason = "RUNLIMIT"
        self._apply(entry)

    def _finished(self, job: api.Job) -> None:
        sim = self._jobs[job.id]
        start = job.start_time_ms or job.end_time_ms  # (a job killed before it started)
        self.result.finished.append(Finished(
            sim.key, job.id, job.spec.queue, job.spec.user, job.spec.slots, job.submit_time_ms - EPOCH_MS,
            start - EPOCH_MS, job.end_time_ms - EPOCH_MS, job.state, job.exit_reason, job.attempt + 1))
        if self.progress is not None:
            self.progress(len(self.result.finished), len(self.workload.jobs), self.now_ms - EPOCH_MS)

    # -------------------------------------------------------------- bookkeeping

    def _push(self, time_ms: int, kind: int, payload: object) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (time_ms, kind, self._seq, payload))

    def _sample(self) -> None:
        if self.now_ms >= self._next_sample:
            self.result.samples.append(Sample(self.now_ms - EPOCH_MS, len(self._pending), self._busy))
            self._next_sample = self.now_ms + self._sample_ms


class SimulationError(RuntimeError):
    pass


def simulate(workload: Workload, settings: Settings | None = None,
             progress: Callable[[int, int, int], None] | None = None) -> Result:
    return Engine(workload, settings, progress).run()
