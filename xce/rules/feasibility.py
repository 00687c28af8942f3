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

Resource requirements (xce/rules/resreq.py is the language). A job's
`Need` is its queue's RES_REQ merged with its own `-R`, compiled once per
pair of strings. What select[] reads of a host (`attributes`):
- static attributes, fixed while the host is joined: `maxslots`, `maxmem`,
  `ncpus`, `hname`, each tag (`gpu` is defined; `type=X86_64` is the string
  attribute `type`);
- committed usage: `slots` (free slots), `mem` (maxmem less what running
  jobs reserved), each consumable resource of the worker (its free amount);
- load indices (`r1m`, `ut`, ...; controller/fsm/loads.py): the planner's
  alone (`host_state(host, load=True)`). Apply does not know them
  (LOAD_INDICES are unknown there, and a select that hangs on one passes),
  since load moves between the planner's view and the commit: a barrier
  that re-read it would refuse good placements at random. In the planner
  `mem` is the smaller of the unreserved amount and what the host last
  reported available; at apply, the unreserved amount alone.
rusage[] reserves whole amounts on every host of the allocation (LSF's
default, PER_HOST; Slurm's --mem and --gres are per node too), held for the
job's life and given back exactly (the job's `allocation` records them).
A job's allocation is a list of (host, slots); `check` takes all of it, so
a parallel job is placed all or nothing: its shape (the count within -n
min,max, span[], same[]) and every host's part.

Pure: no I/O, no clock; records in, a reason out.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import NamedTuple, Protocol

from xce.rules import limits, reservations, resreq
from xce.v1 import api_pb2 as api


@dataclass(frozen=True)
class Reason:
    code: api.PendingReason
    words: str
    check: str = ""  # the check that refused
    detail: str = ""  # what it was about (a resource's name), for the counts

    def key(self) -> tuple[int, str]:
        return (self.code, self.words)


class Allocation(NamedTuple):
    """One host's part of a job's allocation."""

    host: str
    slots: int


_EMPTY: Mapping[str, int] = MappingProxyType({})
_EMPTY_LOAD: Mapping[str, float] = MappingProxyType({})
_NO_ATTRIBUTES: Mapping[str, resreq.Value] = MappingProxyType({})


class HostState(NamedTuple):
    """What the checks need of a host: its slots, whether it is up, slots in use, its consumables
    (totals, reserved) and its static attributes."""

    slots: int
    available: bool
    used: int
    totals: Mapping[str, int] = _EMPTY
    reserved: Mapping[str, int] = _EMPTY
    static: Mapping[str, resreq.Value] = _NO_ATTRIBUTES
    closed: bool = False  # by an operator (xce host close): no new jobs
    groups: frozenset[str] = frozenset()  # the host groups it is a member of
    load: Mapping[str, float] = _EMPTY_LOAD  # load indices: the planner's view only (empty at apply)
    generation: int = 0  # +1 at each join: a job's refused_owner names the generation that refused
    held: Mapping[str, int] = _EMPTY  # active reservations' unused slots here, counted in `used` too


class Usage(Protocol):
    def host(self, name: str) -> HostState | None: ...

    def hosts(self) -> Iterable[tuple[str, HostState]]: ...

    def queue(self, name: str) -> api.Queue | None: ...

    def counter(self, name: str) -> int: ...

    def limits(self) -> Mapping[str, int]:
        """The counters that have a bound, and the bound (empty: no limit anywhere)."""
        ...

    def shared(self) -> Mapping[str, int]:
        """The cluster-wide consumables (licenses) and their totals."""
        ...

    def limit_defs(self) -> Sequence[api.Limit]:
        """The configured limits (xce/rules/limits.py), by name."""
        ...


def shared_counter(name: str) -> str:
    """The counter of a shared resource in use (what running jobs hold of it)."""
    return f"shared/{name}"


def queue_slots_counter(queue: str) -> str:
    return f"queue/{queue}/slots"


def demands(job: api.Job, slots: int | None = None) -> dict[str, int]:
    """The cluster-wide counters a running attempt of `job` holds, and how much of each (`slots`:
    the count it would run with, for a job not placed yet)."""
    return {**base_demands(job, slots), **extra_demands(job)}


