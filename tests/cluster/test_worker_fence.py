"""The worker-side fence on real processes: a worker cut off in a network namespace kills its
rerunnable job before the leader gives up on its host and requeues it; nothing runs twice."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import FAST_HOSTS, print_logs_if_failed, wait_until

from ops.local_cluster import LocalCluster, LocalWorkers
from soak.netns import Net, available
from xce.v1 import api_pb2 as api

pytestmark = [pytest.mark.cluster,
              pytest.mark.skipif(available() is not None, reason=str(available()))]

FENCE_S, UNKNOWN_S, GRACE_S = 3.0, 10.0, 1.0  # 3 + 1 < 10: the fence comes first


@pytest.fixture
def fenced_fleet(tmp_path: Path,
                 request: pytest.FixtureRequest) -> Iterator[tuple[LocalCluster, LocalWorkers, Net]]:
    """Replicas on the bridge's address in this namespace, worker w1 in a namespace of its own
    (its link can be cut), w2 here."""
    net = Net(1)
    cluster = LocalCluster(tmp_path / "cluster", hosts=[net.gateway] * 3, extra_config=(
        FAST_HOSTS + f"unknown_timeout_s = {UNKNOWN_S}\nfence_s = {FENCE_S}\n"))
    workers = LocalWorkers(cluster)
    try:
        cluster.start()
        cluster.leader()
        yield cluster, workers, net
    finally:
        workers.stop()
        cluster.stop()
        net.close()
        print_logs_if_failed(request, cluster.data)


def test_a_cut_off_worker_kills_its_rerunnable_job_before_the_leader_requeues_it(
        fenced_fleet: tuple[LocalCluster, LocalWorkers, Net], tmp_path: Path) -> None:
    cluster, workers, net = fenced_fleet
    workers.start("w1", 2, extra=f"kill_grace_s = {GRACE_S}\n", prefix=net.prefix(0))
    workers.start("w2", 2, extra=f"kill_grace_s = {GRACE_S}\n")
    ledger = tmp_path / "ledger"
    # Each instance writes "start J.A" and, when it is terminated, "term J.A"; attempt 0 runs
    # until killed, a later attempt ends at once.
    script = (f'me="$XCE_JOB_ID.$XCE_JOB_ATTEMPT"; echo "start $me" >> {ledger}; '
              f'[ "$XCE_JOB_ATTEMPT" = 0 ] || exit 0; '
              f'trap \'echo "term $me" >> {ledger}; exit 143\' TERM; sleep 600 & wait')
    with cluster.client() as client:
        wait_until(lambda: {h.spec.name for h in client.list_hosts().hosts if h.status == api.HOST_OK} ==
             {"w1", "w2"}, "both workers to join")
        [job] = client.submit([api.JobSpec(command=["sh", "-c", script], cwd=str(tmp_path),
                                           rerunnable=True)]).jobs
        client.run(job.id, "w1")
        wait_until(lambda: ledger.exists() and f"start {job.id}.0" in ledger.read_text(), "the job to start")
        cut_at = time.monotonic()
        net.cut(0)
        # The worker fences (after fence_s without an answer) long before the leader gives up on
        # w1 (heartbeat timeout, then unknown_timeout_s): the instance is terminated first.
        wait_until(lambda: f"term {job.id}.0" in ledger.read_text(), "the fence to kill the job")
        fenced_after = time.monotonic() - cut_at
        assert fenced_after < UNKNOWN_S
        assert client.get_job(job.id).attempt == 0  # not requeued yet: only the worker acted
        requeued = wait_until(lambda: (j := client.get_job(job.id)).state == api.PEND and j,
                        "the leader to give up on w1 and requeue the job", timeout_s=60)
        assert requeued.attempt == 1
        client.run(job.id, "w2")
        done = wait_until(lambda: (j := client.get_job(job.id)).state == api.DONE and j, "attempt 1 to end")
        assert (done.attempt, done.host) == (1, "w2")
        net.heal(0)
        # w1 comes back and reports its fenced end of attempt 0: stale, it changes nothing.
        wait_until(lambda: any(h.spec.name == "w1" and h.status == api.HOST_OK
                               for h in client.list_hosts().hosts), "w1 to rejoin")
        assert client.get_job(job.id).state == api.DONE
    lines = ledger.read_text().split("\n")
    assert [line for line in lines if line] == [f"start {job.id}.0", f"term {job.id}.0", f"start {job.id}.1"]
    log = (cluster.data / "worker-w1.log").read_text()
    assert "killed rerunnable jobs" in log and f"{job.id}.0" in log
