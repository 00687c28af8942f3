"""The soak's verdict, from what it recorded (pure: no I/O, no clock).

Evidence comes from three places, so the controller is not trusted alone:
the load generator's own record of what was acknowledged (submits, kills,
stops), the workers' journals (every instance a worker started, with its
start and end times, from the shim's status file), and the controller's
final state after the drain. The checks:
- lost: an acknowledged job missing from the final state; unfinished: one
  there but not finished after the drain;
- duplicated: a job with more than one instance that started (the soak
  never requeues, and restarts workers well within the unknown timeout, so
  one job ran at most once), or two of its instances alive at once;
- over-committed: a host that ran more slots at once than it has;
- kills: a killed job whose instance ran on for more than KILL_BOUND_S after
  the kill was acknowledged (it may end DONE on its own before the kill
  reaches it), or that started an instance after it;
- stops: a stopped job whose ticks show no pause;
- memory: a daemon whose resident memory grew past the bound;
- minority: a write that a leader cut off from the majority acknowledged,
  or that is in the state after the heal.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

FINISHED = ("DONE", "EXIT")
KILL_SLACK_MS = 1000  # a start this soon after the kill was already on its way
KILL_BOUND_S = 10.0   # a kill ends the instance within this, failovers included
STOP_GAP_S = 1.5      # a stopped job shows at least this long a pause (it is held for 3 s)
STOP_BOUND_S = 10.0   # ... which starts within this long of the stop, failovers included
TICK_SLACK_S = 0.15   # a tick job writes every 0.1 s: one written this soon after the stop ran before it
TICKS = 60            # what a tick job writes in all
RSS_GROWTH_MB = 40.0  # beyond both bounds, a daemon's memory grew
RSS_GROWTH_RATIO = 0.25


@dataclass(frozen=True)
class Instance:
    """One (job, attempt) a worker started, from its journal."""

    host: str
    job: int
    attempt: int
    start_ms: int
    end_ms: int | None  # None: still running when the journal was read
    slots: int | None = None  # its part of the job's allocation on this host (journaled by the worker)
    gpus: tuple[int, ...] = ()  # the GPU indices it held there (journaled by the worker)
    part: bool = False  # a parallel job's part on a host other than its first (no command of its own)


@dataclass(frozen=True)
class FinalJob:
    job: int
    state: str
    slots: int
    end_ms: int
    hosts: tuple[str, ...] = ()  # its allocation's hosts (the last attempt's), when it ran
    attempt: int = 0  # its last attempt
    name: str = ""  # the load names each submit apart (load.py)
    request_id: str = ""  # of the submit that made it


@dataclass
class Verdict:
    lost: list[int] = field(default_factory=list)
    unfinished: list[int] = field(default_factory=list)
    unfinished_states: dict[str, int] = field(default_factory=dict)
    duplicated: list[int] = field(default_factory=list)
    over_committed: list[str] = field(default_factory=list)
    kills_not_effective: list[int] = field(default_factory=list)
    stops_not_effective: list[int] = field(default_factory=list)
    memory_growth: list[str] = field(default_factory=list)
    stop_gaps_s: dict[int, float] = field(default_factory=dict)  # each stopped job's longest pause
    minority_commits: int = 0  # writes a cut-off leader acknowledged, or that survived the heal
    linearizable: str = "yes"  # the clients' history, by soak/linear: yes, no, unknown (out of time)
    created_twice: list[int] = field(default_factory=list)  # a second job of one submit
    fault_failures: list[str] = field(default_factory=list)  # a daemon stopped unbidden, a victim not back
    unknown_share: float | None = None  # of the history's operations, when bounded (max_unknown)
    max_unknown: float | None = None

    @property
    def ok(self) -> bool:
        return not (self.lost or self.unfinished or self.duplicated or self.over_committed
                    or self.kills_not_effective
                    or self.stops_not_effective or self.memory_growth or self.minority_commits
                    or self.created_twice or self.fault_failures or self.too_many_unknown) \
            and self.linearizable == "yes"

    @property
    def too_many_unknown(self) -> bool:
        return self.max_unknown is not None and (self.unknown_share or 0.0) > self.max_unknown

    def summary(self) -> dict[str, object]:
        return {"ok": self.ok, "lost": len(self.lost), "unfinished": len(self.unfinished),
                "unfinished_states": self.unfinished_states, "duplicated": len(self.duplicated),
                "over_committed_hosts": len(self.over_committed),
                "kills_not_effective": len(self.kills_not_effective),
                "stops_not_effective": len(self.stops_not_effective),
                "memory_growth": self.memory_growth, "minority_commits": self.minority_commits,
                "linearizable": self.linearizable, "created_twice": len(self.created_twice),
                "fault_failures": self.fault_failures[:20], "too_many_unknown": self.too_many_unknown,
                "examples": {"lost": self.lost[:10], "unfinished": self.unfinished[:10],
                             "duplicated": self.duplicated[:10],
                             "over_committed": self.over_committed[:10],
                             "kills": self.kills_not_effective[:10],
                             "stops": {j: self.stop_gaps_s.get(j) for j in self.stops_not_effective[:10]}}}


def created_twice(final: Mapping[int, FinalJob], once: Callable[[str], bool]) -> list[int]:
    """Jobs that share a submit request id, or a name that only one submit carries (`once`): a
    retried submit the controller did not recognise made a second job. The later ones."""
    seen_ids: dict[str, int] = {}
    seen_names: dict[str, int] = {}
    twice = []
    for job in sorted(final.values(), key=lambda j: j.job):
        if (job.request_id and job.request_id in seen_ids) or (once(job.name) and job.name in seen_names):
            twice.append(job.job)
        seen_ids.setdefault(job.request_id, job.job)
        seen_names.setdefault(job.name, job.job)
    return twice


def lost(acknowledged: Iterable[int], final: Mapping[int, FinalJob]) -> list[int]:
    """Acknowledged, and not in the final state at all."""
    return sorted(j for j in set(acknowledged) if j not in final)


def unfinished(acknowledged: Iterable[int], final: Mapping[int, FinalJob]) -> list[int]:
    """Acknowledged and known, but not finished after the drain (stuck, or a backlog too long)."""
    return sorted(j for j in set(acknowledged) if j in final and final[j].state not in FINISHED)


def duplicated(instances: Iterable[Instance]) -> list[int]:
    by_job: dict[int, list[Instance]] = defaultdict(list)
    for instance in instances:
        if not instance.part:
            by_job[instance.job].append(instance)
    return sorted(job for job, runs in by_job.items() if len(runs) > 1)


def overlapping(instances: Iterable[Instance], now_ms: int) -> list[int]:
    """Jobs with two instances alive at the same time (a subset of duplicated)."""
    by_job: dict[int, list[Instance]] = defaultdict(list)
    for instance in instances:
        if not instance.part:
            by_job[instance.job].append(instance)
    bad = []
    for job, runs in by_job.items():
        spans = sorted((r.start_ms, r.end_ms if r.end_ms is not None else now_ms) for r in runs)
        if any(later[0] < earlier[1] for earlier, later in zip(spans, spans[1:], strict=False)):
            bad.append(job)
    return sorted(bad)


def over_committed(instances: Iterable[Instance], slots_of_job: Mapping[int, int],
                   host_slots: Mapping[str, int], now_ms: int) -> list[str]:
    """Hosts whose running instances needed more slots at some moment than the host has."""
    changes: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for instance in instances:
        slots = instance.slots if instance.slots is not None else slots_of_job.get(instance.job, 1)
        end = instance.end_ms if instance.end_ms is not None else now_ms
        changes[instance.host] += [(instance.start_ms, slots), (end, -slots)]
    bad = []
    for host, events in changes.items():
        used = peak = 0
        for _, delta in sorted(events, key=lambda e: (e[0], e[1])):  # ends before starts at a tie
            used += delta
            peak = max(peak, used)
        if peak > host_slots.get(host, 0):
            bad.append(f"{host}: {peak} > {host_slots.get(host, 0)}")
    return sorted(bad)


def gpus_over_committed(instances: Iterable[Instance], host_gpus: Mapping[str, int],
                        now_ms: int) -> list[str]:
    """Per resource, as for slots: hosts whose instances held more GPUs at once than the host has,
    or one index twice at once (from the indices each worker journaled)."""
    by_host: dict[str, list[Instance]] = defaultdict(list)
    for instance in instances:
        if instance.gpus:
            by_host[instance.host].append(instance)
    bad = []
    for host, held in sorted(by_host.items()):
        events = sorted([(i.start_ms, len(i.gpus)) for i in held]
                        + [(i.end_ms if i.end_ms is not None else now_ms, -len(i.gpus)) for i in held],
                        key=lambda e: (e[0], e[1]))
        used = peak = 0
        for _, delta in events:
            used += delta
            peak = max(peak, used)
        if peak > host_gpus.get(host, 0):
            bad.append(f"{host}: {peak} GPUs > {host_gpus.get(host, 0)}")
        for a, b in itertools.combinations(held, 2):
            a_end = a.end_ms if a.end_ms is not None else now_ms
            b_end = b.end_ms if b.end_ms is not None else now_ms
            shared = sorted(set(a.gpus) & set(b.gpus))
            if a.start_ms < b_end and b.start_ms < a_end and shared:
                bad.append(f"{host}: GPU {shared} held by jobs {a.job} and {b.job}")
                break
    return bad


def stray_parts(instances: Iterable[Instance], final: Mapping[int, FinalJob]) -> list[str]:
    """Parts of a parallel job outside what was committed: on a host not in the job's allocation,
    or beside its command on a host not in it (a partial or a second allocation). A part whose
    command never started (killed before it reached its first host, or its start failed and the
    job went back to pending) is no fault, nor are an earlier attempt's parts (the final record
    has only the last attempt's allocation)."""
    commands = {(i.job, i.attempt): i.host for i in instances if not i.part}
    bad = []
    for instance in instances:
        if not instance.part:
            continue
        job = final.get(instance.job)
        first = commands.get((instance.job, instance.attempt))
        if job is None or first is None or instance.attempt != job.attempt:
            continue
        hosts = job.hosts
        if instance.host not in hosts or first not in hosts:
            bad.append(f"job {instance.job}.{instance.attempt}: a part on {instance.host} "
                       f"(allocation {', '.join(hosts) or '?'}; command on {first or 'no host'})")
    return sorted(bad)


