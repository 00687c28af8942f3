"""What a replica says of itself and of the cluster (the Status call), and how it asks its peers.

A replica's own status is read from its Raft node and its applied state; the
cluster's adds what the committed state says of the cluster (the scheduler's
lease, the entry kinds every member understands, the membership, whether the
cluster file's configuration is the committed one, a recovery in progress)
and, unless asked for itself alone, each peer's own status, fetched at once
with a short timeout (a peer that does not answer is shown as unreachable).
The leader core's AskPeers is answered from the same fetch.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

import grpc

from client.credentials import Credentials
from controller import fsm
from controller.fsm import membership as fsm_membership
from controller.fsm import versions
from controller.leader import config_current
from xce import metrics
from xce.v1 import api_pb2 as api

if TYPE_CHECKING:
    from controller.replica import Replica

PEER_STATUS_TIMEOUT_S = 1.0


def local_status(replica: Replica) -> api.ReplicaStatus:
    raft = replica.raft.status()
    meta = replica.store.meta()
    me = replica.me
    leader = replica.grpc_for_raft(replica.raft.leader()) or ""  # one it can reach, as refusals name
    return api.ReplicaStatus(id=me.id, grpc_address=me.grpc, raft_address=me.raft,
                             role=raft.role, term=raft.term, commit_index=raft.commit_index,
                             applied_index=meta.applied_index, revision=meta.applied_index,
                             pid=os.getpid(), health="ok" if leader else "no leader",
                             leader_grpc_address=leader, log_length=raft.log_length,
                             entry_kinds=sorted(replica.kinds), entry_format=versions.ENTRY_FORMAT,
                             metrics_address=metrics.reachable(me.metrics, metrics.split(me.grpc)[0]))


async def cluster_status(replica: Replica, request: api.StatusRequest) -> api.StatusResponse:
    meta = replica.store.meta()
    current = replica.members(meta)
    members = fsm_membership.voter_ids(meta, replica.bootstrap)
    settled = set(meta.members) >= set(members) and config_current(meta, replica.core.settings.init, members)
    response = api.StatusResponse(cluster_id=replica.config.cluster_id,
                                  scheduler_lease_holder=meta.lease_holder,
                                  scheduler_lease_epoch=meta.lease_epoch,
                                  scheduler_lease_expires_ms=meta.lease_expires_ms,
                                  enabled_entry_kinds=sorted(versions.enabled(meta, members)),
                                  announced_members=sorted(meta.members),
                                  config_current=settled, members=current)
    if _differ(current, replica.bootstrap):
        response.bootstrap.extend(replica.bootstrap)
    if meta.recovery.why:
        with replica.store.read() as tables:
            waiting = fsm.read_counter(tables, fsm.recovery.RECOVERY_COUNTER) > 0
        response.recovery.CopyFrom(api.RecoveryStatus(
            waiting=waiting, hosts=sorted(meta.recovery.hosts), until_ms=meta.recovery.until_ms,
            wait_over=meta.recovery.wait_ms == 0, why=meta.recovery.why))
    response.replicas.append(replica.local_status())
    if not request.local_only or request.daemons:
        response.daemons.extend(replica.daemons())
    if request.local_only:
        return response
    peers = [m for m in current if m.id != replica.me.id]
    answers = await asyncio.gather(*(peer_status_full(replica.peer_credentials, m.grpc_address, daemons=True)
                                     for m in peers))
    for member, answer in zip(peers, answers, strict=True):
        if isinstance(answer, api.StatusResponse):
            response.replicas.append(answer.replicas[0])
            response.daemons.extend(answer.daemons)
        else:
            response.replicas.append(api.ReplicaStatus(
                id=member.id, grpc_address=member.grpc_address, raft_address=member.raft_address,
                role="unreachable", health=f"unreachable: {answer}"))
    response.replicas.sort(key=lambda r: r.id)
    ordered = sorted(response.daemons, key=lambda d: (d.kind, d.name, d.replica))
    del response.daemons[:]
    response.daemons.extend(ordered)
    return response


def _differ(members: Sequence[api.Member], bootstrap: Sequence[api.Member]) -> bool:
    def key(m: api.Member) -> tuple[int, str, str]:
        return m.id, m.grpc_address, m.raft_address

    voters = sorted(key(m) for m in members if m.role == api.MEMBER_VOTER)
    return voters != sorted(key(m) for m in bootstrap) or len(voters) != len(members)


async def peer_status(credentials: Credentials, address: str) -> api.ReplicaStatus | str:
    answer = await peer_status_full(credentials, address)
    return answer if isinstance(answer, str) else answer.replicas[0]


async def peer_status_full(credentials: Credentials, address: str,
                           daemons: bool = False) -> api.StatusResponse | str:
    """A replica's own Status (no fan-out; with the daemons it serves), or why it did not answer."""
    try:
        async with credentials.aio_channel(address) as channel:
            call = channel.unary_unary("/xce.v1.ClusterService/Status",
                                       request_serializer=api.StatusRequest.SerializeToString,
                                       response_deserializer=api.StatusResponse.FromString)
            response: api.StatusResponse = await call(api.StatusRequest(local_only=True, daemons=daemons),
                                                      timeout=PEER_STATUS_TIMEOUT_S,
                                                      metadata=credentials.metadata())
            if not response.replicas:
                return "no status"
            return response
    except grpc.aio.AioRpcError as exc:
        return str(exc.code().name).lower()
