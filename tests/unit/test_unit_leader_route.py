"""The one leader-following policy (client/leader_route.py) that the CLI's calls, Sync streams and
workers share: redirects at once but bounded, failures move on with a jittered capped backoff."""

from __future__ import annotations

import random

import pytest

from client.leader_route import LeaderRoute

REPLICAS = ["a:1", "b:2", "c:3"]


def test_a_named_leader_is_taken_at_once_and_a_dead_replica_passes_to_the_next() -> None:
    route = LeaderRoute(REPLICAS, random.Random(1), max_backoff_s=0.1)
    assert route.target == "a:1"
    assert route.redirected("a:1", "c:3") is True and route.target == "c:3"
    route.failed("c:3")
    assert route.target == "a:1"  # round the list
    route.failed("z:9")  # an address not in the list (a stale hint): back to the first
    assert route.target == "a:1"


def test_redirects_without_a_pause_are_bounded_when_replicas_name_each_other() -> None:
    route = LeaderRoute(REPLICAS, random.Random(1), max_backoff_s=0.1)
    at_once = [route.redirected(tried, leader)
               for tried, leader in [("a:1", "b:2"), ("b:2", "a:1"), ("a:1", "b:2"), ("b:2", "a:1")]]
    assert at_once == [True, True, True, False]  # the fourth in a row waits once
    assert route.redirected("a:1", "b:2") is True  # and then redirects go at once again
    assert route.redirected("b:2", "b:2") is False  # a hint naming the replica that refused: wait


def test_the_pause_doubles_to_its_cap_with_jitter_and_a_reset_starts_it_afresh() -> None:
    route = LeaderRoute(REPLICAS, random.Random(7), max_backoff_s=0.1, initial_backoff_s=0.02)
    centres = []
    for _ in range(5):
        centre = route.next_pause_s()
        pause = route.pause_s()
        assert 0.5 * centre <= pause < 1.5 * centre
        centres.append(centre)
    assert centres == [0.02, 0.04, 0.08, 0.1, 0.1]
    route.reset()
    assert route.next_pause_s() == 0.02


def test_the_same_seed_gives_the_same_pauses() -> None:
    first = LeaderRoute(REPLICAS, random.Random(3), max_backoff_s=1.0)
    second = LeaderRoute(REPLICAS, random.Random(3), max_backoff_s=1.0)
    assert [first.pause_s() for _ in range(6)] == [second.pause_s() for _ in range(6)]


def test_the_leader_named_in_a_refusal_is_read_from_grpc_and_grpc_aio_errors() -> None:
    """grpc.aio's errors are no grpc.Call: the hint was read from the synchronous ones only, and the
    fleet's simulated hosts (asyncio) went round the replicas in their backoff after every kill."""
    import grpc

    from client.grpc_transport import LEADER_METADATA, leader_hint

    named = grpc.aio.Metadata((LEADER_METADATA, "127.0.0.1:7001"))
    refused = grpc.aio.AioRpcError(grpc.StatusCode.FAILED_PRECONDITION, grpc.aio.Metadata(), named,
                                   "not the leader")
    assert leader_hint(refused) == "127.0.0.1:7001"
    unnamed = grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata())
    assert leader_hint(unnamed) is None
    assert leader_hint(grpc.RpcError()) is None  # no call behind it: nothing to read


def test_the_clients_own_draws_are_53_bits_in_zero_to_one(monkeypatch: pytest.MonkeyPatch) -> None:
    from client import channel

    draws = channel.UrandomDraws()
    for raw, expected in ((b"\0" * 7, 0.0), (b"\xff" * 7, 1 - 2 ** -53), (b"\x80" + b"\0" * 6, 0.5)):
        monkeypatch.setattr(channel.os, "urandom", lambda n, raw=raw: raw[:n])
        assert draws.random() == expected
