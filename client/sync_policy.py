"""What a Sync follower does when its stream fails, or goes quiet: pure rules, no sockets, no clock.

Theory of operation. client/sync_follow.py drives one stream at a time and asks these rules what
comes next. A refusal that names the leader is followed there (the route bounds how often without
a pause, client/leader_route.py). OUT_OF_RANGE means the revision asked for was compacted: a
follower that can start again from a snapshot (the scheduler's view) is told, and reconnects at
once; one that cannot (the gateway, the recorder: their readers must learn of the gap) raises.
An outcome that may pass (RETRYABLE: no leader yet, a dead replica, a stream cancelled) moves on
to the next replica after the route's pause. Any other refusal (a key refused, a request malformed)
is raised, unless the follower is a daemon that retries everything until stopped.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from client.channel import RETRYABLE
from xce.v1 import log_pb2 as log


class Step(enum.Enum):
    REDIRECT = "redirect"  # to the leader the refusal named: at once, if the route allows
    RESYNC = "resync"      # the follower's on_compacted, then a new stream at once
    RETRY = "retry"        # the next replica, after the route's pause
    RAISE = "raise"        # XceError, to the follower's caller


@dataclass(frozen=True)
class FailurePolicy:
    resync_on_compacted: bool  # OUT_OF_RANGE: the follower starts again from a snapshot (else raised)
    retry_refusals: bool       # a refusal that will not pass by itself is retried anyway (else raised)


RAISING = FailurePolicy(resync_on_compacted=False, retry_refusals=False)  # the gateway's, the recorder's
NEVER_GIVING_UP = FailurePolicy(resync_on_compacted=True, retry_refusals=True)  # the scheduler's


def after_failure(code: str, leader: str | None, policy: FailurePolicy) -> Step:
    """The step after a stream failed with gRPC status `code` (by name), naming `leader` or not."""
    if leader:
        return Step.REDIRECT
    if code == "OUT_OF_RANGE":  # retrying the same revision cannot help
        return Step.RESYNC if policy.resync_on_compacted else Step.RAISE
    if code in RETRYABLE or policy.retry_refusals:
        return Step.RETRY
    return Step.RAISE


def already_taken(message: log.SyncMessage, taken_through: int) -> bool:
    """An event at or below the last one the caller took: a resumed stream never repeats one."""
    return message.HasField("event") and message.event.revision <= taken_through


def silent_too_long(now_s: float, last_heard_s: float, silence_s: float | None) -> bool:
    """A stream open but quiet for longer than `silence_s` (progress marks come every second):
    a leader alive on the network but stuck. None: no bound."""
    return silence_s is not None and now_s - last_heard_s > silence_s


def given_up(now_s: float, served_last_s: float, give_up_s: float | None) -> bool:
    """No replica has served the stream for longer than `give_up_s`. None: never give up."""
    return give_up_s is not None and now_s - served_last_s > give_up_s
