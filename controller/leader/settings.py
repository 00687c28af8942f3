"""What the leader core is given: its settings, and the two ports it reads the world through.

`Consensus` says whether this replica leads (and in which Raft term), whether
it caught up, and what the Raft configuration is; `StateReader` opens a read
of the committed state. The drivers provide both: over pysyncobj and the LMDB
store in production, over the simulated cluster in tests.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Protocol

from controller import authz
from controller.tables import Tables
from controller.worker_session import RESEND_S
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

CAPABILITY_POLL_S = 5.0


class Consensus(Protocol):
    def leader_term(self) -> int | None:
        """The Raft term this replica believes it leads in; None when it does not lead."""
        ...

    def caught_up(self) -> bool:
        """It leads and the first entry of its term applied (all earlier commits are applied)."""
        ...

    def leader_address(self) -> str | None:
        """The gRPC address of the leader this replica knows of, if any."""
        ...

    def voters(self) -> frozenset[str]:
        """The Raft configuration as this replica's log has it: the members' Raft addresses."""
        ...

    def raft_busy(self) -> bool:
        """A change of the Raft configuration is appended and not applied yet."""
        ...

    def reachable(self) -> frozenset[str]:
        """The members' Raft addresses this replica is connected to, itself included."""
        ...


class StateReader(Protocol):
    def read(self) -> AbstractContextManager[Tables]: ...


@dataclass(frozen=True)
class LeaderSettings:
    replica_id: int
    members: tuple[int, ...]  # the cluster file's replicas: the membership until it is first changed
    init: log.InitCluster  # the configuration push
    kinds: frozenset[str]  # the entry kinds this replica's code applies
    heartbeat_s: float = 2.0
    heartbeat_timeout_s: float = 10.0
    fence_s: float = 0.0  # told to workers as they join (worker-side fence; 0: none)
    unknown_timeout_s: float = 300.0
    submit_max_requests: int = 512
    submit_max_bytes: int = 1 << 20
    submit_max_in_flight: int = 1
    session_full_look_s: float = RESEND_S
    capability_poll_s: float = CAPABILITY_POLL_S
    policy: authz.Policy = field(default_factory=authz.Policy)
    bootstrap: tuple[api.Member, ...] = ()  # the cluster file's replicas with their addresses
    member_pause_s: float = 0.0  # wait before each membership step (XCE_FAULT member-pause: tests)
    credential_key: bytes = b""  # of job credentials (job_credential.py), from the cluster's password
    load_commit_s: float = 15.0  # a host's load indices are committed at most this often (0: never)

    def bootstrap_members(self) -> tuple[api.Member, ...]:
        return self.bootstrap or tuple(api.Member(id=m) for m in self.members)