def base_demands(job: api.Job, slots: int | None = None) -> dict[str, int]:
    """What every running attempt holds, by a fixed rule on fields that cannot change while
    it runs: never recorded on the job, given back by the same rule."""
    return {queue_slots_counter(job.spec.queue): held_slots(job) if slots is None else slots}


def held_slots(job: api.Job) -> int:
    """The slots the job's attempt holds (or would, at its most): its allocation's, else its spec's."""
    return sum(part.slots for part in job.allocation) if job.allocation else job.spec.slots


def least_slots(job: api.Job) -> int:
    """The fewest slots it may run with: -n min,max's min, else its slots."""
    spec = job.spec
    least = spec.min_slots  # (0 when not set: HasField would say no more, at twice the cost)
    return least if least > 0 else spec.slots


class Part(NamedTuple):
    """What a running attempt holds on one host."""

    host: str
    slots: int
    resources: Mapping[str, int]


def allocation_of(job: api.Job) -> list[Part]:
    """Where the attempt holds what, first host first: its recorded allocation, else its host
    with its slots and nothing reserved (every job placed before entry format 6, and most after)."""
    if job.allocation:
        return [Part(a.host, a.slots, a.resources) for a in job.allocation]
    return [Part(job.host, job.spec.slots, _EMPTY)] if job.host else []


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


# ---------------------------------------------------------------- what a job asks of hosts

# Load indices as LSF names them: reported by workers, read by the planner only (see above).
LOAD_INDICES = frozenset({"r15s", "r1m", "r15m", "ut", "pg", "io", "ls", "it", "tmp", "swp"})
# Names whose value moves with committed usage (besides each consumable's own name).
USAGE_NAMES = frozenset({"slots", "mem"})


@dataclass(frozen=True)
class Need:
    """A job's resource requirement as the checks use it: its queue's merged with its own."""

    requirement: resreq.Requirement
    host_usage: tuple[tuple[str, int], ...] = ()  # rusage[]: whole amounts reserved on each host
    select_words: str = ""  # "select[...]", for reasons
    asked: frozenset[str] = frozenset()  # -m: hosts and host groups (empty: any host)
    shared_usage: tuple[tuple[str, int], ...] = ()  # rusage[] of shared resources: taken once per job
    exclusive: bool = False  # -x: only hosts where nothing runs, and the whole host while it runs
    # Hosts that refused the job's owner at the generation they still have (job.refused_owner): policy,
    # which an operator's forced run may override (the account may exist by now).
    avoid: frozenset[str] = frozenset()
    reservation: str = ""  # -U: only in this advance reservation's slots (xce/rules/reservations.py)

    def __hash__(self) -> int:
        """Computed once (a pass keys its answers of no room by Need: hashing every field, parsed
        requirement included, was a tenth of a pass)."""
        found: int | None = self.__dict__.get("_hash")
        if found is None:
            found = hash((self.requirement, self.host_usage, self.select_words, self.asked, self.shared_usage,
                          self.exclusive, self.avoid, self.reservation))
            object.__setattr__(self, "_hash", found)
        return found

    def __getstate__(self) -> dict[str, object]:
        """Without the kept hash: another process hashes strings differently."""
        return {k: v for k, v in self.__dict__.items() if k not in ("_hash", "plain")}

    @functools.cached_property
    def plain(self) -> bool:
        """Nothing asked beyond slots: any host, in the default order (worked out once: a pass asks
        it of every job it places)."""
        req = self.requirement
        return req.select is None and not self.host_usage and not req.order and not req.span_hosts \
            and not req.ptile and not req.same and not self.asked and not self.exclusive and not self.avoid \
            and not self.reservation

    def forced(self) -> Need:
        """What an operator's forced run (brun) keeps: the consumables and the reservation (capacity:
        a job of a reservation runs in its slots), not the policy."""
        return Need(resreq.Requirement(), self.host_usage, shared_usage=self.shared_usage,
                    reservation=self.reservation)


NO_NEED = Need(resreq.Requirement())
MAX_AMOUNT = 1 << 53  # of a consumable: totals are capped here, and an amount above it fits nowhere


