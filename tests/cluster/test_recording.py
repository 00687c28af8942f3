"""Record a live run and re-run its passes (F5): real replicas, scheduler and workers.

A few hundred jobs go through holds, releases, kills, a modification, a preemption and a leader
kill; `xce record` writes the committed history; `xce sim --verify` re-runs every recorded pass on
the view it read and gets byte-identical decisions; with one policy setting changed, the verify
names the first pass that came out differently."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ops.local_cluster import LocalCluster, LocalWorkers
from simulator import recording_file
from tests.cluster.test_arrays import _array_id, _cli
from tests.cluster.test_preemption import QUEUES
from tests.conftest import FAST_HOSTS, wait_until
from xce.v1 import api_pb2 as api

pytestmark = pytest.mark.cluster

FINISHED = (api.DONE, api.EXIT)


def test_a_recorded_live_run_re_runs_byte_identical_and_a_changed_policy_diverges(
        make_scheduled, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cluster, workers = make_scheduled(FAST_HOSTS + QUEUES)
    assert isinstance(cluster, LocalCluster) and isinstance(workers, LocalWorkers)
    workers.start("w1", 4)
    workers.start("w2", 4)
    go = tmp_path / "go"
    hold_on = f"while [ ! -e {go} ]; do sleep 0.05; done"
    followed = tmp_path / "followed.jsonl"
    env = {**os.environ, "XCE_DATA": str(cluster.data)}
    env.pop("XCE_CONTROLLERS", None)
    follower = subprocess.Popen(
        [sys.executable, "-m", "cli", "record", "--follow", "--out", str(followed)], env=env,
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _run_the_workload(cluster, workers, tmp_path, hold_on, go)
    finally:
        follower.send_signal(signal.SIGINT)
        said, complaint = follower.communicate(timeout=60)
    assert follower.returncode == 0, complaint
    assert "recorded" in said and followed.exists(), said
    # Followed through the leader kill: resumed from another replica, with nothing lost.
    answer = json.loads(_cli(cluster, tmp_path, "sim", "--verify", str(followed), "--json").stdout)
    assert answer["checked"] == answer["identical"] > 10, answer

    out = tmp_path / "run.jsonl"
    _cli(cluster, tmp_path, "record", "--out", str(out))
    assert os.stat(out).st_mode & 0o777 == 0o600  # it holds every job in full
    recorded = recording_file.read(out)
    batches = [e.batch for e in recorded.events if e.HasField("batch")]
    kinds = {d.WhichOneof("body") for b in batches for d in b.decisions}
    assert {"dispatch", "preempt", "pend"} <= kinds, kinds
    assert {e.kind for e in recorded.events} >= {"submit", "control", "modify", "decisions"}
    tail = recording_file.read(followed)
    assert tail.events[-1].revision <= recorded.events[-1].revision
    assert [e.revision for e in recorded.events if e.revision > tail.from_revision][:len(tail.events)] == \
        [e.revision for e in tail.events]  # every event after its start, none missing

    verified = _cli(cluster, tmp_path, "sim", "--verify", str(out), "--json")
    answer = json.loads(verified.stdout)
    assert answer["checked"] == answer["passes"] == answer["identical"] == len(batches) > 10, answer
    assert answer["first_divergence"] is None
    # A what-if that changes nothing (the batch queue's own priority) changes no decision ...
    same = _cli(cluster, tmp_path, "sim", "--verify", str(out), "--set", "queue.batch.priority=10")
    assert "byte-identical" in same.stdout, same.stdout
    # ... and one that does is found at its first pass, with both decisions.
    lifo = ("sim", "--verify", str(out), "--set", "queue.batch.picker=lifo")
    changed = _cli(cluster, tmp_path, *lifo, ok=False)
    assert changed.returncode == 1, changed.stderr
    first = json.loads(_cli(cluster, tmp_path, *lifo, "--json", ok=False).stdout)["first_divergence"]
    assert first["recorded"] != first["replayed"] and first["base_revision"] < first["revision"], first
    assert f"pass {first['number']} (committed at revision {first['revision']}" in changed.stdout
    assert f"recorded: {first['recorded']}" in changed.stdout, changed.stdout

    # The recording's jobs as a workload, with a what-if: both runs report every job that ran, and the
    # one killed while it waited; the hold, its release and that kill are done again.
    sim = json.loads(_cli(cluster, tmp_path, "sim", "--workload", str(out), "--set",
                          "queue.batch.backfill=none", "--add-hosts", "2x4", "--json").stdout)
    records = [api.Job.FromString(c.value) for e in recorded.events for c in e.changes
               if c.table == "jobs" and not c.deleted]
    ran = {job.id for job in records if job.start_time_ms}
    killed_waiting = {job.id for job in records if job.state == api.EXIT} - ran
    assert len(killed_waiting) == 1, killed_waiting
    jobs = len(ran | killed_waiting)
    assert sim["as_given"]["overall"]["jobs"] == sim["what_if"]["overall"]["jobs"] == jobs > 250, sim
    assert sim["as_given"]["simulation"]["actions"] >= 3, sim["as_given"]["simulation"]
    assert sim["what_if"]["slots"] == sim["as_given"]["slots"] + 8 == 16

    # What-ifs as a sweep run by this cluster: a job array, one element a configuration, each writing its
    # report where the submitter reads them; the table is the one a sweep run here gives.
    sweep = tmp_path / "sweep.txt"
    sweep.write_text("strict --set queue.batch.backfill=none\nbigger --add-hosts 2x4\n")
    here = json.loads(_cli(cluster, tmp_path, "sim", "--workload", str(out), "--sweep", str(sweep),
                           "--json").stdout)
    there = _cli(cluster, tmp_path, "sim", "--workload", str(out), "--sweep", str(sweep), "--on-cluster",
                 "--out", str(tmp_path / "swept"), "--json")
    assert json.loads(there.stdout) == here, there.stderr
    assert [c["name"] for c in here["configurations"]] == ["as given", "strict", "bigger"]
    assert here["configurations"][2]["report"]["slots"] == 16
    assert sorted(p.name for p in (tmp_path / "swept").glob("*.json")) == ["0.json", "1.json", "2.json"]
    assert "Job array <" in there.stderr



def _run_the_workload(cluster: LocalCluster, workers: LocalWorkers, tmp_path: Path, hold_on: str,
                      go: Path) -> None:
    with cluster.client() as client:
        # Long batch jobs fill all 8 slots; an urgent job preempts two of them.
        long = [_array_id(_cli(cluster, tmp_path, "submit", "-q", "batch", "-n", "2", "--", "sh", "-c",
                               hold_on).stdout) for _ in range(4)]
        wait_until(lambda: all(client.get_job(str(j)).state == api.RUN for j in long), "the long jobs")
        sweep = _array_id(_cli(cluster, tmp_path, "submit", "-q", "batch", "-J", "sweep[1-250]", "--",
                               "true").stdout)
        held = _array_id(_cli(cluster, tmp_path, "submit", "-q", "batch", "--", "true").stdout)
        client.control(str(held), api.HOLD)  # pending: every slot is taken
        doomed = _array_id(_cli(cluster, tmp_path, "submit", "-q", "batch", "--", "true").stdout)
        client.control(str(doomed), api.KILL)
        client.modify(f"{sweep}[250]", priority=90)
        urgent = _array_id(_cli(cluster, tmp_path, "submit", "-q", "urgent", "-n", "2", "--", "true").stdout)
        wait_until(lambda: client.get_job(str(urgent)).state == api.DONE, "the preemptor", 120)
        cluster.kill(cluster.leader())
        go.touch()
        client.control(str(held), api.RELEASE)
        wait_until(lambda: all(j.state in FINISHED for j in client.list_jobs(page_size=5000)),
                   "every job finished", 300)
        assert len(client.list_jobs(page_size=5000)) >= 250
