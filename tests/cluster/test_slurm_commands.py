"""Slurm's commands (cli/slurm/) on PATH against a live cluster: sbatch with a #SBATCH script and
--parsable, squeue's default table, sacct --parsable2 as submitit reads it, scancel, Slurm's variables
in the job; and dask-jobqueue's SLURMCluster, unmodified: it writes a #SBATCH job script per worker,
submits it with `sbatch script` and reads "Submitted batch job N", cancels with `scancel N`. Four
workers, each a job, compute a dask array's sum; scaled to 0, every job ends."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import lsf_site
import pytest
from conftest import FAST_HOSTS, wait_until

from ops.local_cluster import LocalCluster
from xce import slurm_bin
from xce.v1 import api_pb2 as api

pytestmark = pytest.mark.cluster

dask_array = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")
dask_jobqueue = pytest.importorskip("dask_jobqueue")


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    """One cluster for the module's tests (each starts its own jobs, and looks at those alone)."""
    with lsf_site.site(FAST_HOSTS) as made:
        yield made.cluster


@pytest.fixture
def site(cluster: LocalCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LocalCluster:
    monkeypatch.setenv("PATH", f"{slurm_bin.ensure()}:{os.environ['PATH']}")
    monkeypatch.setenv("XCE_DATA", str(cluster.data))
    monkeypatch.delenv("XCE_CONTROLLERS", raising=False)
    monkeypatch.chdir(tmp_path)
    return cluster


def slurm(*words: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(words), input=stdin, capture_output=True, text=True, timeout=120)


def test_sbatch_squeue_sacct_scancel_and_the_job_s_variables(site: LocalCluster, tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#SBATCH -J envjob\n#SBATCH -n 2\n#SBATCH -o env-%j.out\n"
                      "env | grep ^SLURM_ | sort\n")
    submitted = slurm("sbatch", "--parsable", str(script))
    assert submitted.returncode == 0, submitted.stderr
    job = int(submitted.stdout.strip())
    long_one = slurm("sbatch", "--wrap", "sleep 300", "-J", "sleeper")
    assert long_one.stdout.startswith("Submitted batch job "), long_one.stderr
    sleeper = int(long_one.stdout.split()[-1])
    with site.client() as client:
        wait_until(lambda: client.get_job(job).state == api.DONE, "the env job done")
        wait_until(lambda: client.get_job(sleeper).state == api.RUN, "the sleeper running")
    queue = slurm("squeue").stdout.splitlines()
    assert queue[0] == "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)"
    assert any(row.split()[0] == str(sleeper) and row.split()[4] == "R" for row in queue[1:]), queue
    assert str(job) not in {row.split()[0] for row in queue[1:]}  # done: not in squeue
    seen = {}
    for line in (tmp_path / f"env-{job}.out").read_text().splitlines():
        name, _, value = line.partition("=")
        seen[name] = value
    assert seen["SLURM_JOB_ID"] == str(job) and seen["SLURM_JOB_NAME"] == "envjob"
    assert seen["SLURM_NTASKS"] == "2" and seen["SLURM_SUBMIT_DIR"] == str(tmp_path)
    assert seen["SLURM_JOB_NODELIST"] in ("w1", "w2") and seen["SLURM_CPUS_ON_NODE"] == "2"
    cancelled = slurm("scancel", str(sleeper))
    assert (cancelled.returncode, cancelled.stdout, cancelled.stderr) == (0, "", "")
    with site.client() as client:
        wait_until(lambda: client.get_job(sleeper).state == api.EXIT, "the sleeper cancelled")
    accounting = slurm("sacct", "-j", f"{job},{sleeper}", "-o", "JobID,JobName,State,ExitCode", "-P", "-n")
    assert accounting.stdout.splitlines() == [f"{job}|envjob|COMPLETED|0:0",
                                              f"{sleeper}|sleeper|CANCELLED|0:15"]
    missing = slurm("scancel", "999999")
    assert missing.returncode == 1
    assert missing.stderr == "scancel: error: Kill job error on job id 999999: Invalid job id specified\n"


def test_slurm_cluster_scales_to_four_workers_computes_and_scales_to_zero(site: LocalCluster,
                                                                          tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    with dask_jobqueue.SLURMCluster(cores=1, processes=1, memory="1GB", walltime="00:10:00", interface="lo",
                                    log_directory=str(logs), death_timeout=60) as cluster:
        script = cluster.job_script()
        assert "#SBATCH -n 1" in script and "#SBATCH --mem=" in script
        cluster.scale(4)
        with distributed.Client(cluster) as client:
            client.wait_for_workers(4, timeout=180)
            with site.client() as xce:
                jobs = [j for j in xce.list_jobs(["state:eq:RUN"]) if j.spec.name == "dask-worker"]
                assert len(jobs) == 4 and all(j.spec.run_limit_s == 600 for j in jobs)
            assert dask_array.ones((2000, 2000), chunks=(250, 250)).sum().compute() == 4_000_000
        cluster.scale(0)
        with site.client() as xce:
            ended = wait_until(lambda: (js := [j for j in xce.list_jobs() if j.spec.name == "dask-worker"])
                               and all(j.state in (api.DONE, api.EXIT) for j in js) and js,
                               "every worker's job ended", timeout_s=120)
    assert len(ended) == 4
    named = {p.name.removesuffix(".out").rsplit("-", 1)[1] for p in logs.glob("*.out")}
    assert named == {str(job.id) for job in ended}  # each job's -o, %J filled in


def test_sinfo_and_scontrol(site: LocalCluster) -> None:
    held = slurm("sbatch", "--parsable", "-H", "--wrap", "true")
    job = int(held.stdout)
    with site.client() as client:
        assert client.get_job(job).state == api.PSUSP
        assert slurm("scontrol", "update", f"JobId={job}", "Priority=7").returncode == 0
        assert client.get_job(job).spec.priority == 7
        assert slurm("scontrol", "release", str(job)).returncode == 0
        wait_until(lambda: client.get_job(job).state == api.DONE, "the released job done")
    shown = slurm("scontrol", "show", "job", str(job)).stdout
    assert f"JobId={job} " in shown and "JobState=COMPLETED" in shown and "ExitCode=0:0" in shown
    assert "PartitionName=normal" in slurm("scontrol", "show", "partition", "normal").stdout
    nodes = slurm("scontrol", "show", "node", "w1").stdout
    assert "NodeName=w1" in nodes and "CPUTot=4" in nodes
    info = slurm("sinfo").stdout.splitlines()
    assert info[0].split() == ["PARTITION", "AVAIL", "TIMELIMIT", "NODES", "STATE", "NODELIST"]
    assert "normal*" in {row.split()[0] for row in info[1:]}  # the default partition, starred
    refused = slurm("scontrol", "frobnicate", "1")
    assert refused.returncode == 1 and "invalid keyword: frobnicate" in refused.stderr


def test_srun_inside_a_two_host_allocation_and_outside_one(site: LocalCluster, tmp_path: Path) -> None:
    script = tmp_path / "steps.sh"
    script.write_text("#!/bin/sh\n#SBATCH -N 2 --ntasks-per-node=1 -o steps.out\n"
                      "srun sh -c 'echo rank=$SLURM_PROCID node=$SLURM_NODEID of=$SLURM_STEP_NUM_TASKS'\n"
                      "srun -o task-%t.out printenv SLURM_PROCID\n")
    job = int(slurm("sbatch", "--parsable", str(script)).stdout)
    with site.client() as client:
        ended = wait_until(lambda: (j := client.get_job(job)).state in (api.DONE, api.EXIT) and j,
                           "the steps job ended")
    assert ended.state == api.DONE and {a.host for a in ended.allocation} == {"w1", "w2"}
    lines = sorted((tmp_path / "steps.out").read_text().split())
    assert lines == ["node=0", "node=1", "of=2", "of=2", "rank=0", "rank=1"], lines
    assert [(tmp_path / f"task-{rank}.out").read_text() for rank in (0, 1)] == ["0\n", "1\n"]
    outside = slurm("srun", "-n", "1", "sh", "-c", "echo hello from $SLURM_JOB_ID; exit 3", stdin="")
    assert outside.returncode == 3, outside.stderr
    assert outside.stdout.startswith("hello from ") and outside.stdout.split()[-1].isdigit()
