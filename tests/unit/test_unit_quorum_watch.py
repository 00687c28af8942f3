"""What a command says while the cluster cannot answer (client/quorum_watch.py)."""

from __future__ import annotations

from client.quorum_watch import Seen, describe, gave_up
from xce.v1 import api_pb2 as api


def seen(*roles: str) -> list[Seen]:
    return [Seen(f"10.0.0.{i}:7101", api.ReplicaStatus(id=i, role=role, term=4) if role else None)
            for i, role in enumerate(roles, start=1)]


def test_a_leader_with_a_majority_is_only_slow_and_says_nothing() -> None:
    assert describe(seen("leader", "follower", "")) == ""
    assert describe(seen("leader", "follower", "follower")) == ""


def test_a_minority_says_it_has_no_quorum_and_who_answers() -> None:
    line = describe(seen("leader", "", ""))
    assert line == ("the cluster has no quorum: 1 of 3 replicas answer: replica 1 at 10.0.0.1:7101 (leader, "
                    "term 4); not answering: 10.0.0.2:7101, 10.0.0.3:7101; a write needs 2")
    assert describe(seen("follower", "", "", "", "follower")).startswith("the cluster has no quorum: 2 of 5")


def test_a_majority_without_a_leader_and_no_replica_at_all() -> None:
    assert describe(seen("follower", "candidate", "")).startswith("no leader yet (an election?)")
    assert describe(seen("", "", "")) == \
        "no replica answers (of 3: 10.0.0.1:7101, 10.0.0.2:7101, 10.0.0.3:7101)"


def test_giving_up_says_it_may_still_be_taken_and_how_to_ask_again() -> None:
    words = gave_up("the submit", "abc", "xce submit --request-id abc -- true")
    assert words.startswith("the submit may still take effect once a majority of the replicas is back")
    assert "`xce submit --request-id abc -- true`" in words
    assert "request id" not in gave_up("`xce kill`", "", "")
