"""What "fits" means, defined once: for the planner and for apply's re-check.

Theory of operation (Nomad's feasibility checkers and plan applier). A check
looks at one job, one candidate allocation (a host and how many slots on it)
and the committed usage (host records, the slots each has in use, and the
cluster-wide counters) and returns None when the allocation is possible,
else a `Reason`: the pending-reason code, words for people, and the name of
the check that refused. `check` runs the job-level checks (the queue
dispatches, no limit would be passed) and then the host-level ones, and
returns the first refusal.

Two callers, one definition:
- the planner (scheduler/core.py) picks a host with its own index (the host
  with most free slots), verifies the pick with `check` against its usage
  (committed usage plus the pass's own placements), and for a job it cannot
  place asks `explain`, which runs the host checks on every host and counts
  the refusals per check (the evidence behind the job's pending reason);
- apply (controller/fsm/decisions.py) runs `check` on every DISPATCH against
  committed usage when the entry applies (the commit barrier), so what the
  planner proposes on a stale view is refused by the same rules.
An operator's forced run (`xce run`, like brun) skips the job-level checks
(policy), never the host-level ones.

Cluster-wide counters: a running attempt holds amounts of named counters
(`demands`): today only the slots of its queue (`queue/<name>/slots`, bounded by
the queue's `slot_limit`, LSF's QJOB_LIMIT); later licenses, per-user limits
and an array's running cap. Apply adds them at dispatch and gives exactly
those amounts back when the attempt ends: its queue's slots, which its own
fields say (queue and slots cannot change while it runs), and whatever the
job's `holds` map records beyond them (`extra_demands`; nothing yet). The
base is not recorded on every job because a running job's record travels in
every event, snapshot, Sync message and RunJob: the map would add a fifth to
a small job's bytes.

Pure: no I/O, no clock; records in, a reason out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from xce.v1 import api_pb2 as api


@dataclass(frozen=True)
class Reason:
    code: api.PendingReason
    words: str
    check: str = ""  # the check that refused

    def key(self) -> tuple[int, str]:
        return (self.code, self.words)


class Allocation(NamedTuple):
    host: str
    slots: int


class HostState(NamedTuple):
    """What the checks need of a host: its slots, whether it is up, slots in use."""

    slots: int
    available: bool
    used: int


class Usage(Protocol):
    def host(self, name: str) -> HostState | None: ...

    def hosts(self) -> Iterable[tuple[str, HostState]]: ...

    def queue(self, name: str) -> api.Queue | None: ...

    def counter(self, name: str) -> int: ...

    def limits(self) -> Mapping[str, int]:
        """The counters that have a bound, and the bound (empty: no limit anywhere)."""
        ...


def queue_slots_counter(queue: str) -> str:
    return f"queue/{queue}/slots"


def demands(job: api.Job) -> dict[str, int]:
    """The cluster-wide counters a running attempt of `job` holds, and how much of each."""
    return {**base_demands(job), **extra_demands(job)}


def base_demands(job: api.Job) -> dict[str, int]:
    """What every running attempt holds, by a fixed rule on fields that cannot change while
    it runs: never recorded on the job, given back by the same rule."""
    return {queue_slots_counter(job.spec.queue): job.spec.slots}


def extra_demands(job: api.Job) -> dict[str, int]:
    """Counters beyond the base (an array's running cap; licenses and a user's cap later):
    recorded in the job's `holds` when it is placed, so exactly those come back."""
    if job.array_id and job.array_limit:
        return {array_running_counter(job.array_id): 1}
    return {}


def array_running_counter(array_id: int) -> str:
    return f"array/{array_id}/running"


def own_bounds(job: api.Job) -> dict[str, int]:
    """Bounds a job brings with it: an array element's running limit (`%50`), as it was when the
    element became a job."""
    if job.array_id and job.array_limit:
        return {array_running_counter(job.array_id): job.array_limit}
    return {}


def limits_of(queues: Iterable[api.Queue]) -> dict[str, int]:
    """The bounded counters the records define: each queue's slot limit."""
    return {queue_slots_counter(q.name): q.slot_limit for q in queues if q.slot_limit > 0}


# ---------------------------------------------------------------- job-level checks (policy)

REASON_QUEUE_INACTIVE = Reason(api.PEND_QUEUE_INACTIVE, "the queue is inactive", "queue_active")


def queue_refusal(queue_name: str, usage: Usage) -> Reason | None:
    """The checks that depend on the job's queue record alone (a pass may keep the
    answer per queue: A4's per-pass cache)."""
    # A closed queue refuses new jobs but still dispatches its pending ones;
    # an inactive one dispatches nothing (LSF's qclose and qinact).
    queue = usage.queue(queue_name)
    if queue is not None and queue.inactive:
        return REASON_QUEUE_INACTIVE
    return None