def _whole(amount: float) -> int:
    """An rusage[] amount as apply reserves it: rounded up (before format 6 fractions were taken);
    one no total can hold (1e999, say, which older formats let in) fits nowhere, and never
    overflows the int64 it would be kept in."""
    return math.ceil(amount) if math.isfinite(amount) and amount <= MAX_AMOUNT else MAX_AMOUNT + 1


@functools.lru_cache(maxsize=4096)
def need(queue_requirement: str, job_requirement: str, asked: tuple[str, ...] = (),
         shared: frozenset[str] = frozenset()) -> Need:
    """The merged requirement (LSF's queue RES_REQ with the job's -R), the hosts -m asks for, and
    rusage[] split between each host's consumables and the `shared` ones. A string that does not
    parse counts as none: entries before format 5 stored -R verbatim, unchecked, and a job
    submitted then must neither stop a replica nor be read differently by two of them."""
    if not queue_requirement and not job_requirement and not asked:
        return NO_NEED
    merged = resreq.merge(_parsed(queue_requirement), _parsed(job_requirement))
    # Whole amounts: entry format 6 refuses others at submit; an older job's are rounded up.
    usage = tuple((name, _whole(amount)) for name, amount in merged.rusage if amount > 0)
    words = f"select[{resreq.show(merged.select)}]" if merged.select is not None else ""
    return Need(merged, tuple(u for u in usage if u[0] not in shared), words, frozenset(asked),
                tuple(u for u in usage if u[0] in shared))


def _parsed(text: str) -> resreq.Requirement:
    try:
        return resreq.parse(text)
    except resreq.RequirementError:
        return resreq.Requirement()


def job_need(job: api.Job, usage: Usage, groups_and_shared: bool = True) -> Need:
    """The job's Need; `groups_and_shared=False` reads neither -m nor shared resources (entries
    before format 7, whose replicas did not)."""
    spec = job.spec
    queue = usage.queue(spec.queue)
    queue_req = queue.res_req if queue is not None else ""
    if not groups_and_shared:
        return need(queue_req, spec.resource_req)
    if not queue_req and not spec.resource_req and not spec.hosts:
        found = NO_NEED  # (most jobs: what need() would say, without hashing a set of shared names)
    else:
        found = need(queue_req, spec.resource_req, tuple(spec.hosts), frozenset(usage.shared()))
    if spec.exclusive:
        found = dataclasses.replace(found, exclusive=True)
    if spec.reservation:
        found = dataclasses.replace(found, reservation=spec.reservation)
    if job.attempt and job.refused_owner:  # (only a job refused before: set from entry format 19 on)
        avoid = refused_owner(job, usage)
        if avoid:
            found = dataclasses.replace(found, avoid=avoid)
    return found


def refused_owner(job: api.Job, usage: Usage) -> frozenset[str]:
    """The hosts that refused the job's owner and have not joined anew since (same generation)."""
    avoid = set()
    for name, generation in job.refused_owner.items():
        host = usage.host(name)
        if host is not None and host.generation == generation:
            avoid.add(name)
    return frozenset(avoid)


def attributes(host: HostState) -> dict[str, resreq.Value]:
    """What select[] reads of a host now: its static attributes, free slots, each consumable's
    free amount (`mem` among them), and in the planner its load indices (`mem` there: the
    smaller of what is not reserved and what the host last said it has available)."""
    values = dict(host.static)
    for name, value in host.load.items():  # a reported mem only lowers the consumable's, never stands for it
        if name != "mem":
            values[name] = value
    values["slots"] = float(host.slots - host.used)
    for name, total in host.totals.items():
        values[name] = float(total - host.reserved.get(name, 0))
    if "mem" in host.load and "mem" in host.totals:
        values["mem"] = min(values["mem"], host.load["mem"])
    return values


def value_of(host: HostState, name: str) -> resreq.Value | None:
    """One name of `attributes(host)`, without making them all (order[] reads a few per host)."""
    if name == "slots":
        return float(host.slots - host.used)
    if name in host.totals:
        free = float(host.totals[name] - host.reserved.get(name, 0))
        return min(free, host.load[name]) if name in host.load else free
    return host.load[name] if name in host.load and name != "mem" else host.static.get(name)


