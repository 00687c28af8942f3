"""Parallel jobs on real processes: a 16-slot job on four workers of 4 slots gets its host
file, starts its ranks with `xce launch` on every host of its allocation, they connect to rank 0 over
TCP, and a kill ends every task on every host (checked in /proc); a task can only be launched with
the job's credential, by its owner, onto its own hosts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import wait_until, xce_as_nobody

from ops.local_cluster import LocalCluster, LocalScheduler, LocalWorkers
from xce.v1 import api_pb2 as api

pytestmark = pytest.mark.cluster

RANK0 = r'''
import json, os, socket, subprocess, sys
out, flag = sys.argv[1], sys.argv[2]
hosts = open(os.environ["XCE_HOSTFILE"]).read().split()
server = socket.create_server(("127.0.0.1", 0))
port = server.getsockname()[1]
rank_py = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rank.py")
launchers = [subprocess.Popen([sys.executable, "-m", "cli", "launch", host, "--", sys.executable, rank_py,
                               str(port), str(rank)]) for rank, host in enumerate(hosts) if rank > 0]
server.settimeout(120)  # a rank that never reports in fails the job, and says which
ranks = {}
while len(ranks) < len(hosts) - 1:
    try:
        conn, _ = server.accept()
    except TimeoutError:
        sys.exit(f"ranks never reported in: {sorted(set(range(1, len(hosts))) - set(ranks))}")
    rank, task, pid, ticks, job_id = conn.makefile().readline().split()
    ranks[int(rank)] = {"task": task, "pid": int(pid), "ticks": ticks, "LSB_JOBID": job_id}
    conn.close()
env = {k: os.environ[k] for k in ("XCE_HOSTS", "LSB_HOSTS", "LSB_MCPU_HOSTS", "LSB_DJOB_NUMPROC",
                                  "XCE_JOB_CREDENTIAL", "LSB_JOBID", "LSB_JOBINDEX", "LSB_JOBNAME",
                                  "LSB_QUEUE", "LSB_OUTPUTFILE")}
with open(out + ".tmp", "w") as f:
    json.dump({"hosts": hosts, "env": env, "ranks": ranks, "pid": os.getpid(),
               "ticks": open("/proc/self/stat").read().rsplit(")", 1)[1].split()[19]}, f)
os.rename(out + ".tmp", out)
import time
deadline = time.monotonic() + 600  # until the test says so (bounded: a test that died says nothing)
while not os.path.exists(flag) and time.monotonic() < deadline:
    time.sleep(0.05)
codes = [p.wait() for p in launchers]
sys.exit(0 if all(c == 0 for c in codes) else 3)
'''

RANK = r'''
import os, socket, sys, time
port, rank = int(sys.argv[1]), sys.argv[2]
with socket.create_connection(("127.0.0.1", port)) as conn:
    ticks = open("/proc/self/stat").read().rsplit(")", 1)[1].split()[19]  # its start: a pid is reused
    job_id = os.environ["LSB_JOBID"]
    conn.sendall(f"{rank} {os.environ['XCE_TASK_ID']} {os.getpid()} {ticks} {job_id}\n".encode())
flag = os.environ.get("RANK_FLAG", "")
deadline = time.monotonic() + 600
while not os.path.exists(flag) and time.monotonic() < deadline:
    time.sleep(0.05)
'''


@pytest.fixture
def setup(make_fleet, tmp_path: Path) -> Iterator[tuple[LocalCluster, LocalWorkers]]:  # type: ignore[no-untyped-def]
    # Heartbeats as deployed: 16 Python processes starting at once on two cores may hold a worker's
    # heartbeat past a fast timeout (its host UNAVAIL, the job UNKWN), which is not this test's subject.
    cluster, workers = make_fleet("")
    for n in range(1, 5):
        workers.start(f"w{n}", 4)
    scheduler = LocalScheduler(cluster)
    scheduler.start()
    (tmp_path / "rank0.py").write_text(RANK0)
    (tmp_path / "rank.py").write_text(RANK)
    try:
        with cluster.client() as client:
            wait_until(lambda: len(client.list_hosts().hosts) == 4, "four workers to join")
        yield cluster, workers
    finally:
        scheduler.kill()


def _alive(pid: int, ticks: str) -> bool:
    """The process still runs (the same one: its start time, as pids are reused)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z" and fields[19] == ticks


def _submit(cluster: LocalCluster, tmp_path: Path, name: str, rank_flag: Path) -> tuple[int, Path, Path]:
    out, flag = tmp_path / f"{name}.json", tmp_path / f"{name}.go"
    spec = api.JobSpec(command=[sys.executable, str(tmp_path / "rank0.py"), str(out), str(flag)], slots=16,
                       cwd=str(tmp_path), env={"RANK_FLAG": str(rank_flag)}, name=name,
                       stdout_path=f"{name}.out", stderr_path=f"{name}.err")
    with cluster.client() as client:
        return client.submit([spec]).jobs[0].id, out, flag


