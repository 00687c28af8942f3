"""Live reconfiguration (controller/reconfig.py): `badmin reconfig` after the cluster file was edited
puts new queues, queue settings (fair share, preemption, limits), [[limits]], host groups and shared
resources (licenses) into effect within seconds, with no replica restarted; a broken file is refused
with its line and key and nothing changes; a new leader keeps the new configuration."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import FAST_HOSTS, wait_until

from ops.local_cluster import LocalCluster
from xce import lsf_bin

pytestmark = pytest.mark.cluster

EDIT = """
[[queues]]
name = "night"
priority = 12
preemptable = true

[[queues]]
name = "urgent"
priority = 60
preemptive = ["night"]
job_pick_plugin = "fairshare"
fairshare = { half_life_s = 60, users = { alice = 3, bob = 1 }, groups = { physics = 2 } }
chunk_job_size = 4

[[limits]]
name = "night_users"
queues = ["night"]
per_user = true
slots = 2

[host_groups]
big_nodes = ["w1"]

[shared_resources]
license_x = 3

[user_groups]
physics = ["alice", "bob"]
"""


def badmin(cluster: LocalCluster, *words: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("XCE_")}
    env.update(XCE_DATA=str(cluster.data), PATH=f"{lsf_bin.ensure()}:{env['PATH']}")
    return subprocess.run(["badmin", *words], capture_output=True, text=True, env=env, timeout=120)


def test_reconfig_takes_an_edited_file_without_a_restart_and_refuses_a_broken_one(
        make_cluster, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cluster = make_cluster(extra_config=FAST_HOSTS)
    cluster.start()
    cluster.leader()
    pids = {i: p.pid for i, p in cluster.procs.items()}
    path = cluster.config_path
    original = path.read_text()
    with cluster.client() as client:
        before = client.status().replicas[0].revision
        nothing = badmin(cluster, "reconfig")  # the file as it was: nothing to commit
        assert nothing.returncode == 0, nothing.stderr
        assert "No errors found." in nothing.stdout
        assert nothing.stdout.rstrip().endswith("Reconfiguration initiated")

        path.write_text(original + EDIT)
        began = time.monotonic()
        done = badmin(cluster, "reconfig")
        assert done.returncode == 0, done.stdout + done.stderr
        queues = {q.name: q for q in client.list_queues().queues}
        took = time.monotonic() - began
        assert {"night", "urgent"} <= set(queues) and took < 2.0, took
        assert list(queues["urgent"].preemptive) == ["night"] and queues["night"].preemptable
        assert dict(queues["urgent"].fairshare.users) == {"alice": 3, "bob": 1}
        assert dict(queues["urgent"].fairshare.groups) == {"physics": 2}
        assert queues["urgent"].chunk_job_size == 4
        assert [(g.name, list(g.members)) for g in client.list_queues().user_groups] == [
            ("physics", ["alice", "bob"])]
        assert [limit.name for limit in client.list_queues().limits] == ["night_users"]
        hosts = client.list_hosts()
        assert [g.name for g in hosts.groups] == ["big_nodes"]
        assert [s.name for s in hosts.shared] == ["license_x"]
        assert {i: p.pid for i, p in cluster.procs.items()} == pids  # no replica restarted
        assert client.status().replicas[0].revision > before

        broken = original + EDIT + '\n[[queues]]\nname = "bad"\npriority = "high"\n'
        path.write_text(broken)
        revision = client.status().replicas[0].revision
        refused = badmin(cluster, "reconfig")
        assert refused.returncode == 255 and "There are fatal errors." in refused.stderr
        line = broken.splitlines().index('priority = "high"') + 1
        assert f"{path}:{line}: queue 'bad': priority must be an integer" in refused.stderr, refused.stderr
        # Refused by every replica before any change: nothing was proposed.
        assert client.status().replicas[0].revision == revision
        assert "bad" not in {q.name for q in client.list_queues().queues}

        # Only cluster admins may: a user is refused, whatever the file says.
        env = {k: v for k, v in os.environ.items() if not k.startswith("XCE_")}
        env.update(XCE_DATA=str(cluster.data), XCE_TOKEN=cluster.new_token("alice", "user"))
        theirs = subprocess.run([sys.executable, "-m", "cli", "reconfig"], capture_output=True, text=True,
                                env=env, timeout=60)
        assert theirs.returncode == 1 and "PERMISSION_DENIED" in theirs.stderr, theirs.stderr

        # A new leader keeps the new configuration (its replica re-read the file too).
        path.write_text(original + EDIT)
        old = cluster.leader()
        cluster.kill(old)
        wait_until(lambda: cluster.leader() != old, "a new leader")
        wait_until(lambda: {"night", "urgent"} <= {q.name for q in client.list_queues().queues},
                   "the queues kept")
        assert "night_users" in [limit.name for limit in client.list_queues().limits]
