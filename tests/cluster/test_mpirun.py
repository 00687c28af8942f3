"""Open MPI's mpirun over `xce launch`: inside a 16-slot job on four workers of 4 slots,
`mpirun -np 16` starts its daemons (orted) on the job's hosts with `xce launch` as its remote shell
(`--mca plm_rsh_agent`), each as a task of the job under that host's worker; the 16 ranks call
MPI_Init and an MPI_Allreduce over TCP, and report which host's task they are; the job ends DONE.

Needs Debian's openmpi-bin (`sh scripts/install_openmpi.sh`, part of the install step). No compiler:
the ranks are Python calling libmpi through ctypes."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import wait_until

from ops.local_cluster import LocalCluster, LocalScheduler, LocalWorkers
from xce.v1 import api_pb2 as api

pytestmark = pytest.mark.cluster

# The remote shell mpirun calls as `AGENT HOST orted ARGS...`. Like ssh it hands the words to a shell
# on the host: mpirun quotes them for one (the daemons' contact URI holds a ';').
AGENT = f'''#!/bin/sh
host=$1
shift
exec {sys.executable} -m cli launch "$host" -- /bin/sh -c "$*"
'''

# The job: mpirun on its first host, onto the hosts and slots of its allocation, as LSF's LSB_MCPU_HOSTS
# tells them ("w1 4 w2 4 ..." becomes --host w1:4,w2:4,...). Its daemons are all started from here
# (no tree spawn), and stay attached to their tasks: daemonized (what mpirun asks of them when it
# starts them all), they would leave their task, whose end then kills them or leaves them outside the
# job. They talk over loopback, where every host of this test is.
MPIRUN = r'''
hosts=
set -- $LSB_MCPU_HOSTS
while [ $# -gt 1 ]; do hosts="$hosts${hosts:+,}$1:$2"; shift 2; done
exec "$MPIRUN" --allow-run-as-root -np "$LSB_DJOB_NUMPROC" --host "$hosts" --bind-to none \
    --leave-session-attached --mca plm_rsh_agent "$AGENT" --mca plm_rsh_no_tree_spawn 1 \
    --mca oob_tcp_if_include lo --mca btl self,tcp --mca btl_tcp_if_include lo \
    "$PYTHON" rank.py "$RANKS"
'''

RANK = r'''
import ctypes, json, os, sys
mpi = ctypes.CDLL("libmpi.so.40", mode=ctypes.RTLD_GLOBAL)  # Open MPI's (4.x and 5.x)
handle = lambda name: ctypes.c_void_p(ctypes.addressof(ctypes.c_char.in_dll(mpi, name)))  # MPI_COMM_WORLD...
assert mpi.MPI_Init(None, None) == 0
world, rank, size, total = handle("ompi_mpi_comm_world"), ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
mpi.MPI_Comm_rank(world, ctypes.byref(rank))
mpi.MPI_Comm_size(world, ctypes.byref(size))
assert mpi.MPI_Allreduce(ctypes.byref(rank), ctypes.byref(total), 1, handle("ompi_mpi_int"),
                         handle("ompi_mpi_op_sum"), world) == 0
ancestors, pid = [], os.getppid()
while pid > 1:
    ancestors.append(pid)
    pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
out = os.path.join(sys.argv[1], f"{rank.value}.json")
with open(out + ".tmp", "w") as f:  # what the worker that runs it set: which host, which task
    json.dump({"rank": rank.value, "size": size.value, "sum": total.value,
               "env_rank": os.environ["OMPI_COMM_WORLD_RANK"], "job": os.environ["XCE_JOB_ID"],
               "spool": os.environ["XCE_SPOOL"], "task": os.environ.get("XCE_TASK_ID", ""),
               "ancestors": ancestors}, f)
os.rename(out + ".tmp", out)
assert mpi.MPI_Finalize() == 0
'''


def _mpirun() -> str:
    """Open MPI's mpirun (4.x: with orted, its daemon); missing, the test fails where the install step
    can install it."""
    found = shutil.which("mpirun.openmpi") or (shutil.which("orted") and shutil.which("mpirun"))
    if found is None:
        if os.geteuid() != 0 or shutil.which("apt-get") is None:
            pytest.skip("Open MPI's mpirun is not installed, and installing it needs root and apt-get")
        pytest.fail("Open MPI's mpirun is not installed: run `sh scripts/install_openmpi.sh` "
                    "(Debian's openmpi-bin, part of the install step)")
    return found


@pytest.fixture
def setup(make_fleet) -> Iterator[tuple[LocalCluster, LocalWorkers, str]]:  # type: ignore[no-untyped-def]
    mpirun = _mpirun()
    cluster, workers = make_fleet("")  # heartbeats as deployed, as in test_launch.py
    for n in range(1, 5):
        workers.start(f"w{n}", 4)
    scheduler = LocalScheduler(cluster)
    scheduler.start()
    try:
        with cluster.client() as client:
            wait_until(lambda: len(client.list_hosts().hosts) == 4, "four workers to join")
        yield cluster, workers, mpirun
    finally:
        scheduler.kill()


def test_mpirun_starts_sixteen_ranks_on_four_hosts_through_xce_launch(setup, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cluster, workers, mpirun = setup
    agent, ranks = tmp_path / "xce-rsh", tmp_path / "ranks"
    agent.write_text(AGENT)
    agent.chmod(0o755)
    ranks.mkdir()
    (tmp_path / "mpirun.sh").write_text(MPIRUN)
    (tmp_path / "rank.py").write_text(RANK)
    env = {"MPIRUN": mpirun, "AGENT": str(agent), "PYTHON": sys.executable, "RANKS": str(ranks),
           "PATH": f"{os.path.dirname(mpirun)}:/usr/bin:/bin"}  # where orted is, for its hosts too
    spec = api.JobSpec(command=["/bin/sh", str(tmp_path / "mpirun.sh")], slots=16, cwd=str(tmp_path), env=env,
                       name="mpirun", stdout_path="mpirun.out", stderr_path="mpirun.err")

    def err() -> str:
        path = tmp_path / "mpirun.err"
        return path.read_text()[-4000:] if path.exists() else ""

    with cluster.client() as client:
        job_id = client.submit([spec]).jobs[0].id
        try:
            wait_until(lambda: client.get_job(str(job_id)).state in (api.DONE, api.EXIT, api.UNKWN),
                       "the job to end", timeout_s=120)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the job's stderr:\n{err()}") from None
        job = client.get_job(str(job_id))
    assert job.state == api.DONE, f"mpirun failed; the job's stderr:\n{err()}"
    assert sorted((a.host, a.slots) for a in job.allocation) == [(f"w{n}", 4) for n in range(1, 5)]

    reports = [json.loads(path.read_text()) for path in ranks.glob("*.json")]
    assert sorted(r["rank"] for r in reports) == list(range(16)), err()
    assert all(r["size"] == 16 and r["sum"] == sum(range(16)) and r["env_rank"] == str(r["rank"])
               and r["job"] == str(job_id) for r in reports)  # one MPI world, which talked
    # Where each rank ran: the spool its worker set (the job's command, mpirun, has the first host's).
    spools = {str(workers.spool(a.host)): a.host for a in job.allocation}
    placed = {r["rank"]: spools[r["spool"]] for r in reports}
    # mpirun fills the hosts in the allocation's order, 4 slots each: ranks 0-3 on the first (mpirun's).
    assert placed == {rank: job.allocation[rank // 4].host for rank in range(16)}
    assert placed[0] == job.host
    # ...each host's ranks under one task (its orted), which that host's worker started, and saw end
    # well: its processes are the ranks' ancestors (no daemon left it).
    tasks = {host: {r["task"] for r in reports if placed[r["rank"]] == host} for host in spools.values()}
    assert all(len(ids) == 1 and "" not in ids for ids in tasks.values()), tasks
    for host, (task,) in tasks.items():
        log = cluster.data / f"worker-{host}.log"
        started = re.search(rf"job {job_id}\.{job.attempt} task {task} started, pid (\d+)", log.read_text())
        assert started, f"no start of task {task} in the log of {host}"
        assert all(int(started[1]) in r["ancestors"] for r in reports if r["task"] == task), \
            f"ranks of task {task} on {host} ran outside it (a daemonized orted?)"
        ended_well = f"job {job_id}.{job.attempt} task {task} ended: {{'exit_code': 0,"
        wait_until(lambda: ended_well in log.read_text(), f"host {host} to see its task end well")  # noqa: B023
