"""What a simulation runs: jobs (when each arrives, how long it runs), hosts and queues.

Theory of operation. Every source becomes the same `Workload`, so the
simulator knows nothing of where it came from:
- an SWF trace (simulator/swf.py, cleaned by its documented rules): each job asks
  for its processors as slots, in one queue, from user `u<number>`; its
  requested time (SWF field 9) is its estimate (-We); the machine is
  MaxNodes (or the largest job) one-slot hosts unless hosts are given;
- a recording (simulator/recording_file.py): every job submitted in it, with its spec
  as submitted and its run time (end - start of its last attempt; a job that
  never ended runs as long as the recording saw it run; one that never ran
  is left out, unless it was killed while it waited), on the recording's
  hosts and queues, and what users did to jobs (`Action`: holds, releases,
  kills, stops, resumes, requeues of running jobs, modifications of
  priority, queue and -R) at the times they did it;
- a synthetic trace (`synthetic`): Poisson arrivals at the rate that gives the
  offered load asked for, sizes 1 slot or a power of two, log-uniform run
  times from 10 s to 36 h, estimates 1-3 times the run time. Reproducible
  from its seed.
What-ifs on a workload (`more_hosts`, `scaled_arrivals`) make a new one. Pure.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

from simulator import swf
from simulator.recording_file import Recording
from xce.v1 import api_pb2 as api

DEFAULT_QUEUE = "normal"
T = TypeVar("T")


@dataclass(frozen=True)
class SimJob:
    key: int        # its number in the source (SWF job number, recorded job id, index)
    submit_ms: int
    run_ms: int     # how long it runs once started
    spec: api.JobSpec
    held: bool = False  # held from its submit on (a recording's job first seen held)


@dataclass(frozen=True)
class Action:
    """What someone did to a job at a time, done again to the simulated job of the same key: a
    control action (api.ControlAction), or else a modification of the fields given."""

    time_ms: int
    key: int
    control: int = 0
    priority: int | None = None
    queue: str | None = None
    resource_req: str | None = None
    by: str = ""  # who, as the recording has it ("role:name")


@dataclass(frozen=True)
class Workload:
    jobs: Sequence[SimJob]  # in submit order
    hosts: Sequence[api.HostSpec]
    queues: Sequence[api.Queue]
    source: str
    notes: Sequence[str] = field(default_factory=tuple)  # what was assumed or left out
    actions: Sequence[Action] = ()  # in time order

    @property
    def slots(self) -> int:
        return sum(h.slots for h in self.hosts)


def hosts_option(text: str) -> tuple[int, int]:
    """`--hosts` and `--add-hosts`: N or NxS, as (hosts, slots each); ValueError saying what it takes."""
    count, _, slots = text.lower().partition("x")
    try:
        n, s = int(count), int(slots or "1")
    except ValueError:
        raise ValueError(f"hosts {text!r}: N or NxS, whole numbers (64x32: 64 hosts of 32 slots)") from None
    if not (0 < n <= 100_000 and 0 < s <= 100_000):
        raise ValueError(f"hosts {text!r}: 1 to 100,000 hosts of 1 to 100,000 slots")
    return n, s


def one_slot_hosts(count: int, prefix: str = "n") -> list[api.HostSpec]:
    width = len(str(count))
    return [api.HostSpec(name=f"{prefix}{i:0{width}d}", slots=1) for i in range(count)]


def host_specs(count: int, slots: int, prefix: str = "h") -> list[api.HostSpec]:
    width = len(str(count))
    return [api.HostSpec(name=f"{prefix}{i:0{width}d}", slots=slots) for i in range(count)]


def from_swf(trace: swf.Trace, source: str, hosts: Sequence[api.HostSpec] = (),
             queue: api.Queue | None = None) -> Workload:
    queue = queue or api.Queue(name=DEFAULT_QUEUE)
    fleet = list(hosts) or one_slot_hosts(trace.max_nodes())
    total = sum(h.slots for h in fleet)
    jobs, too_big = [], 0
    for job in trace.jobs:
        if job.procs > total:
            too_big += 1
            continue
        spec = api.JobSpec(command=["sim"], queue=queue.name, slots=job.procs,
                           user=f"u{job.user}" if job.user >= 0 else "unknown",
                           estimate_s=max(job.estimate_s, 0))
        jobs.append(SimJob(job.id, job.submit_s * 1000, job.run_s * 1000, spec))
    notes = [f"{len(trace.skipped)} lines skipped by the cleaning rules"] if trace.skipped else []
    if trace.dropped_zero_run:
        notes.append(f"{trace.dropped_zero_run} jobs of no run time (pyss: or no requested time) left out")
    if too_big:
        notes.append(f"{too_big} jobs larger than the machine ({total} slots) left out")
    return Workload(_ordered(jobs), fleet, [queue], source, tuple(notes))


def synthetic(jobs: int, hosts: int, slots_per_host: int, load: float, seed: int,
              queue: api.Queue | None = None) -> Workload:
    if jobs <= 0 or hosts <= 0 or slots_per_host <= 0 or not 0 < load <= 10:
        raise ValueError("synthetic: jobs, hosts and slots per host above 0, and a load in (0, 10]")
    queue = queue or api.Queue(name=DEFAULT_QUEUE)
    rng = random.Random(seed)
    total = hosts * slots_per_host
    largest = max(1, min(total, slots_per_host * 4))
    exponents = int(math.log2(largest))
    sizes = [1 if rng.random() < 0.35 else 2 ** rng.randint(1, max(1, exponents)) for _ in range(jobs)]
    sizes = [min(s, largest) for s in sizes]
    runs = [int(math.exp(rng.uniform(math.log(10), math.log(36 * 3600)))) for _ in range(jobs)]
    area = sum(s * r for s, r in zip(sizes, runs, strict=True)) / jobs  # slot-seconds a job, on average
    rate = load * total / area  # arrivals a second for that load
    now, made = 0.0, []
    for i in range(jobs):
        now += rng.expovariate(rate)
        estimate = int(runs[i] * rng.uniform(1.0, 3.0))
        spec = api.JobSpec(command=["sim"], queue=queue.name, slots=sizes[i], user=f"u{rng.randint(1, 50)}",
                           estimate_s=estimate)
        made.append(SimJob(i + 1, int(now * 1000), runs[i] * 1000, spec))
    source = f"synthetic: {jobs} jobs, {hosts} hosts x {slots_per_host} slots, load {load}, seed {seed}"
    return Workload(made, host_specs(hosts, slots_per_host), [queue], source)


def wide_trace(jobs: int, hosts: int = 100, widths: tuple[int, int] = (8, 64), load: float = 0.9,
               seed: int = 1) -> swf.Trace:
    """A seeded SWF trace of jobs `widths` hosts wide (uniform) on `hosts` one-slot hosts: Poisson
    arrivals at the offered `load`, run times log-uniform from 1 minute to 4 hours, estimates 1-3 times
    the run time, 20 users. widths (1, 1): one-host jobs, for comparison."""
    low, high = widths
    if jobs <= 0 or not 0 < low <= high <= hosts or not 0 < load <= 10:
        raise ValueError("wide trace: jobs above 0, widths 1 <= low <= high <= hosts, a load in (0, 10]")
    rng = random.Random(seed)
    sizes = [rng.randint(low, high) for _ in range(jobs)]
    runs = [int(math.exp(rng.uniform(math.log(60), math.log(4 * 3600)))) for _ in range(jobs)]
    rate = load * hosts / (sum(s * r for s, r in zip(sizes, runs, strict=True)) / jobs)
    now, made = 0.0, []
    for i in range(jobs):
        now += rng.expovariate(rate)
        estimate = int(runs[i] * rng.uniform(1.0, 3.0))
        user = rng.randint(1, 20)
        made.append(swf.Job(i + 1, int(now), -1, runs[i], sizes[i], estimate, 1, user, 1, i + 1))
    return swf.Trace(made, {"MaxNodes": str(hosts), "MaxProcs": str(hosts),
                            "Note": f"wide_trace jobs={jobs} widths={low}-{high} load={load} seed={seed}"})


def from_recording(recording: Recording, source: str) -> Workload:
    """Every job the recording saw submitted (or pending at its start), with its recorded run time, and
    what users did to them."""
    first, last, actions, killed_waiting = _job_history(recording)
    jobs, never = _sim_jobs(first, last, killed_waiting)
    hosts, queues = _machine(recording)
    seen_end = recording.events[-1].revision if recording.events else 0
    notes = [f"{never} jobs that never started in the recording left out"] if never else []
    included = {job.key for job in jobs}
    actions = [a for a in actions if a.key in included]
    notes.append(f"the recording ends at revision {seen_end}; {len(actions)} actions on its jobs done again "
                 "at their times (holds, kills, modifications...); host losses are not")
    return Workload(_ordered(jobs), hosts, queues, source, tuple(notes),
                    sorted(actions, key=lambda a: (a.time_ms, a.key)))


def _job_history(recording: Recording) -> tuple[dict[int, api.Job], dict[int, api.Job], list[Action],
                                                 dict[int, int]]:
    """(each job's first record, its last, what users did to the jobs, when a job was killed while it
    waited)."""
    first: dict[int, api.Job] = {}
    last: dict[int, api.Job] = {}
    for raw in recording.baseline["jobs"].values():
        job = api.Job.FromString(raw)
        if job.state in (api.PEND, api.PSUSP):
            first[job.id] = last[job.id] = job
    actions: list[Action] = []
    killed_waiting: dict[int, int] = {}
    for event in recording.events:
        for change in event.changes:
            if change.table != "jobs" or change.deleted:
                continue
            job = api.Job.FromString(change.value)
            if job.spec.HasField("array"):
                continue  # an array's own record; its elements come as jobs
            before = last.get(job.id)
            if before is not None and event.kind in ("control", "modify"):
                action = _action(before, job, event.by[0] if event.by else "")
                if action is not None:
                    actions.append(action)
                    if action.control == api.KILL and not before.start_time_ms:
                        killed_waiting[job.id] = action.time_ms
            first.setdefault(job.id, job)
            last[job.id] = job
    return first, last, actions, killed_waiting


def _sim_jobs(first: Mapping[int, api.Job], last: Mapping[int, api.Job],
              killed_waiting: Mapping[int, int]) -> tuple[list[SimJob], int]:
    """(the jobs to simulate, how many never started and were left out)."""
    jobs: list[SimJob] = []
    never = 0
    for job_id, job in first.items():
        end = last[job_id]
        if not end.start_time_ms:
            if job_id in killed_waiting:  # it held its place in the queue until then
                spec = api.JobSpec()
                spec.CopyFrom(job.spec)
                waited_ms = max(killed_waiting[job_id] - job.submit_time_ms, 0)
                jobs.append(SimJob(job_id, job.submit_time_ms, waited_ms, spec, held=job.state == api.PSUSP))
            else:
                never += 1
            continue
        if end.end_time_ms:
            run_ms = end.end_time_ms - end.start_time_ms
        else:
            run_ms = max(end.modify_time_ms, end.start_time_ms) - end.start_time_ms
        spec = api.JobSpec()
        spec.CopyFrom(job.spec)
        jobs.append(SimJob(job_id, job.submit_time_ms, max(run_ms, 0), spec, held=job.state == api.PSUSP))
    return jobs, never


def _machine(recording: Recording) -> tuple[list[api.HostSpec], list[api.Queue]]:
    """The hosts and queues of the recording, those that joined or were made during it too."""
    hosts = [api.Host.FromString(v).spec for _, v in sorted(recording.baseline["hosts"].items())]
    known = {h.name for h in hosts}
    queues = {q.name: q for q in map(api.Queue.FromString, recording.baseline["queues"].values())}
    for event in recording.events:
        for change in event.changes:
            if change.table == "hosts" and not change.deleted:
                host = api.Host.FromString(change.value)
                if host.spec.name not in known:
                    known.add(host.spec.name)
                    hosts.append(host.spec)
            elif change.table == "queues" and not change.deleted:
                queue = api.Queue.FromString(change.value)
                queues.setdefault(queue.name, queue)
    return hosts, list(queues.values())


_RUNS = (api.RUN, api.SSUSP, api.USUSP, api.UNKWN)


def _action(before: api.Job, after: api.Job, by: str) -> Action | None:
    """What a control or modify entry did to a job, from its record before and after (a recording
    keeps the records, not the requests). A stop of a waiting job is a hold (the same PSUSP)."""
    when, key = after.modify_time_ms, after.id
    if after.spec.priority != before.spec.priority or after.spec.queue != before.spec.queue \
            or after.spec.resource_req != before.spec.resource_req:
        return Action(when, key, priority=_changed(before.spec.priority, after.spec.priority),
                      queue=_changed(before.spec.queue, after.spec.queue),
                      resource_req=_changed(before.spec.resource_req, after.spec.resource_req), by=by)
    control = 0
    if after.requeue_requested and not before.requeue_requested:
        control = api.REQUEUE
    elif (after.kill_requested and not before.kill_requested) or (
            before.state in (api.PEND, api.PSUSP) and after.state == api.EXIT) or (
            before.requeue_requested and not after.requeue_requested and after.kill_requested):
        control = api.KILL  # (the last: a kill of a job being requeued, which then stays ended)
    elif before.state == api.PEND and after.state == api.PSUSP:
        control = api.HOLD
    elif before.state == api.PSUSP and after.state == api.PEND:
        control = api.RELEASE
    elif before.state in _RUNS and after.state == api.USUSP:
        control = api.STOP
    elif before.state == api.USUSP and after.state == api.RUN:
        control = api.RESUME
    return Action(when, key, control, by=by) if control else None


def _changed(before: T, after: T) -> T | None:
    return after if after != before else None


def more_hosts(workload: Workload, count: int, slots: int) -> Workload:
    added = host_specs(count, slots, prefix="added")
    return replace(workload, hosts=[*workload.hosts, *added],
                   notes=(*workload.notes, f"{count} hosts of {slots} slots added"))


def scaled_arrivals(workload: Workload, factor: float) -> Workload:
    """Arrivals `factor` times as often (1.5: the same jobs in two thirds of the time)."""
    if not 0 < factor <= 1000:
        raise ValueError(f"--scale-arrivals: a factor in (0, 1000], not {factor}")
    start = workload.jobs[0].submit_ms if workload.jobs else 0
    jobs = [replace(j, submit_ms=start + round((j.submit_ms - start) / factor)) for j in workload.jobs]
    actions = [replace(a, time_ms=start + round((a.time_ms - start) / factor)) for a in workload.actions]
    notes = (*workload.notes, f"arrivals scaled by {factor}")
    return replace(workload, jobs=jobs, actions=actions, notes=notes)


def _ordered(jobs: list[SimJob]) -> list[SimJob]:
    return sorted(jobs, key=lambda j: (j.submit_ms, j.key))
