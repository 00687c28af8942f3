"""Host groups, shared resources and closed hosts (entry format 7 and the `host_control` kind).

Host groups (`[host_groups]` in the cluster file, LSF's HostGroup section)
and shared resources (`[shared_resources]`: cluster-wide consumables such as
software licenses, Slurm's Licenses=, LSF's shared resources) come with the
configuration push (InitCluster), applied when their digest changed: the
groups go in the meta and each host record lists the groups it is a member
of (so the scheduler, which reads host records, needs nothing else); the
shared resources go in the `shared` table, which the Sync stream carries.
What running jobs hold of a shared resource is the counter
`shared/<name>`, recorded in each job's `holds` and given back exactly.

A closed host (`xce host close`, LSF's badmin hclose, Slurm's drain) takes
no new jobs; its running jobs finish. The mark is the operator's, kept
across the worker's re-joins until `xce host open`.
"""

from __future__ import annotations

from collections.abc import Iterable

from controller.fsm.applier import Applier
from controller.fsm.records import read_host
from controller.fsm.requests import guarded
from xce.errors import ServiceError, invalid
from xce.rules import feasibility
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

MAX_GROUPS = 1000
MAX_GROUP_MEMBERS = 100_000
MAX_SHARED = 1000
MAX_REASON = 512


def valid_name(name: str) -> bool:
    """A name the requirement language can read (select[gpu_nodes], rusage[license_x=1])."""
    return 0 < len(name) <= 64 and (name[0].isascii() and (name[0].isalpha() or name[0] == "_")) \
        and all(c.isascii() and (c.isalnum() or c in "_.") for c in name)


def check_resources(groups: Iterable[api.HostGroup], shared: Iterable[api.SharedResource]) -> None:
    groups, shared = list(groups), list(shared)
    if len(groups) > MAX_GROUPS or len(shared) > MAX_SHARED:
        raise invalid(f"at most {MAX_GROUPS} host groups and {MAX_SHARED} shared resources")
    for group in groups:
        if not valid_name(group.name):
            raise invalid(f"bad host group name {group.name[:80]!r} "
                          "(a letter or _, then letters, digits, _ .)")
        if len(group.members) > MAX_GROUP_MEMBERS or any(not 0 < len(m) <= 64 for m in group.members):
            raise invalid(f"host group {group.name}: at most {MAX_GROUP_MEMBERS} host names "
                          "of 1-64 characters")
    for resource in shared:
        if not valid_name(resource.name) or not 0 <= resource.total <= feasibility.MAX_AMOUNT:
            raise invalid(f"bad shared resource {resource.name[:80]!r} = {resource.total} "
                          "(a name, a total >= 0)")
    names = [g.name for g in groups] + [r.name for r in shared]
    if len(set(names)) != len(names):
        raise invalid("host groups and shared resources need names of their own")


def apply_resources(applier: Applier, init: log.InitCluster) -> None:
    """The configuration push's groups and shared resources (format 7), if their digest changed."""
    meta = applier.meta
    if init.resources_digest == meta.resources_digest:
        return
    check_resources(init.host_groups, init.shared)
    meta.ClearField("host_groups")
    meta.host_groups.extend(sorted(init.host_groups, key=lambda g: g.name))
    for _, raw in list(applier.tables.scan("hosts")):
        host = api.Host.FromString(raw)
        groups = groups_of(meta, host.spec.name)
        if list(host.groups) != groups:
            host.ClearField("groups")
            host.groups.extend(groups)
            applier.put_host(host)
    applier.replace_table("shared", {r.name.encode(): r.SerializeToString(deterministic=True)
                                     for r in init.shared})
    meta.resources_digest = init.resources_digest


def groups_of(meta: log.Meta, host: str) -> list[str]:
    return [g.name for g in meta.host_groups if host in g.members]


def apply_host_control(applier: Applier) -> list[log.Result]:
    request = applier.entry.host_control

    def body() -> log.Result:
        host = read_host(applier.tables, request.name)
        if host is None:
            raise ServiceError(log.NOT_FOUND, f"no host {request.name[:80]!r}")
        if request.close:
            host.closed = True
            host.closed_reason = request.reason[:MAX_REASON]
            host.closed_time_ms = applier.stamp_ms
            host.closed_by = applier.entry.by.name
        else:
            for name in ("closed", "closed_reason", "closed_time_ms", "closed_by"):
                host.ClearField(name)
        applier.put_host(host)
        return log.Result(code=log.OK, generation=host.generation)

    return [guarded(request.request_id, applier, body)]
