"""Slurm's commands (cli/slurm/) on PATH against a live cluster: sbatch with a #SBATCH script and
--parsable, squeue's default table, sacct --parsable2 as submitit reads it, scancel, Slurm's variables
in the job; and dask-jobqueue's SLURMCluster, unmodified: it writes a #SBATCH job script per worker,
submits it with `sbatch script` and reads "Submitted batch job N", cancels with `scancel N`. Four
workers, each a job, compute a dask array's sum; scaled to 0, every job ends."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import lsf_site
import pytest
from conftest import FAST_HOSTS, print_logs_if_failed, wait_until

from ops.local_cluster import LocalCluster
from xce.v1 import api_pb2 as api

pytestmark = pytest.mark.cluster

dask = pytest.importorskip("dask")
dask_array = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")
dask_jobqueue = pytest.importorskip("dask_jobqueue")


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    """One cluster for the module's tests (each starts its own jobs, and looks at those alone); three
    hosts, so that a job's host list is compressed (w[1-3])."""
    with lsf_site.site(FAST_HOSTS, workers=(("w1", 4), ("w2", 4), ("w3", 4))) as made:
        yield made.cluster


@pytest.fixture
def site(cluster: LocalCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
         request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    lsf_site.slurm_environment(monkeypatch, cluster, tmp_path)
    yield cluster
    print_logs_if_failed(request, cluster.data)


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
    assert seen["SLURM_JOB_NODELIST"] in ("w1", "w2", "w3") and seen["SLURM_CPUS_ON_NODE"] == "2"
    cancelled = slurm("scancel", str(sleeper))
    assert (cancelled.returncode, cancelled.stdout, cancelled.stderr) == (0, "", "")
    with site.client() as client:
        wait_until(lambda: client.get_job(sleeper).state == api.EXIT, "the sleeper cancelled")
    accounting = slurm("sacct", "-j", f"{job},{sleeper}", "-o", "JobID,JobName,State,ExitCode", "-P", "-n")
    assert accounting.stdout.splitlines() == [f"{job}|envjob|COMPLETED|0:0",
                                              f"{sleeper}|sleeper|CANCELLED|0:15"]
    missing = slurm("scancel", "999999")  # Slurm 22.05: silent, 0 (its golden: cli/scancel_bad_id.out)
    assert (missing.returncode, missing.stdout, missing.stderr) == (0, "", "")
    told = slurm("scancel", "-v", "999999")
    assert told.stderr == ("scancel: Terminating job 999999\n"
                           "scancel: error: Kill job error on job id 999999: Invalid job id specified\n")


def test_slurm_cluster_scales_to_four_workers_computes_and_scales_to_zero(site: LocalCluster,
                                                                          tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    scratch = str(tmp_path / "scratch")  # the workers' and this process's, not /tmp's dask-scratch-space
    with dask.config.set({"temporary-directory": scratch}), \
            dask_jobqueue.SLURMCluster(cores=1, processes=1, memory="1GB", walltime="00:10:00",
                                       interface="lo", log_directory=str(logs), death_timeout=60,
                                       local_directory=scratch) as cluster:
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
    assert ended.state == api.DONE and len({a.host for a in ended.allocation}) == 2
    lines = sorted((tmp_path / "steps.out").read_text().split())
    assert lines == ["node=0", "node=1", "of=2", "of=2", "rank=0", "rank=1"], lines
    assert [(tmp_path / f"task-{rank}.out").read_text() for rank in (0, 1)] == ["0\n", "1\n"]
    outside = slurm("srun", "-n", "1", "sh", "-c", "echo hello from $SLURM_JOB_ID; exit 3", stdin="")
    assert outside.returncode == 3, outside.stderr
    assert outside.stdout.startswith("hello from ") and outside.stdout.split()[-1].isdigit()


def test_submitit_runs_twenty_functions_an_exception_comes_back(site: LocalCluster, tmp_path: Path) -> None:
    """submitit, unmodified: an array of 19 functions (`map_array`: one sbatch --array=0-18%8 script with
    --signal=USR2@90, --wckey, --open-mode=append, --output with %A_%a) and one job of its own, each run
    by `srun --unbuffered --output ... python -u -m submitit.core._submit` inside its allocation, and
    polled with `sacct -o JobID,State,NodeList --parsable2 -j ID`; the one that raises comes back as
    the exception."""
    submitit = pytest.importorskip("submitit")

    def square(x: int) -> int:  # (defined here: pickled by value, nothing to import where it runs)
        if x == 13:
            raise ValueError(f"{x} is unlucky")
        return x * x

    executor = submitit.SlurmExecutor(folder=tmp_path / "submitit")
    executor.update_parameters(time=5, array_parallelism=8, cpus_per_task=1, ntasks_per_node=1)
    elements = executor.map_array(square, range(19))
    alone = executor.submit(square, 20)
    array_id = elements[0].job_id.split("_")[0]
    assert [job.job_id for job in elements] == [f"{array_id}_{i}" for i in range(19)]
    script = (tmp_path / "submitit" / f"{alone.job_id}_submission.sh").read_text()
    assert "#SBATCH --signal=USR2@90" in script and "#SBATCH --wckey=submitit" in script
    assert alone.result() == 400
    results = {}
    for index, job in enumerate(elements):
        if index == 13:
            with pytest.raises(submitit.core.utils.FailedJobError, match="13 is unlucky"):
                job.result()
            assert "ValueError" in str(job.exception())
        else:
            results[index] = job.result()
    assert results == {i: i * i for i in range(19) if i != 13}

    def ended() -> dict[str, list[str]] | None:
        # A function's result is written before its job ends (srun and the script still have to exit).
        polled = slurm("sacct", "-o", "JobID,State,NodeList", "--parsable2", "-j", array_id, "-j",
                       alone.job_id)
        rows = {line.split("|")[0]: line.split("|")[1:] for line in polled.stdout.splitlines()[1:]}
        done = len(rows) == 20 and all(state in ("COMPLETED", "FAILED") for state, _ in rows.values())
        return rows if done else None

    rows = wait_until(ended, "every job of the twenty ended in sacct", every_s=0.5)
    assert rows[f"{array_id}_13"][0] == "FAILED" and rows[alone.job_id][0] == "COMPLETED"
    assert {key for key, (state, _) in rows.items() if state == "COMPLETED"} == {
        alone.job_id, *(f"{array_id}_{i}" for i in range(19) if i != 13)}
    assert all(nodes in ("w1", "w2", "w3") for _, nodes in rows.values())
    forced = [job.get_info(mode="force")["State"] for job in (alone, elements[13], elements[14])]
    assert forced == ["COMPLETED", "FAILED", "COMPLETED"]  # (submitit's own read of sacct)


def test_salloc_runs_a_command_in_its_allocation_and_srun_inside_it(site: LocalCluster) -> None:
    line = "echo nodes=$SLURM_JOB_NODELIST; srun -l sh -c 'echo node=$SLURM_NODEID'; exit 4"
    done = slurm("salloc", "-N", "3", "--ntasks-per-node=1", "-J", "alloc", "sh", "-c", line, stdin="")
    assert done.returncode == 4, done.stderr
    granted = re.search(r"^salloc: Granted job allocation (\d+)$", done.stderr, re.MULTILINE)
    assert granted and f"salloc: Relinquishing job allocation {granted[1]}" in done.stderr, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "nodes=w[1-3]" and sorted(lines[1:]) == ["0: node=0", "1: node=1", "2: node=2"]
    with site.client() as client:
        job = wait_until(lambda: (j := client.get_job(granted[1])).state == api.EXIT and j,
                         "the allocation ended")
    assert job.spec.name == "alloc" and job.exit_code == 4


def test_srun_s_relay_reads_every_task_that_connected_before_it_closes() -> None:
    """A task that ended has connected, but on a busy host srun's acceptor may not have taken its
    connection from the backlog yet when srun closes: it must still be read (a line was lost so)."""
    import io
    import threading

    from cli.slurm import task_relay

    go = threading.Event()

    class Late(task_relay.Relay):
        def _accept(self) -> None:
            go.wait(30)  # (the acceptor as a busy host runs it: after every task ended)
            super()._accept()

    out, err = io.BytesIO(), io.BytesIO()
    relay = Late(True, out, err)
    port = relay.listener.getsockname()[1]
    for rank in range(5):
        with socket.create_connection(("127.0.0.1", port)) as task:
            line = f"node={rank}\n".encode()
            task.sendall(f"{relay.key} {rank}\n".encode() + task_relay.FRAME.pack(1, len(line)) + line)
    go.set()
    relay.close()
    assert sorted(out.getvalue().decode().splitlines()) == [f"{r}: node={r}" for r in range(5)]


def test_an_array_s_rest_in_squeue_sacct_and_their_json(site: LocalCluster) -> None:
    held = int(slurm("sbatch", "--parsable", "-H", "--wrap", "true").stdout)
    array = int(slurm("sbatch", "--parsable", "--array=0-40%3", "-d", f"afterok:{held}", "-J", "waits",
                      "--wrap", "true").stdout)
    try:
        listed = slurm("squeue", "-j", str(array), "-h", "-o", "%i %j %T %r").stdout.splitlines()
        *elements, rest = listed
        found = re.fullmatch(rf"{array}_\[(\d+)-40%3\] waits PENDING Dependency", rest)
        assert found, listed
        first = int(found[1])
        assert [row.split()[0] for row in elements] == [f"{array}_{i}" for i in range(first)]
        accounted = slurm("sacct", "-j", str(array), "-P", "-n", "-o", "JobID,JobName,State").stdout
        accounted = accounted.splitlines()
        assert accounted[-1] == f"{array}_[{first}-40]|waits|PENDING" and len(accounted) == first + 1
        squeue_json = json.loads(slurm("squeue", "--json", "-j", str(array)).stdout)
        assert squeue_json["errors"] == [] and squeue_json["jobs"][-1]["array_task_string"] == f"{first}-40%3"
        assert {j["array_job_id"] for j in squeue_json["jobs"]} == {array}
        assert {j["job_state"] for j in squeue_json["jobs"]} == {"PENDING"}
        sacct_json = json.loads(slurm("sacct", "--json", "-j", str(array)).stdout)
        assert sacct_json["jobs"][-1]["array"]["task"] == f"{first}-40"
        assert sacct_json["jobs"][-1]["state"] == {"current": "PENDING", "reason": "Dependency"}
        named = slurm("squeue", "-j", str(array), "-h", "-O", "ArrayJobID:8,ArrayTaskID:12,StateCompact:4")
        assert named.stdout.splitlines()[-1] == f"{array:<8}{first}-40%3{'':<{12 - len(f'{first}-40%3')}}PD  "
    finally:
        slurm("scancel", str(array), str(held))


ACCEPTANCE = """#!/bin/bash
#SBATCH --job-name=accept
#SBATCH --partition=normal
#SBATCH --account=physics
#SBATCH --nodes=3
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=1
#SBATCH --mem-per-cpu=256M
#SBATCH --time=0-00:05:00
#SBATCH --output=acc-%A_%a.out
#SBATCH --error=acc-%A_%a.err
#SBATCH --array=0-3%2
#SBATCH --export=ALL,ACCEPT=yes
#SBATCH --comment="acceptance run"
#SBATCH --open-mode=append
#SBATCH --signal=B:USR1@30
#SBATCH --wckey=physics
#SBATCH --requeue
#SBATCH --mail-type=NONE
#SBATCH --begin=now
#SBATCH --chdir={workdir}
echo "array=$SLURM_ARRAY_JOB_ID task=$SLURM_ARRAY_TASK_ID name=$SLURM_JOB_NAME account=$SLURM_JOB_ACCOUNT"
echo "nodes=$SLURM_JOB_NODELIST count=$SLURM_JOB_NUM_NODES tasks=$SLURM_NTASKS accept=$ACCEPT here=$(pwd)"
srun -l printenv SLURM_NODEID | sort
echo "to stderr" >&2
"""


def test_acceptance_a_script_of_twenty_directives_an_array_and_every_dependency(site: LocalCluster,
                                                                                tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    (tmp_path / "accept.sh").write_text(ACCEPTANCE.format(workdir=workdir))
    array = int(slurm("sbatch", "--parsable", "accept.sh").stdout)
    ok = int(slurm("sbatch", "--parsable", "--wrap", "true").stdout)
    bad = int(slurm("sbatch", "--parsable", "--wrap", "exit 3").stdout)
    first_solo = int(slurm("sbatch", "--parsable", "-J", "solo", "--wrap", "sleep 1").stdout)
    waits = {kind: int(slurm("sbatch", "--parsable", "-d", condition, "-J", kind, "--wrap", "true").stdout)
             for kind, condition in [("afterok", f"afterok:{ok}"), ("afterany", f"afterany:{bad}"),
                                     ("afternotok", f"afternotok:{bad}"), ("after", f"after:{ok}"),
                                     ("any", f"afterok:{bad}?afterok:{ok}"),
                                     ("all", f"afterok:{ok},after:{bad}"),
                                     ("solo", "singleton"), ("never", f"afterok:{bad}")]}
    with site.client() as client:
        def ended(job: int) -> api.Job:
            return wait_until(lambda: (j := client.get_job(job)).state in (api.DONE, api.EXIT) and j,
                              f"job {job} ended", timeout_s=120)

        elements = [ended(f"{array}[{i}]") for i in range(4)]
        done = {kind: ended(job) for kind, job in waits.items() if kind != "never"}
        wait_until(lambda: client.get_job(waits["never"]).pending_code == api.PEND_DEPENDENCY_NEVER,
                   "the condition that can never hold seen so")
        solo_before = ended(first_solo)
    assert {kind: job.state for kind, job in done.items()} == dict.fromkeys(done, api.DONE)
    assert done["solo"].start_time_ms >= solo_before.end_time_ms  # singleton: after the other "solo"
    never = slurm("squeue", "-j", str(waits["never"]), "-h", "-o", "%T %r").stdout.split()
    assert never == ["PENDING", "DependencyNeverSatisfied"]
    slurm("scancel", str(waits["never"]))
    assert [(e.state, len(e.allocation)) for e in elements] == [(api.DONE, 3)] * 4, elements
    spans = sorted((e.start_time_ms, e.end_time_ms) for e in elements)
    # %2: at no instant more than two ran (an element's start counts with those running then)
    assert all(sum(s <= start < e for s, e in spans) <= 2 for start, _ in spans), spans
    for index in range(4):
        out = (workdir / f"acc-{array}_{index}.out").read_text().splitlines()
        assert out == [f"array={array} task={index} name=accept account=physics",
                       f"nodes=w[1-3] count=3 tasks=3 accept=yes here={workdir}", "0: 0", "1: 1", "2: 2"]
        assert (workdir / f"acc-{array}_{index}.err").read_text() == "to stderr\n"
    accounted = slurm("sacct", "-j", str(array), "-P", "-n", "-o",
                      "JobID,JobName,Account,State,NNodes,NodeList,Timelimit,Comment").stdout.splitlines()
    assert accounted == [f"{array}_{i}|accept|physics|COMPLETED|3|w[1-3]|00:05:00|acceptance run"
                         for i in range(4)]


def test_srun_pty_bash_driven_through_tmux(site: LocalCluster) -> None:
    """`srun --pty bash` as a person types into it: a terminal multiplexer (tmux) types the keys and
    reads the screen."""
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed (scripts/install_tmux.sh)")
    server = f"xce-slurm-{os.getpid()}"

    def tmux(*words: str) -> str:
        return subprocess.run(["tmux", "-L", server, *words], capture_output=True, text=True, timeout=30,
                              check=True).stdout

    line = "srun --pty bash --norc --noprofile; echo SRUN-EXIT=$?; sleep 120"
    tmux("new-session", "-d", "-s", "pty", "-x", "160", "-y", "40", "sh", "-c", line)
    try:
        wait_until(lambda: "bash-" in tmux("capture-pane", "-p", "-t", "pty"), "bash's prompt")
        tmux("send-keys", "-t", "pty", "echo JOB=$SLURM_JOB_ID; hostname; exit", "Enter")
        screen = wait_until(lambda: "SRUN-EXIT=" in (text := tmux("capture-pane", "-p", "-t", "pty"))
                            and text, "srun's end")
    finally:
        subprocess.run(["tmux", "-L", server, "kill-server"], capture_output=True, timeout=30)
    found = re.search(r"^JOB=(\d+)\s*$", screen, re.MULTILINE)
    assert found and "SRUN-EXIT=0" in screen, screen
    assert socket.gethostname() in [row.strip() for row in screen.splitlines()], screen
    with site.client() as client:
        assert client.get_job(found[1]).spec.command == ["bash", "--norc", "--noprofile"]
