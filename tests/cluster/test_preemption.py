"""Preemption on real processes: a job of a preemptive queue suspends the fewest low-priority
jobs it needs (their process groups stopped, state T in /proc), runs, and once it ends they resume and
finish; equal priority is never preempted; a requeue-mode victim runs again once, at the next attempt; a
leader killed between the PREEMPT commit and the suspension leaves no host over its slots (the journals)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from ops.local_cluster import LocalCluster, LocalWorkers
from tests.cluster.test_arrays import _array_id, _cli, _instances
from tests.conftest import FAST_HOSTS, wait_until
from worker.journal import Journal
from xce.v1 import api_pb2 as api

pytestmark = pytest.mark.cluster

QUEUES = """
[[queues]]
name = "urgent"
priority = 60
preemptive = ["batch", "scavenger", "young"]

[[queues]]
name = "batch"
priority = 10
preemptable = true

[[queues]]
name = "young"
priority = 8
preemptable = true
preempt_min_run_s = 3600

[[queues]]
name = "scavenger"
priority = 5
preemptable = true
preempt_action = "requeue"
"""


@pytest.fixture
def preemptive(make_scheduled) -> tuple[LocalCluster, LocalWorkers]:  # type: ignore[no-untyped-def]
    return make_scheduled(FAST_HOSTS + QUEUES)  # type: ignore[no-any-return]


def _states(pid: int) -> set[str]:
    """The states of the processes of the group that `pid` leads (R, S, T ...)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if int(fields[2]) == pid:  # its process group
            found.add(fields[0])
    return found


def test_a_preemptor_suspends_the_fewest_victims_and_they_resume_after_it(
        preemptive: tuple[LocalCluster, LocalWorkers], tmp_path: Path) -> None:
    cluster, workers = preemptive
    workers.start("w1", 4)
    go, urgent_go = tmp_path / "go", tmp_path / "urgent-go"
    # A child that lives as long as the job: stopping the shell alone would leave it sleeping (S).
    wait = f"sleep 600 & while [ ! -e {go} ]; do sleep 0.05; done"
    batch = [_array_id(_cli(cluster, tmp_path, "submit", "-q", "batch", "--", "sh", "-c", wait).stdout)
             for _ in range(4)]
    with cluster.client() as client:
        wait_until(lambda: all(client.get_job(str(j)).state == api.RUN and client.get_job(str(j)).pid
                               for j in batch), "4 batch jobs running")
        same = _array_id(_cli(cluster, tmp_path, "submit", "-q", "batch", "--", "true").stdout)
        urgent = _array_id(_cli(cluster, tmp_path, "submit", "-q", "urgent", "-n", "2", "--", "sh", "-c",
                                f"while [ ! -e {urgent_go} ]; do sleep 0.05; done").stdout)
        wait_until(lambda: client.get_job(str(urgent)).state == api.RUN, "the preemptor to run")
        suspended = [j for j in batch if client.get_job(str(j)).state == api.SSUSP]
        assert len(suspended) == 2, [api.JobState.Name(client.get_job(str(j)).state) for j in batch]
        for job_id in suspended:
            pid = client.get_job(str(job_id)).pid
            states = _states(pid)
            # Stopped, but for a child that ended as the stop came (its `sleep`): a zombie until the
            # shell, stopped, reaps it after the resume.
            assert "T" in states and states <= {"T", "Z"}, (job_id, states)
        assert client.get_job(str(same)).state == api.PEND  # equal priority: it waits, preempting nobody
        shown = _cli(cluster, tmp_path, "job", str(suspended[0])).stdout
        assert f"preempted by job {urgent}" in shown, shown
        urgent_go.touch()
        wait_until(lambda: all(client.get_job(str(j)).state == api.RUN for j in suspended), "the resume")
        for job_id in suspended:
            wait_until(lambda j=job_id: _states(client.get_job(str(j)).pid) <= {"S", "R"}, "running again")
        go.touch()
        for job_id in [*batch, same, urgent]:
            wait_until(lambda j=job_id: client.get_job(str(j)).state == api.DONE, f"job {job_id} done", 120)
    runs = _instances(workers, ["w1"])
    assert sorted(j for j, *_ in runs) == sorted([*batch, same, urgent])  # each once


