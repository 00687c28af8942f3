"""Fair share (LSF fairshare, Slurm's fair tree): who of a busy queue's users and projects goes next.

A queue with `fairshare` in its record (and the `fairshare` picker) gives
each user and project a share. Its consumers form a tree: the queue, then
the job's project path (`-P research/genomics`: research, then genomics
under it; no -P: the project `default`), then, where the queue gives user
groups shares, the job's user group (`@physics`: `bsub -G physics`, else
the first of the queue's groups, by name, that has the owner, else
`@default`), then the user. The group is a node of the project's path
(`research/@physics`: "@" is in no project's name), so usage is kept and
reported per path as before. At every level
each node has a priority

    priority = (its shares / its siblings' shares) / (running slots + recent slots + EPSILON)

where running slots are what its jobs hold now, and recent slots are its
historical usage (the slot-time of its jobs that ended, decayed with the
queue's half-life) as an average over a half-life (a steady r slots decays
to r * half_life / ln 2 slot-ms). A pass takes, at each level, the child of
highest priority (then the larger share, then the name), down to a user,
and that user's next job (job priority, then submit time, then id); the job
counts as running from then on, so one pass already shares out the slots
it places. Saturated, slots go in the ratio of the shares.

Every input is committed (the queue's record, the jobs, the `share_usage`
table that apply credits at each job's end) and the time is the pass's
`now_ms`, so every scheduler computes the same order. Apply's credit is
integer arithmetic (`credit`: whole sixteenths of a half-life, by a table of
2^(-i/16) in fixed point), so replicas agree bit for bit; the order's
floats are the scheduler's own.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from xce.rules import feasibility
from xce.v1 import api_pb2 as api

STEPS = 16  # a half-life in steps of this many
# round(2 ** (-i / 16) * 2 ** 30): fixed, so that every replica decays alike (no libm in apply)
_FACTORS = (1073741824, 1028218693, 984625594, 942880699, 902905651, 864625413, 827968132, 792865000,
            759250125, 727060411, 696235434, 666717336, 638450708, 611382493, 585461881, 560640218)
DEFAULT = "default"
EPSILON = 1e-9
MAX_SHARES = 1 << 30
MAX_NAMES = 10_000
DEFAULT_HALF_LIFE_S = 5 * 3600  # LSF's HIST_HOURS
RUNNING = frozenset({api.RUN, api.USUSP, api.UNKWN})  # states whose slots count as running (not SSUSP)


def half_life_ms(config: api.FairShare) -> int:
    return (config.half_life_s or DEFAULT_HALF_LIFE_S) * 1000


def credit(value: int, stamp_ms: int, now_ms: int, half_life: int, add: int) -> tuple[int, int]:
    """A usage record (value in slot-ms, as of stamp_ms) decayed to now in whole steps, plus `add`:
    the new (value, stamp). Integers only: the same on every replica."""
    step_ms = max(1, half_life // STEPS)
    steps = max(0, now_ms - stamp_ms) // step_ms
    halvings, rest = divmod(steps, STEPS)
    value = value >> halvings if halvings < 64 else 0
    value = (value * _FACTORS[rest]) >> 30
    return value + add, stamp_ms + steps * step_ms if value else now_ms


def decayed(value: int, stamp_ms: int, now_ms: int, half_life: int) -> float:
    """What a usage record is worth now (slot-ms)."""
    return value * math.pow(2.0, -max(0, now_ms - stamp_ms) / half_life)


def usage_key(queue: str, project: str, user: str) -> bytes:
    return f"{queue}\0{project}\0{user}".encode()


def split_key(key: bytes) -> tuple[str, str, str]:
    queue, project, user = key.decode().split("\0")
    return queue, project, user


def project_of(spec: api.JobSpec) -> str:
    return spec.project or DEFAULT


def group_of(config: api.FairShare, spec: api.JobSpec) -> str:
    """The user group a job is charged to in a queue whose fair share gives groups shares ("" if it
    gives none): its -G group if the queue has it and the owner is still a member, else the first of
    the queue's groups with the owner, else `default`."""
    if not config.groups:
        return ""
    members = {group.name: group.members for group in config.group_members}
    if spec.user_group in config.groups and spec.user in members.get(spec.user_group, ()):
        return spec.user_group
    for name in sorted(config.groups):
        if spec.user in members.get(name, ()):
            return name
    return DEFAULT


