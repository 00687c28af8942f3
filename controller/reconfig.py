"""Live reconfiguration (`xce reconfig`, `badmin reconfig`): a replica re-reads its cluster file.

Theory of operation. Each replica holds the configuration its file gave it
at start, and the leader pushes its own (upkeep.py) when the committed one
differs: so a file edited on every replica used to take effect only once
every replica had restarted (a leader with the old file pushed it back).
Reconfigure makes a replica read its file again: a file that does not parse
is refused as at start (the file, the line where it can be found, the key),
and nothing changes. A dry run only reads and checks: the CLI asks every
replica so first, and takes the file nowhere unless every replica that
answers can (their files may differ). What the state carries (queues with their fair share,
preemption and limits, [[limits]], host groups, shared resources and
licenses, the default queue, the clean period, history retention, the slot
bound of a job) are taken at once; if the replica leads, it commits the
configuration and answers once it is applied. What the running process was
built from (the replicas, the cluster id, the password, TLS, Raft, [hosts]
timings, group commit, [auth] and [roles], static tokens, MUNGE) is left as
it is, and the answer says that it needs a restart.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import TYPE_CHECKING

from controller import config as config_module
from controller import fsm
from controller.leader import config_current
from xce.errors import ServiceError
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

if TYPE_CHECKING:
    from controller.replica import Replica

COMMIT_WAIT_S = 10.0  # how long the leader's answer waits for the push to apply
READ_S = 10.0  # how long reading the file may take
# What a running replica cannot take from a re-read file: it was built from them.
NEEDS_RESTART = ("cluster_id", "password", "data_dir", "replicas", "raft", "group_commit_max_requests",
                 "group_commit_max_bytes", "group_commit_max_in_flight", "heartbeat_s", "heartbeat_timeout_s",
                 "unknown_timeout_s", "fence_s", "load_commit_s", "resend_s", "tls", "static_tokens", "munge",
                 "munge_roles", "munge_socket", "max_sync_streams", "max_sync_streams_total",
                 "handshake_timeout_s", "idle_connection_timeout_s", "policy")


def needs_restart(old: config_module.ClusterConfig, new: config_module.ClusterConfig) -> list[str]:
    """The settings the file changed that this process cannot take while it runs."""
    return [name for name in NEEDS_RESTART if getattr(old, name) != getattr(new, name)]


async def reconfigure(replica: Replica, dry_run: bool = False) -> api.ReconfigureResponse:
    from controller.replica import leader_settings  # the replica module imports this one

    try:  # off the replica's loop, bounded: a file on a hung file system must not stop the replica
        new = await asyncio.wait_for(asyncio.to_thread(config_module.load, replica.config.path), READ_S)
    except config_module.ConfigError as exc:
        raise ServiceError(log.INVALID_ARGUMENT, f"{exc}: nothing changed") from None
    except TimeoutError:
        raise ServiceError(log.UNAVAILABLE, f"{replica.config.path} could not be read within {READ_S:.0f} s: "
                                            "nothing changed") from None
    me = replica.me.id
    if new.cluster_id != replica.config.cluster_id or all(r.id != me for r in new.replicas):
        raise ServiceError(log.FAILED_PRECONDITION, f"{new.path} is not this replica's cluster file any "
                                                    f"more (cluster {new.cluster_id!r}, replica {me}): "
                                                    "nothing changed")
    fresh = leader_settings(new, me, replica.kinds)
    changed = replica.core.settings.init != fresh.init
    kept = needs_restart(replica.config, new)
    if dry_run:
        return api.ReconfigureResponse(replica_id=me, config_digest=fresh.init.config_digest, changed=changed)
    replica.core.reload(fresh.init)
    # What was taken is the new file's; what needs a restart stays as the process was built.
    built = {name: getattr(replica.config, name) for name in NEEDS_RESTART}
    replica.config = dataclasses.replace(new, **built)
    answer = api.ReconfigureResponse(replica_id=me, config_digest=fresh.init.config_digest,
                                     changed=changed, message=f"changed, taken at the next restart: "
                                     f"{', '.join(kept)}" if kept else "")
    if replica.core.serving_term() is None:
        return answer
    answer.leader = True
    answer.committed = await _applied(replica, fresh.init)
    return answer


async def _applied(replica: Replica, init: log.InitCluster) -> bool:
    """Whether the state holds `init`'s configuration within COMMIT_WAIT_S (the push is the upkeep's)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + COMMIT_WAIT_S
    replica.wake()
    ctx = replica.core.ctx
    while True:
        with ctx.state.read() as tables:
            current = config_current(fsm.read_meta(tables), init, ctx.voter_ids(tables))
        if current:
            return True
        left = deadline - loop.time()
        if left <= 0 or replica.core.serving_term() is None:
            return False
        try:
            await asyncio.wait_for(replica.applied.wait(), left)
        except TimeoutError:
            return False