def static_attributes(host: api.Host) -> dict[str, resreq.Value]:
    spec = host.spec
    values: dict[str, resreq.Value] = {"maxslots": float(spec.slots), "hname": spec.name,
                                       "ncpus": float(spec.ncpus or spec.slots)}
    if spec.memory_mb > 0:
        values["maxmem"] = float(spec.memory_mb)
    for group in host.groups:  # select[gpu_nodes]: a member of that group
        values[group] = True
    for tag in spec.tags:
        name, eq, value = tag.partition("=")
        if not eq:
            values[name] = True
        else:
            try:
                values[name] = float(value)
            except ValueError:
                values[name] = value
    return values


def consumables(host: api.Host) -> dict[str, int]:
    """Per-host consumable totals: memory as `mem`, and the worker's [resources], in whole units."""
    totals = {name: int(min(amount, MAX_AMOUNT)) for name, amount in host.spec.resources.items()}
    if host.spec.memory_mb > 0:
        totals["mem"] = min(host.spec.memory_mb, MAX_AMOUNT)
    return totals


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


def limit_refusal(job: api.Job, usage: Usage, slots: int | None = None, need_: Need | None = None,
                  hosts: int = 1) -> Reason | None:
    """The checks that depend on the cluster-wide counters (they move as jobs are placed). Without
    `need_` (before a plan) the configured limits' consumables are not looked at."""
    bounds = usage.limits()
    own: Mapping[str, int] = own_bounds(job) if job.array_limit else _EMPTY
    if bounds or own:
        for name, amount in demands(job, slots).items():
            bound = own.get(name, bounds.get(name))
            if bound is not None and usage.counter(name) + amount > bound:
                return Reason(api.PEND_LIMIT_REACHED, f"the limit of {name} ({bound}) is reached",
                              "within_limits")
    defs = usage.limit_defs()
    if defs:
        found = limit_demands(job, defs, held_slots(job) if slots is None else slots, need_, hosts)
        hit = limits.refusal(found, usage.counter)
        if hit is not None:
            return Reason(api.PEND_LIMIT_REACHED, limits.words(hit[0], hit[1], job), "within_limits",
                          hit[0].limit.name)
    return None


def limit_demands(job: api.Job, defs: Sequence[api.Limit], slots: int, need_: Need | None = None,
                  hosts: int = 1) -> list[limits.Demand]:
    """What the job would hold of the configured limits' counters (xce/rules/limits.py)."""
    if need_ is None:
        return limits.demands(defs, job, slots, hosts)
    return limits.demands(defs, job, slots, hosts, need_.host_usage, need_.shared_usage)


def job_refusal(job: api.Job, usage: Usage, slots: int | None = None, need_: Need | None = None,
                hosts: int = 1) -> Reason | None:
    return safety_refusal(job, usage) or queue_refusal(job.spec.queue, usage) \
        or limit_refusal(job, usage, slots, need_, hosts)


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


