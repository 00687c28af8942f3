"""Limits on what running jobs hold together, like the Limit sections of LSF's lsb.resources.

    [[limits]]
    name = "users_normal"
    queues = ["normal"]        # consumers: jobs of these queues (absent: every queue)
    per_user = true            # each user separately (users = [...]: the listed users together)
    slots = 64                 # bounds: slots, jobs, consumables (rusage[] summed over hosts, licenses)
    jobs = 100
    resources = { gpu = 8 }

A job is a consumer of a limit when its user, queue and project are among
the limit's (an empty list, or "all", takes every one; a project takes the
projects under it: `research` takes `research/genomics`). Each limit, and
for per_X each value of X, is a set of cluster-wide counters
`limit/<name>/<key>/<metric>` (xce/rules/feasibility.py): a running job holds
its slots, 1 job and its consumables there, recorded in the job's `holds`
when it is placed, so exactly those come back at its end even if the
limits changed meanwhile. The planner and the commit barrier refuse a
placement that would pass a bound, by the same function (`refusal`), and
the reason names the limit: `user alice at 64/64 slots in queue normal
(limit "users_normal")`.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from xce.v1 import api_pb2 as api

MAX_LIMITS = 1000
MAX_NAME = 64
MAX_CONSUMERS = 1000  # names in one limit's list
ALL = "all"
DEFAULT_PROJECT = "default"
METRICS = ("slots", "jobs")


class LimitError(ValueError):
    """A limit that cannot be used; the message names the limit and the key."""


def project_of(spec: api.JobSpec) -> str:
    return spec.project or DEFAULT_PROJECT


def _in(names: Sequence[str], value: str) -> bool:
    return not names or ALL in names or value in names


def _in_project(names: Sequence[str], project: str) -> bool:
    return not names or ALL in names or any(project == n or project.startswith(n + "/") for n in names)


def consumer(limit: api.Limit, job: api.Job) -> bool:
    spec = job.spec
    return _in(limit.users, spec.user) and _in(limit.queues, spec.queue) \
        and _in_project(limit.projects, project_of(spec)) \
        and (not limit.groups or any(_within(spec.job_group, g) for g in limit.groups))


def _within(group: str, path: str) -> bool:
    """A job of `group` is of `path` and the groups above it (xce/rules/job_groups.py)."""
    return group == path or group.startswith(path + "/")


def _key(limit: api.Limit, job: api.Job) -> str:
    parts = []
    if limit.per_user:
        parts.append(f"u={job.spec.user}")
    if limit.per_queue:
        parts.append(f"q={job.spec.queue}")
    if limit.per_project:
        parts.append(f"p={project_of(job.spec)}")
    return ",".join(parts) or ALL


def counter(name: str, key: str, metric: str) -> str:
    return f"limit/{name}/{key}/{metric}"


@dataclass(frozen=True)
class Demand:
    """What a job would hold of one bounded counter."""

    counter: str
    amount: int
    bound: int
    limit: api.Limit
    metric: str


class LimitSet(list[api.Limit]):
    """The limits of one pass or entry, remembering which apply to whom (users, queues and projects
    repeat across thousands of jobs)."""

    def __init__(self, limits: Iterable[api.Limit] = ()) -> None:
        super().__init__(limits)
        self._matches: dict[tuple[str, str, str, str], list[tuple[api.Limit, str]]] = {}

    def matching(self, job: api.Job) -> list[tuple[api.Limit, str]]:
        who = (job.spec.user, job.spec.queue, job.spec.project, job.spec.job_group)
        found = self._matches.get(who)
        if found is None:
            found = self._matches[who] = _matching(self, job)
        return found


def _matching(limits: Iterable[api.Limit], job: api.Job) -> list[tuple[api.Limit, str]]:
    return [(limit, _key(limit, job)) for limit in limits if consumer(limit, job)]


def demands(limits: Iterable[api.Limit], job: api.Job, slots: int, hosts: int = 1,
            per_host: Sequence[tuple[str, int]] = (), shared: Sequence[tuple[str, int]] = ()) -> list[Demand]:
    """The bounded counters a running attempt of `job` with `slots` over `hosts` hosts holds
    (`per_host`: what its rusage[] reserves on each host; `shared`: the licenses it takes)."""
    if not limits:  # (a cluster without limits: every dispatch passes here)
        return []
    found = []
    matches = limits.matching(job) if isinstance(limits, LimitSet) else _matching(limits, job)
    for limit, key in matches:
        for metric, bound, amount in (("slots", limit.slots, slots), ("jobs", limit.jobs, 1)):
            if bound > 0:
                found.append(Demand(counter(limit.name, key, metric), amount, bound, limit, metric))
        if limit.resources:
            amounts = dict(shared)
            for name, amount in per_host:
                amounts[name] = amounts.get(name, 0) + amount * hosts
            for name in sorted(limit.resources):
                bound, amount = limit.resources[name], amounts.get(name, 0)
                if bound > 0 and amount > 0:
                    found.append(Demand(counter(limit.name, key, name), amount, bound, limit, name))
    return found


def refusal(found: Sequence[Demand], read: Callable[[str], int]) -> tuple[Demand, int] | None:
    """The first demand that would pass its bound, with what is held of it; `read(counter)` gives
    what is held (the committed counters, and a pass's own placements)."""
    for demand in found:
        held = read(demand.counter)
        if held + demand.amount > demand.bound:
            return demand, held
    return None


def words(demand: Demand, held: int, job: api.Job) -> str:
    """`user alice at 64/64 slots in queue normal (limit "users_normal")`."""
    limit, spec = demand.limit, job.spec
    who = []
    if limit.per_user:
        who.append(f"user {spec.user}")
    elif limit.users and ALL not in limit.users:
        who.append(f"users {', '.join(limit.users[:5])}{' ...' if len(limit.users) > 5 else ''}")
    if limit.per_project:
        who.append(f"project {project_of(spec)}")
    elif limit.projects and ALL not in limit.projects:
        who.append(f"projects {', '.join(limit.projects[:5])}{' ...' if len(limit.projects) > 5 else ''}")
    subject = " of ".join(who) or "running jobs"
    where = ""
    if limit.per_queue or len(limit.queues) == 1 and ALL not in limit.queues:
        where = f" in queue {spec.queue}"
    elif limit.queues and ALL not in limit.queues:
        where = f" in queues {', '.join(limit.queues[:5])}"
    return f'{subject} at {held}/{demand.bound} {demand.metric}{where} (limit "{limit.name}")'


def room(found: Sequence[Demand], read: Callable[[str], int], most: int) -> int:
    """The most slots a job may take under the slot bounds among `found` (for -n min,max)."""
    for demand in found:
        if demand.metric == "slots":
            most = min(most, max(0, demand.bound - read(demand.counter)))
    return most


def check(limits: Sequence[api.Limit]) -> None:
    """LimitError naming the limit and the key, for a limit that cannot be used."""
    if len(limits) > MAX_LIMITS:
        raise LimitError(f"at most {MAX_LIMITS} limits")
    seen: set[str] = set()
    for limit in limits:
        name = limit.name
        if not name or len(name) > MAX_NAME or not all(c.isascii() and (c.isalnum() or c in "_-.")
                                                       for c in name):
            raise LimitError(f"limit {name[:80]!r}: name: letters, digits, _ - . (1-{MAX_NAME})")
        if name in seen:
            raise LimitError(f"limit {name!r}: name: defined twice")
        seen.add(name)
        for key, values in (("users", limit.users), ("queues", limit.queues), ("projects", limit.projects)):
            if len(values) > MAX_CONSUMERS:
                raise LimitError(f"limit {name!r}: {key}: at most {MAX_CONSUMERS} names")
            for value in values:
                if not value or len(value) > 256 or "\x00" in value or "/" in value and key != "projects":
                    raise LimitError(f"limit {name!r}: {key}: bad name {value[:80]!r}")
                if value.startswith("@"):
                    raise LimitError(f"limit {name!r}: {key}: {value!r}: user groups are not supported in "
                                     "limits; list the users")
        for key, bound in (("slots", limit.slots), ("jobs", limit.jobs), *sorted(limit.resources.items())):
            if not 0 <= bound <= 1 << 40:
                raise LimitError(f"limit {name!r}: {key}: a bound is a whole number from 0 (none) to 2^40, "
                                 f"got {bound}")
        for resource in limit.resources:
            if resource in METRICS or not resource or len(resource) > 64 or not all(
                    c.isascii() and (c.isalnum() or c == "_") for c in resource):
                raise LimitError(f"limit {name!r}: resources: bad name {resource[:80]!r}")
        if not (limit.slots or limit.jobs or any(limit.resources.values())):
            raise LimitError(f"limit {name!r}: no bound: give slots, jobs or resources")
