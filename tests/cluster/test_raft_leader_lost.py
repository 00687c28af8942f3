"""A killed leader's followers elect its successor when its connection drops, not a whole election
timeout later (controller/raft.py, `leader_lost_s`).

The election timeouts here are 6 s and more, so a build that waited for them would take at least
6 s to elect; one that acts on the dropped connection takes a fraction of a second. The deadline
(4 s) sits between the two, far from both."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from ops.local_cluster import LocalCluster

pytestmark = pytest.mark.cluster

# The survivors' fast elections are a stagger apart: 0.5 s, so that a survivor stalled on a busy
# machine still reads the other's vote request before its own turn comes (a split vote would wait
# out the 6 s timeouts).
RAFT = ("[raft]\nelection_min_s = 6.0\nelection_max_s = 6.5\nelection_stagger_s = 0.5\n"
        "leader_fallback_s = 8.0\nconnection_timeout_s = 10.0\n")
DEADLINE_S = 4.0


def test_a_killed_leader_is_replaced_before_any_election_timeout(
        make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster(extra_config=RAFT)
    cluster.start()
    old = cluster.leader(timeout_s=60)  # the first election waits out a timeout: nobody led before
    killed_at = time.monotonic()
    cluster.kill(old)
    new = cluster.leader(timeout_s=DEADLINE_S, exclude=old)
    took_s = time.monotonic() - killed_at
    assert new != old and took_s < DEADLINE_S, took_s
    logs = "".join((cluster.data / f"replica-{r}.log").read_text() for r in cluster.replica_ids() if r != old)
    assert f"the leader's connection ({cluster.config.replica(old).raft}) dropped" in logs