def host_refusal(name: str, host: HostState | None, slots: int, need_: Need = NO_NEED,
                 unknown: frozenset[str] = frozenset(), forced: bool = False) -> Reason | None:
    """Whether `slots` of a job with `need_` fit on one host now. The checks, in this order
    (each refusal names its check); one function, since the planner calls it for every
    placement. `unknown`: names select[] may not read (apply passes LOAD_INDICES). `forced`:
    an operator's run (brun), which may use a closed host, as LSF's brun may."""
    if host is None:
        return Reason(api.PEND_NO_HOST_MATCHES, f"no host {name[:80]!r}", "host_known")
    if not host.available:
        return Reason(api.PEND_HOSTS_UNAVAILABLE, f"host {name} is unavailable", "host_available")
    if need_.asked and name not in need_.asked and not host.groups & need_.asked:
        return Reason(api.PEND_NO_HOST_MATCHES,
                      f"host {name} is not among -m {' '.join(sorted(need_.asked))}", "host_asked")
    select = need_.requirement.select
    if select is not None and (not resreq.compiled(select)(attributes(host)) if not unknown
                               else resreq.evaluate(select, attributes(host), unknown) is False):
        return Reason(api.PEND_NO_HOST_MATCHES, f"host {name} does not match {need_.select_words}", "select")
    if host.slots < slots:
        return Reason(api.PEND_NO_HOST_MATCHES, f"host {name} has {host.slots} slots; the job needs {slots}",
                      "host_large_enough")
    for resource, amount in need_.host_usage:
        if host.totals.get(resource, 0) < amount:
            return Reason(api.PEND_NO_HOST_MATCHES, f"host {name} has {host.totals.get(resource, 0)} "
                          f"{resource}; the job reserves {amount}", "host_has_resource", resource)
    if need_.avoid and name in need_.avoid:
        return Reason(api.PEND_OWNER_REFUSED, f"host {name} refused the job's owner (no account there, or "
                      "not allowed) and has not joined anew since", "host_owner")
    if host.closed and not forced:  # after the checks of what it is: closed is news only to a job it fits
        return Reason(api.PEND_HOST_CLOSED, f"host {name} is closed", "host_closed")
    if need_.reservation or need_.exclusive:
        if (reason := _kept_slots_refusal(name, host, slots, need_)) is not None:
            return reason
    elif host.slots - host.used < slots:
        return Reason(api.PEND_NO_FREE_SLOTS, f"host {name} has {host.slots - host.used} free slots; "
                                              f"the job needs {slots}", "host_has_free_slots")
    for resource, amount in need_.host_usage:
        free = host.totals[resource] - host.reserved.get(resource, 0)
        if free < amount:
            return Reason(api.PEND_NO_FREE_RESOURCES, f"host {name} has {free} {resource} free; the job "
                          f"reserves {amount}", "host_has_free_resource", resource)
    return None


def _kept_slots_refusal(name: str, host: HostState, slots: int, need_: Need) -> Reason | None:
    """The free slots of a job of a reservation (its reservation's there: reservations.py) or of an
    exclusive job (an idle host)."""
    if need_.reservation:
        if need_.reservation not in host.held:
            return Reason(api.PEND_NO_HOST_MATCHES, f"host {name} keeps no slots for reservation "
                          f"{need_.reservation} now", "host_in_reservation")
        free = reservations.free_in(host.slots, host.used, host.held, need_.reservation)
    else:
        if host.used > 0:
            return Reason(api.PEND_NO_FREE_SLOTS,
                          f"host {name} runs other jobs: an exclusive job (-x) takes idle hosts", "host_idle")
        free = host.slots
    if free < slots:
        where = f" in reservation {need_.reservation}" if need_.reservation else ""
        return Reason(api.PEND_NO_FREE_SLOTS, f"host {name} has {free} free slots{where}; the job needs "
                                              f"{slots}", "host_has_free_slots")
    return None