def limit_refusal(job: api.Job, usage: Usage) -> Reason | None:
    """The checks that depend on the cluster-wide counters (they move as jobs are placed)."""
    bounds = usage.limits()
    own = own_bounds(job)
    if not bounds and not own:
        return None
    for name, amount in demands(job).items():
        bound = own.get(name, bounds.get(name))
        if bound is not None and usage.counter(name) + amount > bound:
            return Reason(api.PEND_LIMIT_REACHED, f"the limit of {name} ({bound}) is reached",
                          "within_limits")
    return None


def job_refusal(job: api.Job, usage: Usage) -> Reason | None:
    return safety_refusal(job, usage) or queue_refusal(job.spec.queue, usage) or limit_refusal(job, usage)


# ---------------------------------------------------------------- safety (never skipped)

RECOVERY_COUNTER = "recovery/waiting"  # > 0: a restored or forced cluster waits (controller/fsm/recovery.py)
REASON_RECOVERING = Reason(api.PEND_RECOVERING, "the cluster was restored or forced from a survivor: it "
                                                "waits for its hosts to say what they run", "recovered")


def safety_refusal(job: api.Job, usage: Usage) -> Reason | None:
    """What no one may override, not even an operator's forced run: a dispatch the state may have
    forgotten (the wait after a rollback), or an instance of the job still running somewhere."""
    if usage.counter(RECOVERY_COUNTER) > 0:
        return REASON_RECOVERING
    if job.stray_hosts:
        return Reason(api.PEND_STRAY_INSTANCE, "an instance the state does not hold still runs on "
                                               f"{', '.join(sorted(job.stray_hosts)[:3])}", "no_stray")
    return None


# ---------------------------------------------------------------- host-level checks


def host_refusal(name: str, host: HostState | None, slots: int) -> Reason | None:
    """Whether `slots` fit on one host now. Four checks, in this order (each
    refusal names its check); one function, since the planner calls it for
    every placement."""
    if host is None:
        return Reason(api.PEND_NO_HOST_MATCHES, f"no host {name[:80]!r}", "host_known")
    if not host.available:
        return Reason(api.PEND_HOSTS_UNAVAILABLE, f"host {name} is unavailable", "host_available")
    if host.slots < slots:
        return Reason(api.PEND_NO_HOST_MATCHES, f"host {name} has {host.slots} slots; the job needs {slots}",
                      "host_large_enough")
    if host.slots - host.used < slots:
        return Reason(api.PEND_NO_FREE_SLOTS, f"host {name} has {host.slots - host.used} free slots; "
                                              f"the job needs {slots}", "host_has_free_slots")
    return None


def check(job: api.Job, allocation: Allocation, usage: Usage, forced: bool = False) -> Reason | None:
    """None if `job` may run with `allocation` now; else why not. `forced`: an
    operator's run (brun), which skips the job-level (policy) checks."""
    if (reason := safety_refusal(job, usage) if forced else job_refusal(job, usage)) is not None:
        return reason
    return host_refusal(allocation.host, usage.host(allocation.host), allocation.slots)


# ---------------------------------------------------------------- explaining a job that does not fit

REASON_NO_HOSTS = Reason(api.PEND_NO_HOSTS, "no hosts have joined", "hosts")
REASON_HOSTS_UNAVAILABLE = Reason(api.PEND_HOSTS_UNAVAILABLE, "all hosts are unavailable", "host_available")
REASON_TOO_BIG = Reason(api.PEND_NO_HOST_MATCHES, "no host has that many slots", "host_large_enough")
REASON_NO_SLOTS = Reason(api.PEND_NO_FREE_SLOTS, "no host with enough free slots", "host_has_free_slots")


@dataclass(frozen=True)
class Explanation:
    """Why a job fits no host: its reason, and how many hosts each check refused."""

    reason: Reason | None  # None: some host fits after all
    counts: Mapping[str, int] = field(default_factory=dict)


def explain(job: api.Job, usage: Usage) -> Explanation:
    if (reason := job_refusal(job, usage)) is not None:
        return Explanation(reason)
    counts: Counter[str] = Counter()
    hosts = 0
    for name, host in usage.hosts():
        hosts += 1
        refusal = host_refusal(name, host, job.spec.slots)
        if refusal is None:
            return Explanation(None)
        counts[refusal.check] += 1
    # The words stay the same while the counts move, so a busy cluster does not
    # churn the log with new pending reasons every pass.
    if not hosts:
        return Explanation(REASON_NO_HOSTS)
    if counts["host_has_free_slots"]:
        return Explanation(REASON_NO_SLOTS, dict(counts))
    if counts["host_large_enough"]:
        return Explanation(REASON_TOO_BIG, dict(counts))
    return Explanation(REASON_HOSTS_UNAVAILABLE, dict(counts))


def host_state(host: api.Host) -> HostState:
    return HostState(host.spec.slots, host.status == api.HOST_OK, host.slots_used)