def test_sixteen_ranks_on_four_hosts_report_in_and_a_kill_ends_every_task(setup, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cluster, _ = setup
    job_id, out, _ = _submit(cluster, tmp_path, "mpi", tmp_path / "never")
    with cluster.client() as client:
        wait_until(out.exists, "every rank to report in to rank 0", timeout_s=90)
        report = json.loads(out.read_text())
        job = client.get_job(str(job_id))
        assert job.state == api.RUN
        assert sorted((a.host, a.slots) for a in job.allocation) == [(f"w{n}", 4) for n in range(1, 5)]
        first = job.allocation[0].host
        # The host file: a host per slot, the first host first, as the allocation lists them.
        assert report["hosts"] == [a.host for a in job.allocation for _ in range(a.slots)]
        assert report["env"]["LSB_MCPU_HOSTS"] == " ".join(f"{a.host} {a.slots}" for a in job.allocation)
        assert report["env"]["LSB_DJOB_NUMPROC"] == "16"
        # LSF's job variables, in the job and in every task it launched
        lsf = {k: report["env"][k] for k in ("LSB_JOBID", "LSB_JOBINDEX", "LSB_JOBNAME", "LSB_OUTPUTFILE")}
        assert lsf == {"LSB_JOBID": str(job_id), "LSB_JOBINDEX": "0", "LSB_JOBNAME": "mpi",
                       "LSB_OUTPUTFILE": "mpi.out"}
        assert report["env"]["LSB_QUEUE"] == job.spec.queue
        assert {rank["LSB_JOBID"] for rank in report["ranks"].values()} == {str(job_id)}
        assert report["env"]["XCE_HOSTS"].split() == report["hosts"]
        assert sorted(map(int, report["ranks"])) == list(range(1, 16))
        assert first == job.host
        pids = [(report["pid"], report["ticks"]), *((r["pid"], r["ticks"]) for r in report["ranks"].values())]
        assert all(_alive(*pid) for pid in pids)
        assert Counter(h for h in report["hosts"]) == {f"w{n}": 4 for n in range(1, 5)}

        client.control(str(job_id), api.KILL)
        wait_until(lambda: not any(_alive(*pid) for pid in pids), "every rank on every host to end")
        wait_until(lambda: client.get_job(str(job_id)).state == api.EXIT, "the job to end")
        wait_until(lambda: all(h.slots_used == 0 for h in client.list_hosts().hosts), "every part given back")


def test_ranks_that_end_sum_their_usage_into_the_job_s(setup, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cluster, _ = setup
    rank_flag = tmp_path / "ranks.go"
    rank_flag.touch()  # ranks end once they reported in
    job_id, out, flag = _submit(cluster, tmp_path, "clean", rank_flag)
    with cluster.client() as client:
        wait_until(out.exists, "every rank to report in", timeout_s=90)
        flag.touch()
        wait_until(lambda: client.get_job(str(job_id)).state == api.DONE, "the job to end well")
        job = client.get_job(str(job_id))
    # Each host ran its ranks (three on the first, beside rank 0) and reported its part's end, whose
    # usage the leader adds to the job's (tests/unit/test_unit_allocation.py checks the sum).
    for part in job.allocation:  # the other hosts hear of the end once it is committed: wait for it
        tasks = part.slots - (1 if part.host == job.host else 0)
        line = f"job {job_id}.0: its part here ended ({tasks} tasks)"
        wait_until(lambda: line in (cluster.data / f"worker-{part.host}.log").read_text(),  # noqa: B023
                   f"host {part.host} to report its part's end")


def test_a_task_needs_the_job_s_credential_and_one_of_its_hosts(  # type: ignore[no-untyped-def]
        setup, tmp_path: Path, reachable_by_nobody: None) -> None:
    cluster, workers = setup
    job_id, out, _ = _submit(cluster, tmp_path, "guarded", tmp_path / "never")
    with cluster.client() as client:
        wait_until(out.exists, "the ranks to report in", timeout_s=90)
        job = client.get_job(str(job_id))
    spool = workers.config_path(job.host).parent / f"xce-spool-{job.host}"
    socket_path = spool / "launch.sock"
    assert socket_path.exists()
    base = {**os.environ, "XCE_JOB_ID": str(job_id), "XCE_JOB_ATTEMPT": str(job.attempt),
            "XCE_LAUNCH_SOCKET": str(socket_path)}

    def launch(credential: str, host: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "cli", "launch", host, "--", "true"],
                              env={**base, "XCE_JOB_CREDENTIAL": credential}, capture_output=True, text=True,
                              timeout=60)

    forged = launch("0" * 64, job.host)
    assert forged.returncode == 2 and "credential does not match" in forged.stderr
    credential = json.loads(out.read_text())["env"]["XCE_JOB_CREDENTIAL"]
    elsewhere = launch(credential, "nowhere")
    assert elsewhere.returncode == 2 and "must both be hosts of job" in elsewhere.stderr
    assert launch(credential, job.allocation[-1].host).returncode == 0  # the owner, with it: runs
    if os.geteuid() == 0:  # another user with the credential is still not the owner
        modes = {parent: parent.stat().st_mode for parent in socket_path.parents}
        for parent, mode in modes.items():  # as a spool under /var is: the test's tmp is 0700
            parent.chmod(mode | 0o001)
        try:
            other = xce_as_nobody(["launch", job.host, "--", "true"], {
                "PATH": "/usr/bin:/bin", **{k: v for k, v in base.items() if k.startswith("XCE_")},
                "XCE_JOB_CREDENTIAL": credential}, tmp_path)
        finally:
            for parent, mode in modes.items():
                parent.chmod(mode)
        assert other.returncode == 2 and "only the job's owner" in other.stderr, other.stderr
    with cluster.client() as client:
        client.control(str(job_id), api.KILL)
        wait_until(lambda: client.get_job(str(job_id)).state == api.EXIT, "the job to end")