def shape_refusal(job: api.Job, parts: Sequence[Allocation], need_: Need,
                  usage: Usage | None = None) -> Reason | None:
    """Whether the allocation is one the job's requirement allows: distinct hosts, the count
    within -n min,max, span[] and same[] (the planner's rule, scheduler/plans.py, re-checked)."""
    if len(parts) == 1:  # (most allocations: one host, and no rule on how slots spread can refuse it)
        count = parts[0].slots
        ptile = need_.requirement.ptile
        if count >= 1 and least_slots(job) <= count <= job.spec.slots and (not ptile or count <= ptile):
            return None

    def bad(words: str) -> Reason:
        return Reason(api.PEND_NO_HOST_MATCHES, words, "shape")

    count = sum(part.slots for part in parts)
    if not parts or any(part.slots < 1 for part in parts):
        return bad("an allocation needs at least one slot on each of its hosts")
    if len({part.host for part in parts}) != len(parts):
        return bad("a host appears twice in the allocation")
    if not least_slots(job) <= count <= job.spec.slots:
        return bad(f"the allocation has {count} slots; the job takes {least_slots(job)} to {job.spec.slots}")
    req = need_.requirement
    most = max(part.slots for part in parts)
    if req.span_hosts == 1 and len(parts) > 1:
        return bad("span[hosts=1] puts every slot on one host")
    if req.ptile and (most > req.ptile or len(parts) != -(-count // req.ptile)):
        return bad(f"span[ptile={req.ptile}] takes {-(-count // req.ptile)} hosts with at most "
                   f"{req.ptile} slots each")
    if not req.span_hosts and not req.ptile and most > -(-count // len(parts)):
        return bad(f"{count} slots on {len(parts)} hosts take at most {-(-count // len(parts))} on each")
    if req.same and len(parts) > 1 and usage is not None:
        seen: set[tuple[resreq.Value | None, ...]] = set()
        for part in parts:
            host = usage.host(part.host)
            static = host.static if host is not None else _NO_ATTRIBUTES
            seen.add(tuple(static.get(name) for name in req.same))
        if len(seen) > 1 or None in next(iter(seen)):
            return bad(f"same[{':'.join(req.same)}]: the hosts differ")
    return None


def check(job: api.Job, allocation: Allocation | Sequence[Allocation], usage: Usage, forced: bool = False,
          need_: Need = NO_NEED, unknown: frozenset[str] = LOAD_INDICES, shape: bool = True) -> Reason | None:
    """None if `job` may run with `allocation` (one host's part, or all of them) now; else why
    not. `forced`: an operator's run (brun), which skips the policy checks (job-level, select[]
    and the allocation's shape), never the capacity ones (slots and consumables). `shape=False`:
    entries before format 6, whose replicas read neither -n min,max nor span[]."""
    parts: Sequence[Allocation] = (allocation,) if isinstance(allocation, Allocation) else allocation
    count = parts[0].slots if len(parts) == 1 else sum(part.slots for part in parts)
    reason = safety_refusal(job, usage) if forced else job_refusal(job, usage, count, need_, len(parts))
    if reason is not None:
        return reason
    if (reason := shared_refusal(need_, usage)) is not None:
        return reason
    if forced:
        need_ = need_.forced()
    elif shape and (reason := shape_refusal(job, parts, need_, usage)) is not None:
        return reason
    for part in parts:
        host = usage.host(part.host)
        if (reason := host_refusal(part.host, host, part.slots, need_, unknown, forced)) is not None:
            return reason
    return None


def shared_refusal(need_: Need, usage: Usage) -> Reason | None:
    """Whether the shared resources the job takes (licenses) are free now."""
    if not need_.shared_usage:
        return None
    totals = usage.shared()
    for name, amount in need_.shared_usage:
        total, used = totals.get(name, 0), usage.counter(shared_counter(name))
        if used + amount > total:
            return Reason(api.PEND_NO_FREE_RESOURCES, f"{name}: {used} of {total} in use; the job takes "
                          f"{amount}", "shared_free", name)
    return None


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


# The counts in a reason's words, in this order (LSF's bjobs -p, Nomad's "filtered N nodes").
_PHRASES = (("host_large_enough", "{h} {have} fewer than {slots} slots"),
            ("host_has_resource", "{h} {lack} {d}"),
            ("host_has_free_slots", "{h} {lack} free slots"),
            ("host_idle", "{h} {run} other jobs (the job is exclusive, -x)"),
            ("host_has_free_resource", "{h} {lack} free {d}"),
            ("host_asked", "{h} not among -m"),
            ("host_owner", "{h} refused its owner (no account there, or not allowed)"),
            ("host_closed", "{n} closed"),
            ("host_available", "{n} unavailable"))
# Which code a job gets, by the checks that refused hosts: the nearest to fitting first.
_CODES = ((("host_has_free_slots", "host_idle"), api.PEND_NO_FREE_SLOTS),
          (("host_has_free_resource",), api.PEND_NO_FREE_RESOURCES),
          (("host_closed",), api.PEND_HOST_CLOSED),
          (("host_owner",), api.PEND_OWNER_REFUSED),
          (("select", "host_asked", "host_large_enough", "host_has_resource"), api.PEND_NO_HOST_MATCHES))
# Would fit on a less busy host:
_BUSY = frozenset({"host_has_free_slots", "host_has_free_resource", "host_idle"})


def _phrase(template: str, n: int, slots: int, detail: str) -> str:
    one = n == 1
    return template.format(n=n, h=f"{n} host" if one else f"{n} hosts", have="has" if one else "have",
                           lack="lacks" if one else "lack", run="runs" if one else "run", slots=slots,
                           d=detail)


def explain(job: api.Job, usage: Usage, need_: Need = NO_NEED) -> Explanation:
    """Why `job` fits nowhere now: the host checks on every host, counted per check. A host that
    could take a part of a parallel job counts as fitting; if such hosts exist but no plan does,
    the reason says how many there are and what they have free together."""
    if (reason := job_refusal(job, usage, least_slots(job)) or shared_refusal(need_, usage)) is not None:
        return Explanation(reason)
    least = least_slots(job)
    req = need_.requirement
    part = least if req.span_hosts == 1 else min(req.ptile, least) if req.ptile else 1
    counts: Counter[str] = Counter()
    details: dict[str, set[str]] = {}
    hosts = fitting = free = capacity = 0
    for name, host in usage.hosts():
        hosts += 1
        refusal = host_refusal(name, host, part, need_)
        if refusal is None or refusal.check in _BUSY or refusal.check == "host_closed":
            capacity += host.slots  # what these hosts could give once their jobs end
        if refusal is None:
            fitting += 1
            free += host.slots - host.used
            continue
        counts[refusal.check] += 1
        if refusal.detail:
            details.setdefault(refusal.check, set()).add(refusal.detail)
    if not hosts:
        return Explanation(REASON_NO_HOSTS)
    if fitting and part == least:
        return Explanation(None)
    # The words stay the same while only the counts move; the planner sends such a change
    # at a bounded rate (scheduler/planner.py), so a busy cluster does not churn the log.
    passed = hosts - sum(counts[k] for k in ("host_available", "host_closed", "host_asked", "select"))
    parts = [f"{need_.select_words} matched {passed} of {hosts} hosts"] if need_.select_words else []
    if fitting:  # a part of a parallel job, each
        parts.append(f"{fitting} of {hosts} hosts can take a part ({free} free slots together); the job "
                     f"needs {least}" + (f" in tiles of {req.ptile}" if req.ptile else ""))
    elif not need_.select_words:
        parts.append(f"0 of {hosts} hosts can take {part} slot{'s' if part != 1 else ''}")
    for check_, phrase in _PHRASES:
        if counts[check_]:
            parts.append(_phrase(phrase, counts[check_], part, "/".join(sorted(details.get(check_, ())))))
    if fitting:
        code = api.PEND_NO_FREE_SLOTS
    else:
        code = next((c for checks, c in _CODES if any(counts[k] for k in checks)), api.PEND_HOSTS_UNAVAILABLE)
    if capacity < least and code in (api.PEND_NO_FREE_SLOTS, api.PEND_NO_FREE_RESOURCES):
        parts.append(f"{'they have' if capacity else 'none has'} {capacity or 'room'} slots in all")
        code = api.PEND_NO_HOST_MATCHES  # it would not fit on an idle cluster either
    return Explanation(Reason(code, "; ".join(parts), "explain"), dict(counts))


def host_state(host: api.Host, load: bool = False,
               earlier: tuple[api.Host, HostState] | None = None) -> HostState:
    """`load`: with the host's load indices (the planner; apply never reads them). `earlier`: a record
    of the same host and the state made of it: what comes of the spec and the groups alone is taken
    from it if they did not change (a planner keeping the states of a fleet makes them again for
    every job that starts or ends)."""
    # A host an exclusive job runs on has no room for any other (its slots count as all used, and
    # none of what a reservation keeps there is idle either: reservations.free_in).
    used = host.slots_used if not host.exclusive_job else \
        max(host.slots_used, host.spec.slots + sum(host.rsv_free.values()))
    if earlier is not None and earlier[0].spec == host.spec and earlier[0].groups == host.groups:
        totals, static, groups = earlier[1].totals, earlier[1].static, earlier[1].groups
    else:
        totals, static, groups = consumables(host), static_attributes(host), frozenset(host.groups)
    return HostState(host.spec.slots, host.status == api.HOST_OK, used, totals,
                     dict(host.reserved) if host.reserved else _EMPTY, static, host.closed,
                     groups, dict(host.load) if load and host.load else _EMPTY_LOAD, host.generation,
                     dict(host.rsv_free) if host.rsv_free else _EMPTY)
