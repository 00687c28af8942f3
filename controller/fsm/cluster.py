"""The cluster's configuration and membership: init, queues, capability announcements.

InitCluster is the configuration push every new leader makes when the file
differs from what is committed: the cluster id is set once and must agree
afterwards; queues are upserted only when the digest changed, so a restart
does not undo an operator's queue updates (like LSF's badmin reconfig).
An announcement records what one replica's code understands (versions.py).
"""

from __future__ import annotations

from controller.fsm import limit_config, resources
from controller.fsm.applier import Applier
from controller.fsm.records import read_queue
from controller.fsm.requests import guarded
from controller.fsm.validation import DEFAULT_MAX_SLOTS, DEFAULT_QUEUE, check_queue
from controller.fsm.versions import HISTORY_FORMAT, LIMITS_FORMAT, RESOURCES_FORMAT, USER_GROUP_FORMAT
from xce.errors import ServiceError, invalid
from xce.rules import user_groups
from xce.v1 import log_pb2 as log

MAX_ANNOUNCED_KINDS = 256


def apply_put_queue(applier: Applier) -> list[log.Result]:
    put = applier.entry.put_queue

    def body() -> log.Result:
        check_queue(put.queue, applier.entry.format)
        existing = read_queue(applier.tables, put.queue.name)
        if put.create and existing is not None:
            raise ServiceError(log.ALREADY_EXISTS, f"queue {put.queue.name!r} exists")
        if not put.create and existing is None:
            raise ServiceError(log.NOT_FOUND, f"no queue {put.queue.name!r}")
        if existing != put.queue:  # re-pushing the same configuration changes nothing
            applier.put_queue(put.queue)
        return log.Result(code=log.OK)

    return [guarded(put.request_id, applier, body)]


def apply_init(applier: Applier) -> list[log.Result]:
    init, meta = applier.entry.init, applier.meta
    refused = _init_refused(applier, init)
    if refused is not None:
        return [refused]
    meta.cluster_id = init.cluster_id
    meta.default_queue = init.default_queue or DEFAULT_QUEUE
    meta.max_slots_per_job = init.max_slots_per_job or DEFAULT_MAX_SLOTS
    meta.events_kept = init.events_kept
    if applier.entry.format >= HISTORY_FORMAT:
        meta.clean_period_ms = init.clean_period_ms
        meta.history_retention_ms = init.history_retention_ms
    if init.config_digest != meta.config_digest:
        for queue in init.queues:
            if read_queue(applier.tables, queue.name) != queue:
                applier.put_queue(queue)
        meta.config_digest = init.config_digest
    if applier.entry.format >= RESOURCES_FORMAT:
        resources.apply_resources(applier, init)
    if applier.entry.format >= LIMITS_FORMAT:
        limit_config.apply_limits(applier, init)
    if applier.entry.format >= USER_GROUP_FORMAT and init.user_groups_digest != meta.user_groups_digest:
        meta.ClearField("user_groups")
        meta.user_groups.extend(init.user_groups)
        meta.user_groups_digest = init.user_groups_digest
    return [log.Result(code=log.OK)]


def _init_refused(applier: Applier, init: log.InitCluster) -> log.Result | None:
    """Why a configuration push is refused as a whole (nothing of it applied), if it is."""
    meta, format_ = applier.meta, applier.entry.format
    if meta.cluster_id and meta.cluster_id != init.cluster_id:
        return log.Result(code=log.FAILED_PRECONDITION,
                          message=f"state belongs to cluster {meta.cluster_id}, not {init.cluster_id}")
    try:
        for queue in init.queues:
            check_queue(queue, format_)
        if format_ >= RESOURCES_FORMAT:
            resources.check_resources(init.host_groups, init.shared)
        if format_ >= LIMITS_FORMAT:
            limit_config.check(init)
        if format_ >= USER_GROUP_FORMAT:
            try:
                user_groups.check(init.user_groups)
            except user_groups.UserGroupError as exc:
                raise invalid(str(exc)) from None
    except ServiceError as exc:
        return exc.to_result()
    return None


def apply_announce(applier: Applier) -> list[log.Result]:
    announce, meta = applier.entry.announce, applier.meta
    kinds = sorted(set(announce.kinds))
    if announce.replica_id <= 0 or len(kinds) > MAX_ANNOUNCED_KINDS or any(len(k) > 64 for k in kinds):
        return [log.Result(code=log.INVALID_ARGUMENT, message="a replica id and at most 256 short kinds")]
    capabilities = meta.members[announce.replica_id]
    capabilities.Clear()
    capabilities.kinds.extend(kinds)
    capabilities.format = announce.format
    return [log.Result(code=log.OK)]
