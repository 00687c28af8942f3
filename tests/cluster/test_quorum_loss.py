"""Quorum loss, said at once: a submit with both followers stopped says within a second that the
cluster has no quorum and which replicas answer; at its deadline it says the submit may still be
taken and prints its request id; asked again under that id once the followers are back, exactly one
job exists."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ops.local_cluster import LocalCluster

pytestmark = pytest.mark.cluster


def _xce(cluster: LocalCluster, *args: str, wait_s: float = 30.0) -> subprocess.Popen[str]:
    env = {**os.environ, "XCE_DATA": str(cluster.data), "XCE_WAIT_S": str(wait_s)}
    env.pop("XCE_CONTROLLERS", None)
    return subprocess.Popen([sys.executable, "-m", "cli", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_a_submit_without_a_quorum_says_so_at_once_and_its_retry_makes_one_job(
        make_cluster: type[LocalCluster], tmp_path: Path) -> None:
    cluster = make_cluster()
    cluster.start()
    leader = cluster.leader()
    followers = [r for r in cluster.replica_ids() if r != leader]
    for replica in followers:
        cluster.kill(replica)
    started = time.monotonic()
    submit = _xce(cluster, "submit", "-J", "through-the-outage", "--", "true", wait_s=6)
    assert submit.stderr is not None
    first = submit.stderr.readline()
    said_after = time.monotonic() - started
    _, rest = submit.communicate(timeout=60)
    words = first + rest
    assert "the cluster has no quorum: 1 of 3 replicas answer" in first, words
    assert f"replica {leader} at {cluster.address(leader)} (leader" in first and "a write needs 2" in first
    assert all(cluster.address(r) in first for r in followers)
    assert said_after < 1.0, (said_after, words)
    assert submit.returncode == 75, words
    assert "the submit may still take effect once a majority of the replicas is back" in words
    retry = re.search(r"`(xce submit --request-id \S+ .*?)`", words)
    assert retry is not None, words
    for replica in followers:
        cluster.restart(replica)
    cluster.leader()
    again = _xce(cluster, *shlex.split(retry.group(1))[1:])
    out, err = again.communicate(timeout=60)
    assert again.returncode == 0, err
    listed = _xce(cluster, "jobs", "--json")
    shown, _ = listed.communicate(timeout=60)
    named = [j for j in json.loads(shown)["jobs"] if j["spec"]["name"] == "through-the-outage"]
    assert len(named) == 1, named
    assert f"<{named[0]['id']}>" in out
    print(f"no quorum said after {said_after:.2f} s; asked again under its id: one job, {named[0]['id']}")