def charge_path(config: api.FairShare, spec: api.JobSpec) -> str:
    """The job's node above its user: its project path, and its user group under it if any."""
    group = group_of(config, spec)
    return f"{project_of(spec)}/@{group}" if group else project_of(spec)


def slot_ms(job: api.Job, end_ms: int = 0) -> int:
    """What an attempt used: its slots times its run time (0 if it never started), less the time it
    was suspended with its slots given back (to a preemptor). `end_ms`: when it ended, if the job
    does not say (a requeued attempt)."""
    end = job.end_time_ms or end_ms
    if not job.start_time_ms or end <= job.start_time_ms:
        return 0
    suspended = job.suspended_ms + (max(0, end - job.stopped_at_ms) if job.stopped_at_ms else 0)
    return feasibility.held_slots(job) * max(0, end - job.start_time_ms - suspended)


def check(config: api.FairShare, where: str) -> None:
    """ValueError naming the key: shares are whole numbers from 1, names are users or project paths."""
    if not 0 <= config.half_life_s <= 10 * 365 * 86400:
        raise ValueError(f"{where}: half_life_s: from 1 s to ten years, got {config.half_life_s}")
    for key, shares in (("users", config.users), ("projects", config.projects), ("groups", config.groups)):
        if len(shares) > MAX_NAMES:
            raise ValueError(f"{where}: {key}: at most {MAX_NAMES} names")
        for name, value in shares.items():
            if not 1 <= value <= MAX_SHARES:
                raise ValueError(f"{where}: {key}: {name!r}: shares are whole numbers from 1 to "
                                 f"{MAX_SHARES}, got {value}")
            parts = name.split("/") if key == "projects" else [name]
            odd = key == "groups" and "@" in name  # (a group's node is "@name": none in the name itself)
            if not name or len(name) > 256 or "\0" in name or not all(parts) or odd:
                raise ValueError(f"{where}: {key}: bad name {name[:80]!r}")
    listed = {group.name for group in config.group_members}
    for name in config.groups:
        if name != DEFAULT and name not in listed:
            raise ValueError(f"{where}: groups: {name!r} is not a user group ([user_groups])")


# ---------------------------------------------------------------- the tree


@dataclass
class Node:
    """A project, or a user under its project (a leaf)."""

    name: str
    path: str
    shares: int
    running: float = 0.0  # slots its jobs hold now (and, in a pass, those ordered so far)
    recent: float = 0.0  # decayed historical usage, as average slots over a half-life
    children: dict[str, Node] = field(default_factory=dict)
    jobs: list[api.Job] = field(default_factory=list)  # a leaf's pending jobs, in its order

    def usage(self) -> float:
        return self.running + self.recent

    def sibling_shares(self) -> int:
        return sum(child.shares for child in self.children.values())


def _shares_of(config: api.FairShare, kind: str, name: str) -> int:
    if kind == "project" and "@" in name:  # research/@physics: a user group under its project
        kind, name = "group", name.rpartition("@")[2]
    table = {"user": config.users, "project": config.projects, "group": config.groups}[kind]
    return table.get(name, table.get(DEFAULT, 1))


