"""The invariants of tla/XceBarrier.tla, checked on the simulation's real state.

Each function has the name of the spec's invariant and raises
AssertionError (with what it saw) when it does not hold. Ghost facts recorded
while entries apply (cluster.Sim._first_apply) stand in for the spec's
history variable: the state hash and the view after every index, the
placements committed so far, and violations noticed at apply time
(StaleLeaseNoEffect, StaleConnectionNoEffect, replica divergence).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from controller import fsm
from xce.rules import feasibility
from xce.v1 import api_pb2 as api

from .cluster import Sim
from .raft import Replica


def _noticed(sim: Sim, name: str) -> None:
    seen = [v for v in sim.violations if v.startswith(name + ":")]
    assert not seen, seen[0]


def TypeOK(sim: Sim) -> None:
    """Replicas agree: the same committed entries, the same state after each index."""
    _noticed(sim, "TypeOK")
    for node in sim.workers.values():
        assert node.daemon is None or not node.daemon.session.failures, \
            f"a command failed on {node.name}: {node.daemon.session.failures[0] if node.daemon else ''}"
    for replica in sim.raft.replicas:
        assert replica.base_index <= replica.applied <= replica.commit <= replica.last_index(), \
            f"r{replica.rid}: base {replica.base_index} applied {replica.applied} commit {replica.commit}"
        # Each committed index is compared once per replica: Raft never rewrites one (a follower
        # that would records a violation: raft.py), so what was equal stays equal.
        checked = max(sim.entries_checked.get(replica.rid, 0), replica.base_index)
        for index in range(checked + 1, replica.commit + 1):
            committed = sim.raft.committed.get(index)
            assert committed is None or replica.entry(index) == committed, \
                f"r{replica.rid} holds a different entry {index} than the one committed"
        sim.entries_checked[replica.rid] = max(checked, replica.commit)


def NoDoubleRun(sim: Sim) -> None:
    """Never two live instances of one job (any attempts, any hosts)."""
    live = Counter(p.key[0] for p in sim.os.live())
    doubled = sorted(job for job, n in live.items() if n > 1)
    twice = [(p.key, p.host, p.pid) for p in sim.os.live() if doubled and p.key[0] == doubled[0]][:4]
    assert not doubled, f"job {doubled[0] if doubled else 0} runs twice: {twice}"


def _states(sim: Sim, name: str) -> list[Replica]:
    """The replicas whose state `name` has not judged yet: a replica's state is a function of its
    applied index (TypeOK holds them to it), so a state judged once needs no second look."""
    judged = sim.judged.setdefault(name, set())
    fresh = [r for r in sim.raft.replicas if (r.rid, r.applied) not in judged]
    judged.update((r.rid, r.applied) for r in fresh)
    return fresh


def _holds(job: api.Job) -> list[api.HostAllocation]:
    """What a job holds on each of its hosts: its allocation, less what it gave back while suspended."""
    given = {part.host: part for part in job.released}
    held = []
    for part in feasibility.allocation_of(job):
        back = given.get(part.host)
        if back is None:
            held.append(part)
        else:
            resources = {r: n - back.resources.get(r, 0) for r, n in part.resources.items()}
            held.append(api.HostAllocation(host=part.host, slots=part.slots - back.slots,
                                           resources={r: n for r, n in resources.items() if n}))
    return held


def CapacitySafe(sim: Sim) -> None:
    """Per resource: the slots of the processes running (not stopped) on a host never exceed its
    slots, a preemptor's beside its victims' included; in committed state, what its jobs hold (a
    suspended victim's given back) never exceeds its slots, nor any consumable its total."""
    for name, node in sim.workers.items():
        running = [p for p in sim.os.live() if p.host == name and not p.stopped]
        used = sum(p.slots for p in running)
        assert used <= node.spec.slots, \
            f"{name} runs {used} slots of {node.spec.slots}: {[(p.key, p.slots) for p in running]}"
    for replica in _states(sim, "CapacitySafe"):
        tables = replica.tables
        for _, raw in tables.scan("hosts"):
            host = api.Host.FromString(raw)
            held = [fsm.read_job(tables, i) for i in fsm.host_job_ids(tables, host.spec.name)]
            slots = sum(p.slots for j in held if j is not None for p in _holds(j)
                        if p.host == host.spec.name)
            totals = feasibility.consumables(host)
            over = {r: (n, totals.get(r, 0)) for r, n in host.reserved.items() if n > totals.get(r, 0)}
            assert not over, f"r{replica.rid} {host.spec.name} reserves more than it has: {over}"
            assert host.slots_used == slots <= host.spec.slots, \
                f"r{replica.rid} {host.spec.name}: slots_used {host.slots_used}, jobs hold {slots}, " \
                f"has {host.spec.slots}"


def HeldExactly(sim: Sim) -> None:
    """What each host has in use (slots and every consumable) is what the allocations of its running
    jobs hold there: whole allocations, the first host running the command, given back exactly (a
    suspended victim's in two steps: at its stop, what its queue lets go; at its end, the rest)."""
    for replica in _states(sim, "HeldExactly"):
        tables = replica.tables
        slots: Counter[str] = Counter()
        reserved: dict[str, Counter[str]] = {}
        for _, raw in tables.scan("jobs"):
            job = api.Job.FromString(raw)
            if job.state not in fsm.RUNNING:
                continue
            parts = feasibility.allocation_of(job)
            assert parts and parts[0].host == job.host, \
                f"r{replica.rid} job {job.id} runs on {job.host}: {parts}"
            assert feasibility.least_slots(job) <= sum(p.slots for p in parts) <= job.spec.slots
            for part in _holds(job):
                slots[part.host] += part.slots
                reserved.setdefault(part.host, Counter()).update(part.resources)
        for _, raw in tables.scan("hosts"):
            host = api.Host.FromString(raw)
            name = host.spec.name
            assert host.slots_used == slots[name], \
                f"r{replica.rid} {name}: {host.slots_used} used, jobs hold {slots[name]}"
            held = {r: n for r, n in reserved.get(name, Counter()).items() if n}
            assert dict(host.reserved) == held, \
                f"r{replica.rid} {name}: reserved {dict(host.reserved)}, jobs hold {held}"


def DispatchAfterCommit(sim: Sim) -> None:
    """Every instance was started for a DISPATCH of that attempt already committed."""
    early = [p for p in sim.os.processes.values() if not p.committed_at_spawn]
    assert not early, f"instance {early[0].key} on {early[0].host} started before its dispatch committed"


def NoLostJob(sim: Sim) -> None:
    """An acknowledged job is in the committed state of every replica that applied its
    index, and every leader's log holds the entry that created it."""
    applied = {r.rid: fsm.read_meta(r.tables).applied_index for r in sim.raft.replicas}
    for job_id, revision in sorted(sim.client.acked.items()):
        committed = sim.raft.committed.get(revision)
        for replica in sim.raft.replicas:
            if applied[replica.rid] >= revision:
                assert fsm.read_job(replica.tables, job_id) is not None, \
                    f"acknowledged job {job_id} (revision {revision}) missing on r{replica.rid}"
            if replica.leading and committed is not None:
                assert replica.has(revision, committed.term), \
                    f"leader r{replica.rid} lacks entry {revision} of acknowledged job {job_id}"


def ViewConsistent(sim: Sim) -> None:
    """A scheduler's view at revision r equals the committed state at r."""
    for scheduler in sim.schedulers.values():
        view = scheduler.view
        if view.revision == 0:
            continue
        expected = sim.view_hashes.get(view.revision)
        assert expected is not None, f"{scheduler.id} at revision {view.revision}, never committed"
        assert view.dump() == expected, \
            f"{scheduler.id}'s view at revision {view.revision} differs from the committed state there"


def StaleLeaseNoEffect(sim: Sim) -> None:
    """A batch whose lease epoch (or holder) is not current changes nothing."""
    _noticed(sim, "StaleLeaseNoEffect")


def StaleConnectionNoEffect(sim: Sim) -> None:
    """A report or host status of a connection superseded by a later join changes nothing."""
    _noticed(sim, "StaleConnectionNoEffect")


def FreshGeneration(sim: Sim) -> None:
    """Each join of a host gets a generation above every earlier one, so a re-joined
    connection is never taken for an older one."""
    _noticed(sim, "FreshGeneration")


def RefusalRespected(sim: Sim) -> None:
    """No pass dispatches to a host whose worker refused a dispatch that the pass's view
    held, within the refusal cool-down of that refusal (checked on every committed batch,
    from the inputs it records: its view's revision and its clock)."""
    _noticed(sim, "RefusalRespected")


INVARIANTS: dict[str, Callable[[Sim], None]] = {
    f.__name__: f for f in (TypeOK, NoDoubleRun, CapacitySafe, HeldExactly, DispatchAfterCommit, NoLostJob,
                            ViewConsistent, StaleLeaseNoEffect, FreshGeneration, StaleConnectionNoEffect,
                            RefusalRespected)}


def check_all(sim: Sim) -> None:
    for name, invariant in INVARIANTS.items():
        try:
            invariant(sim)
        except AssertionError as exc:
            raise AssertionError(f"{name} violated: {exc}") from None