def kills_not_effective(kills: Mapping[int, int], final: Mapping[int, FinalJob],
                        instances: Iterable[Instance]) -> list[int]:
    """kills: job -> when the kill was acknowledged (ms)."""
    started = defaultdict(list)
    for instance in instances:
        started[instance.job].append(instance.start_ms)
    ended: dict[int, list[int | None]] = defaultdict(list)
    for instance in instances:
        ended[instance.job].append(instance.end_ms)

    def effective(job: int, acked_ms: int) -> bool:
        end = final.get(job)
        if end is None or end.state not in FINISHED:
            return False
        bound = acked_ms + KILL_BOUND_S * 1000
        if any(e is None or e > bound for e in ended[job]):
            return False  # it ran on long after the kill (failovers included)
        return all(start <= acked_ms + KILL_SLACK_MS for start in started[job])

    return sorted(job for job, acked_ms in kills.items() if not effective(job, acked_ms))


def longest_pause(ticks: Sequence[float]) -> float:
    return max((b - a for a, b in zip(ticks, ticks[1:], strict=False)), default=0.0)


def stops_not_effective(stops: Mapping[int, tuple[int, Sequence[float]]]) -> list[int]:
    """stops: job -> (when the stop was acknowledged, ms; the tick times, s, it wrote).
    A stop took effect if the ticks pause within STOP_BOUND_S of it, or if the
    job had written all its ticks by then (it ended before the stop reached it), or if it wrote
    none after the stop (it did not run again: its host's processes vanished, say, and the worker
    that found it gone recorded its end only later)."""
    def effective(acked_ms: int, ticks: Sequence[float]) -> bool:
        acked, bound = acked_ms / 1000, acked_ms / 1000 + STOP_BOUND_S
        if not ticks or ticks[0] > acked:  # stopped before its first tick: the pause starts at the stop
            ticks = [acked, *ticks]
        pauses = [(a, b) for a, b in zip(ticks, ticks[1:], strict=False) if b - a >= STOP_GAP_S]
        if any(acked - 1.0 <= a <= bound for a, _ in pauses):
            return True
        if ticks[-1] <= acked + TICK_SLACK_S:
            return True
        return len(ticks) >= TICKS and ticks[-1] <= bound

    return sorted(job for job, (acked_ms, ticks) in stops.items() if not effective(acked_ms, ticks))


