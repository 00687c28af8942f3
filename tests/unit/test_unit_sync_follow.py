"""The one Sync follow loop (client/sync_follow.py) and its rules (client/sync_policy.py), without sockets:
which step each failure takes under the scheduler's and the gateway's policies, and the loop driven
over in-memory streams (a redirect, a resync, a refusal raised, events already taken skipped, a
silent stream cancelled, giving up)."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator, Sequence

import pytest

from client.channel import XceError
from client.http2 import RpcFailure
from client.leader_route import LeaderRoute
from client.sync_follow import SyncFollow
from client.sync_policy import (
    NEVER_GIVING_UP,
    RAISING,
    Step,
    after_failure,
    already_taken,
    given_up,
    silent_too_long,
)
from xce.v1 import log_pb2 as log

REPLICAS = ["a:1", "b:2", "c:3"]
LEADER = "x-xce-leader"


@pytest.mark.parametrize(("code", "leader", "gateway", "scheduler"), [
    ("FAILED_PRECONDITION", "b:2", Step.REDIRECT, Step.REDIRECT),
    ("UNAVAILABLE", None, Step.RETRY, Step.RETRY),
    ("CANCELLED", None, Step.RETRY, Step.RETRY),  # a silent stream the watchdog cancelled
    ("DEADLINE_EXCEEDED", None, Step.RETRY, Step.RETRY),
    ("OUT_OF_RANGE", None, Step.RAISE, Step.RESYNC),
    ("PERMISSION_DENIED", None, Step.RAISE, Step.RETRY),
    ("FAILED_PRECONDITION", None, Step.RAISE, Step.RETRY),
])
def test_each_failure_takes_its_policys_step(code: str, leader: str | None, gateway: Step,
                                             scheduler: Step) -> None:
    assert after_failure(code, leader, RAISING) is gateway
    assert after_failure(code, leader, NEVER_GIVING_UP) is scheduler


def test_events_at_or_below_the_last_taken_are_skipped_and_nothing_else() -> None:
    event = log.SyncMessage(event=log.Event(revision=7))
    assert already_taken(event, 7) and already_taken(event, 8)
    assert not already_taken(event, 6)
    assert not already_taken(log.SyncMessage(progress=3), 9)


def test_silence_and_giving_up_are_bounds_only_when_set() -> None:
    assert silent_too_long(10.1, 8.0, 2.0) and not silent_too_long(9.9, 8.0, 2.0)
    assert not silent_too_long(1e9, 0.0, None)
    assert given_up(61.0, 0.0, 60.0) and not given_up(59.0, 0.0, 60.0)
    assert not given_up(1e9, 0.0, None)


class FakeStream:
    """A stream's messages, then its failure (or its end); `cancel` makes a blocked read fail."""

    def __init__(self, messages: Sequence[log.SyncMessage], failure: RpcFailure | None,
                 block: bool = False) -> None:
        self.messages, self.failure, self.block = messages, failure, block
        self.cancelled = threading.Event()

    def __iter__(self) -> Iterator[bytes]:
        for message in self.messages:
            yield message.SerializeToString()
        if self.block:
            assert self.cancelled.wait(5), "the watchdog did not cancel a silent stream"
            raise RpcFailure("CANCELLED", "cancelled")
        if self.failure is not None:
            raise self.failure

    def cancel(self) -> None:
        self.cancelled.set()


class FakeOpener:
    def __init__(self, streams: list[FakeStream]) -> None:
        self.streams = streams
        self.opened: list[tuple[str, log.SyncRequest]] = []

    def open_stream(self, address: str, path: str, request: bytes, metadata: Sequence[tuple[str, str]],
                    timeout_s: float) -> FakeStream:
        self.opened.append((address, log.SyncRequest.FromString(request)))
        return self.streams.pop(0)


def event(revision: int) -> log.SyncMessage:
    return log.SyncMessage(event=log.Event(revision=revision))


def follow(opener: FakeOpener, stop: threading.Event, **options: object) -> SyncFollow:
    route = LeaderRoute(REPLICAS, random.Random(1), max_backoff_s=0.001, initial_backoff_s=0.001)
    return SyncFollow(opener, route, lambda: (), lambda: log.SyncRequest(from_revision=0), stop,
                      **options)  # type: ignore[arg-type]


def take(follower: SyncFollow, stop: threading.Event, count: int) -> list[log.SyncMessage]:
    taken = []
    for message in follower.messages():
        taken.append(message)
        if len(taken) == count:
            stop.set()
    return taken


def test_a_refusal_naming_the_leader_goes_there_and_a_dead_replica_passes_to_the_next() -> None:
    stop = threading.Event()
    opener = FakeOpener([
        FakeStream([], RpcFailure("FAILED_PRECONDITION", "not the leader", [(LEADER, "c:3")])),
        FakeStream([event(1)], RpcFailure("UNAVAILABLE", "killed")),
        FakeStream([event(2)], None),
    ])
    assert [m.event.revision for m in take(follow(opener, stop), stop, 2)] == [1, 2]
    assert [address for address, _ in opener.opened] == ["a:1", "c:3", "a:1"]  # c:3 died: round the list


def test_out_of_range_resyncs_the_scheduler_and_raises_for_the_gateway() -> None:
    stop, compacted = threading.Event(), []
    opener = FakeOpener([FakeStream([], RpcFailure("OUT_OF_RANGE", "resync required")),
                         FakeStream([event(5)], None)])
    follower = follow(opener, stop, policy=NEVER_GIVING_UP, on_compacted=lambda: compacted.append(1))
    assert [m.event.revision for m in take(follower, stop, 1)] == [5]
    assert compacted == [1] and [a for a, _ in opener.opened] == ["a:1", "a:1"]  # same replica, at once

    opener = FakeOpener([FakeStream([], RpcFailure("OUT_OF_RANGE", "resync required"))])
    with pytest.raises(XceError) as caught:
        take(follow(opener, threading.Event()), threading.Event(), 1)
    assert caught.value.code_name == "OUT_OF_RANGE"


def test_a_resumed_stream_repeats_no_event_the_caller_took() -> None:
    stop, last = threading.Event(), [0]
    opener = FakeOpener([FakeStream([event(1), event(2)], RpcFailure("UNAVAILABLE", "killed")),
                         FakeStream([event(1), event(2), event(3)], None)])
    follower = follow(opener, stop, taken_through=lambda: last[0])
    taken = []
    for message in follower.messages():
        last[0] = message.event.revision
        taken.append(last[0])
        if last[0] == 3:
            stop.set()
    assert taken == [1, 2, 3]


def test_a_silent_stream_is_cancelled_and_opened_again() -> None:
    stop = threading.Event()
    silent = FakeStream([event(1)], None, block=True)
    opener = FakeOpener([silent, FakeStream([event(2)], None)])
    follower = follow(opener, stop, silence_s=0.05)
    assert [m.event.revision for m in take(follower, stop, 2)] == [1, 2]
    assert silent.cancelled.is_set()
    assert [a for a, _ in opener.opened] == ["a:1", "b:2"]  # the silent one counts as failed


def test_a_follower_no_replica_serves_gives_up_after_its_bound() -> None:
    now = [0.0]

    def clock() -> float:
        now[0] += 1.0
        return now[0]

    opener = FakeOpener([FakeStream([], RpcFailure("UNAVAILABLE", "down")) for _ in range(20)])
    with pytest.raises(XceError) as caught:
        take(follow(opener, threading.Event(), clock=clock, give_up_s=5.0), threading.Event(), 1)
    assert caught.value.code_name == "UNAVAILABLE" and len(opener.opened) < 5