def build(config: api.FairShare, queue: str, jobs: Iterable[api.Job],
          usage: Mapping[tuple[str, str], tuple[int, int]], now_ms: int) -> Node:
    """The queue's tree: its running jobs' slots, its users' recent usage, its pending jobs at the leaves.
    `usage`: (project, user) -> (slot-ms, stamp) from the share_usage table."""
    root = Node(queue, "", 1)
    half = half_life_ms(config)

    def leaf(project: str, user: str) -> list[Node]:
        path, node, parts = [root], root, project.split("/")
        for depth in range(len(parts)):
            name = "/".join(parts[:depth + 1])
            child = node.children.get(name)
            if child is None:
                child = node.children[name] = Node(parts[depth], name, _shares_of(config, "project", name))
            path.append(child)
            node = child
        child = node.children.get("@" + user)
        if child is None:
            shares = _shares_of(config, "user", user)
            child = node.children["@" + user] = Node(user, f"{project}:{user}", shares)
        path.append(child)
        return path

    paths: dict[tuple[str, str, str], list[Node]] = {}
    pend = api.PEND
    for job in jobs:
        spec = job.spec
        state = job.state
        if spec.queue != queue or (state != pend and state not in RUNNING):
            continue
        asked = (spec.project, spec.user, spec.user_group)
        path = paths.get(asked)
        if path is None:
            path = paths[asked] = leaf(charge_path(config, spec), spec.user)
        if state == pend:
            path[-1].jobs.append(job)
        else:
            slots = feasibility.held_slots(job)
            for node in path:
                node.running += slots
    to_slots = math.log(2) / half
    for (project, user), (value, stamp) in sorted(usage.items()):
        recent = decayed(value, stamp, now_ms, half) * to_slots
        if recent < 1e-6:
            continue
        for node in leaf(project, user):
            node.recent += recent
    return root


def priority(node: Node, parent: Node) -> float:
    fraction = node.shares / max(1, parent.sibling_shares())
    return fraction / (node.usage() + EPSILON)


def order(config: api.FairShare, queue: str, jobs: Sequence[api.Job],
          usage: Mapping[tuple[str, str], tuple[int, int]], now_ms: int) -> list[api.Job]:
    """The queue's pending jobs in fair-share order (see the module's words), as one sort per node:
    a user's jobs by job priority, submit time and id; a node's, its children's merged, each job
    keyed by (its child's usage + the slots of the child's jobs before it) / the child's fraction of
    its siblings' shares, smallest first (ties: the larger share, the job's own order, the path).
    Taking, at every level, the child of highest priority, job by job, gives the same order."""
    root = build(config, queue, jobs, usage, now_ms)

    def ordered(node: Node) -> list[tuple[tuple[int, int, int], int, api.Job]]:
        """(the job's own order, its slots, the job), in the node's order. (Tuples sort as they are:
        the job's own order ends with its id, so no two compare equal and jobs are never compared.)"""
        if not node.children:
            jobs = [(_job_key(job), job.spec.slots, job) for job in node.jobs]
            jobs.sort()
            return jobs
        total = max(1, node.sibling_shares())
        keyed: list[tuple[float, int, tuple[int, int, int], str, int, api.Job]] = []
        append = keyed.append
        for child in node.children.values():
            fraction = child.shares / total
            used = child.usage() + EPSILON
            shares, path = -child.shares, child.path
            for key, slots, job in ordered(child):
                append((used / fraction, shares, key, path, slots, job))
                used += slots
        keyed.sort()
        return [(entry[2], entry[4], entry[5]) for entry in keyed]

    return [entry[2] for entry in ordered(root)]


def _job_key(job: api.Job) -> tuple[int, int, int]:
    return (-job.spec.priority, job.submit_time_ms, job.id)


Row = tuple[str, int, float, float, float]


def report(config: api.FairShare, queue: str, jobs: Sequence[api.Job],
           usage: Mapping[tuple[str, str], tuple[int, int]], now_ms: int) -> list[Row]:
    """Rows of `xce fairshare` (bqueues -r, sshare): path, shares, running slots, recent slots, priority."""
    root = build(config, queue, jobs, usage, now_ms)
    rows: list[Row] = []

    def visit(node: Node) -> None:
        for child in sorted(node.children.values(), key=lambda c: c.path):
            rows.append((child.path, child.shares, child.running, child.recent, priority(child, node)))
            visit(child)

    visit(root)
    return rows