def memory_growth(samples: Mapping[str, Sequence[tuple[float, float]]],
                  min_span_s: float = 60.0) -> list[str]:
    """samples: daemon incarnation -> (time s, RSS MB). The second quarter of its
    life (after warm-up) against its last quarter."""
    bad = []
    for name, series in samples.items():
        if len(series) < 8 or series[-1][0] - series[0][0] < min_span_s:
            continue
        quarter = len(series) // 4
        early = sorted(rss for _, rss in series[quarter:2 * quarter])[quarter // 2]
        late = sorted(rss for _, rss in series[-quarter:])[quarter // 2]
        if late - early > RSS_GROWTH_MB and late > early * (1 + RSS_GROWTH_RATIO):
            bad.append(f"{name}: {early:.0f} -> {late:.0f} MB")
    return bad


def verdict(acknowledged: Iterable[int], final: Mapping[int, FinalJob], instances: Sequence[Instance],
            host_slots: Mapping[str, int], kills: Mapping[int, int],
            stops: Mapping[int, tuple[int, Sequence[float]]],
            rss: Mapping[str, Sequence[tuple[float, float]]], now_ms: int,
            host_gpus: Mapping[str, int] | None = None,
            unique_name: Callable[[str], bool] | None = None) -> Verdict:
    slots = {job: f.slots for job, f in final.items()}
    waiting = unfinished(acknowledged, final)
    states: dict[str, int] = defaultdict(int)
    for job in waiting:
        states[final[job].state] += 1
    return Verdict(
        lost=lost(acknowledged, final),
        unfinished=waiting, unfinished_states=dict(states),
        duplicated=sorted(set(duplicated(instances)) | set(overlapping(instances, now_ms))),
        over_committed=over_committed(instances, slots, host_slots, now_ms)
        + gpus_over_committed(instances, host_gpus or {}, now_ms) + stray_parts(instances, final),
        kills_not_effective=kills_not_effective(kills, final, [i for i in instances if not i.part]),
        stops_not_effective=stops_not_effective(stops),
        stop_gaps_s={job: round(longest_pause(ticks), 2) for job, (_, ticks) in stops.items()},
        memory_growth=memory_growth(rss),
        created_twice=created_twice(final, unique_name or (lambda name: False)))