def test_a_requeue_victim_runs_again_once_at_the_next_attempt(
        preemptive: tuple[LocalCluster, LocalWorkers], tmp_path: Path) -> None:
    cluster, workers = preemptive
    workers.start("w1", 2)
    marker = tmp_path / "ran"
    script = f"echo $XCE_JOB_ATTEMPT >> {marker}; while [ ! -e {tmp_path / 'go'} ]; do sleep 0.05; done"
    victim = _array_id(_cli(cluster, tmp_path, "submit", "-q", "scavenger", "-r", "-n", "2", "--",
                            "sh", "-c", script).stdout)
    with cluster.client() as client:
        wait_until(lambda: client.get_job(str(victim)).state == api.RUN and marker.exists(), "the victim")
        urgent = _array_id(_cli(cluster, tmp_path, "submit", "-q", "urgent", "-n", "2", "--", "true").stdout)
        wait_until(lambda: client.get_job(str(urgent)).state == api.DONE, "the preemptor")
        (tmp_path / "go").touch()
        wait_until(lambda: client.get_job(str(victim)).state == api.DONE, "the victim's second run", 120)
        job = client.get_job(str(victim))
        assert (job.attempt, job.preemptions) == (1, 1)
    runs = sorted((j, a) for j, a, *_ in _instances(workers, ["w1"]) if j == victim)
    assert runs == [(victim, 0), (victim, 1)]  # exactly once more


def test_a_leader_kill_between_the_preemption_and_the_suspension(
        preemptive: tuple[LocalCluster, LocalWorkers], tmp_path: Path) -> None:
    cluster, workers = preemptive
    workers.start("w1", 2)
    go = tmp_path / "go"
    victim = _array_id(_cli(cluster, tmp_path, "submit", "-q", "batch", "-n", "2", "--", "sh", "-c",
                            f"while [ ! -e {go} ]; do sleep 0.05; done").stdout)
    with cluster.client() as client:
        wait_until(lambda: client.get_job(str(victim)).pid != 0, "the victim running")
        worker_pid = workers.procs["w1"].pid
        os.kill(worker_pid, 19)  # SIGSTOP the worker: the victim cannot be stopped yet
        try:
            urgent = _array_id(_cli(cluster, tmp_path, "submit", "-q", "urgent", "-n", "2", "--",
                                    "true").stdout)
            wait_until(lambda: client.get_job(str(victim)).state == api.SSUSP, "the PREEMPT committed")
            assert client.get_job(str(urgent)).state == api.PEND  # the victim still holds the slots
            cluster.kill(cluster.leader())
        finally:
            os.kill(worker_pid, 18)  # SIGCONT
        wait_until(lambda: client.get_job(str(urgent)).state == api.DONE, "the preemptor after failover", 120)
        go.touch()
        wait_until(lambda: client.get_job(str(victim)).state == api.DONE, "the victim, resumed", 120)
    records = _journal(workers, "w1")
    assert sorted(records) == sorted([(victim, 0), (urgent, 0)])  # each ran once
    urgent_run = (records[(urgent, 0)]["start"], records[(urgent, 0)]["end"])
    # The victim ran only outside its stops, and never beside the preemptor: the host's 2 slots were
    # never both taken twice (the stop was journaled before the preemptor started).
    for low, high in _active(records[(victim, 0)]):
        assert high <= urgent_run[0] or low >= urgent_run[1], (low, high, urgent_run, records)


def _journal(workers: LocalWorkers, name: str) -> dict[tuple[int, int], dict[str, Any]]:
    """Each instance the worker's journal holds: its start, end and stops ([stopped, continued])."""
    workers.stop()
    journal = Journal(workers.spool(name) / "journal")
    found = {}
    try:
        for key, record in journal.items():
            final = api.JobReport.FromString(bytes.fromhex(record["final"])) if record.get("final") else None
            end = final.finished.time_ms if final is not None and final.HasField("finished") else 0
            found[key] = {"start": int(record.get("started_ms", 0)), "end": end,
                          "stops": record.get("stops", [])}
    finally:
        journal.close()
    return found


def _active(record: dict[str, Any]) -> list[tuple[int, int]]:
    """The intervals the instance ran in: from its start to its end, less its stops."""
    spans, at = [], record["start"]
    for stopped, continued in record["stops"]:
        spans.append((at, stopped))
        at = continued or record["end"]
    spans.append((at, record["end"]))
    return [(low, high) for low, high in spans if high > low]


def test_a_job_inside_its_minimum_run_time_is_not_preempted(preemptive: tuple[LocalCluster, LocalWorkers],
                                                           tmp_path: Path) -> None:
    cluster, workers = preemptive
    workers.start("w1", 2)
    go = tmp_path / "go"
    young = _array_id(_cli(cluster, tmp_path, "submit", "-q", "young", "-n", "2", "--", "sh", "-c",
                           f"while [ ! -e {go} ]; do sleep 0.05; done").stdout)
    with cluster.client() as client:
        wait_until(lambda: client.get_job(str(young)).pid != 0, "the young job running")
        urgent = _array_id(_cli(cluster, tmp_path, "submit", "-q", "urgent", "-n", "2", "--", "true").stdout)
        wait_until(lambda: client.get_job(str(urgent)).pending_code == api.PEND_NO_FREE_SLOTS,
                   "the scheduler's word on the preemptor")
        assert client.get_job(str(young)).state == api.RUN and not client.get_job(str(young)).preemptions
        go.touch()
        wait_until(lambda: client.get_job(str(urgent)).state == api.DONE, "the preemptor, after it")
