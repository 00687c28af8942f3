"""What the leader core asks its driver to do: effects, values the driver performs in order.

The core never performs I/O; each input leaves effects behind (`LeaderCore.take`).
`Effect` is their closed union: a driver matches on it with `assert_never` in
the default case, so a new kind of effect that a driver ignores fails its type
check instead of being dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

from google.protobuf.message import Message

from xce.errors import ServiceError
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log


@dataclass(frozen=True)
class Propose:
    """Replicate the entry (stamped already with the leader's time, replica id and entry format);
    its outcome comes back as `proposal_done(token, results)`."""

    token: int
    entry: log.Entry


@dataclass(frozen=True)
class Send:
    """Messages to a worker, in order (framing is the driver's)."""

    stream: int
    messages: tuple[api.ControllerMessage, ...]


@dataclass(frozen=True)
class EndStream:
    """Close a worker stream (error None: cleanly)."""

    stream: int
    error: ServiceError | None


@dataclass(frozen=True)
class Reply:
    """Answer a client's call."""

    token: int
    response: Message | ServiceError


@dataclass(frozen=True)
class AskPeers:
    """Fetch every peer's Status and report each with `peer_answered`."""


@dataclass(frozen=True)
class ChangeRaft:
    """Add or remove a member of the Raft configuration; the outcome comes back as `raft_changed`."""

    token: int
    add: bool
    address: str


@dataclass(frozen=True)
class TransferLeadership:
    """Hand the leadership to another voter; the outcome comes back as `raft_changed`."""

    token: int


Effect = Propose | Send | EndStream | Reply | AskPeers | ChangeRaft | TransferLeadership
