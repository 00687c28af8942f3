"""Job history on a live cluster: finished jobs leave the live tables after the clean period and stay
findable (`xce job`, requeue, `xce history`, `xce acct`), on real replicas and workers."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import FAST_HOSTS, replica_dump, wait_converged, wait_until, xce_cli

from ops.local_cluster import LocalCluster, LocalWorkers
from xce.v1 import api_pb2 as api

pytestmark = pytest.mark.cluster

CLEAN_S = 2


def test_finished_jobs_are_cleaned_into_history_and_stay_findable(
        make_fleet: Callable[[str], tuple[LocalCluster, LocalWorkers]], tmp_path: Path) -> None:
    cluster, workers = make_fleet(FAST_HOSTS + f"\n[state]\nclean_period_s = {CLEAN_S}\n")
    workers.start("w1", 4)
    with cluster.client() as client:
        wait_until(lambda: client.list_hosts().hosts, "w1 to join")
        good, bad = client.submit([api.JobSpec(command=["true"], cwd=str(tmp_path)),
                                   api.JobSpec(command=["sh", "-c", "exit 3"], cwd=str(tmp_path))]).jobs
        for job in (good, bad):
            client.run(job.id, "w1")
        ended = wait_until(lambda: [j for j in client.list_jobs() if j.state in (api.DONE, api.EXIT)][1:] and
                     client.list_jobs(), "both jobs to end")
        assert {j.id: (api.JobState.Name(j.state), j.exit_code) for j in ended} == {
            good.id: ("DONE", 0), bad.id: ("EXIT", 3)}
        # In history at once, newest first, while still live.
        history = json.loads(xce_cli(cluster, "history", "--json"))["jobs"]
        assert sorted(int(j["id"]) for j in history) == [good.id, bad.id]
        failed = json.loads(xce_cli(cluster, "history", "--state", "EXIT", "--exit-code", "3",
                                    "--json"))["jobs"]
        assert [int(j["id"]) for j in failed] == [bad.id]
        # Cleaned out of the live table by the first entry applied after the clean period (with no
        # scheduler renewing its lease, the test writes one: a held job).
        time.sleep(CLEAN_S)
        [held] = client.submit([api.JobSpec(command=["true"], cwd=str(tmp_path))]).jobs
        client.control(held.id, api.HOLD)
        assert [j.id for j in client.list_jobs()] == [held.id]
        # Still found by id, and by the history and accounting commands.
        assert client.get_job(good.id).state == api.DONE
        assert f"Job <{bad.id}>" not in xce_cli(cluster, "jobs")
        assert str(bad.id) in xce_cli(cluster, "history", "--since", "1h")
        totals = json.loads(xce_cli(cluster, "acct", "--json"))["totals"]
        assert [(t["queue"], int(t["jobs"]), int(t["done"]), int(t["exited"])) for t in totals] == [
            ("normal", 2, 1, 1)]
        assert "normal" in xce_cli(cluster, "acct")
        # A requeue finds the cleaned job and runs it again, as the next attempt.
        assert client.control(good.id, api.REQUEUE).state == api.PEND
        assert [j.id for j in client.list_jobs()] == [good.id, held.id]
        assert good.id not in [j.id for j in client.history(api.HistoryRequest())]
        client.run(good.id, "w1")
        again = wait_until(lambda: (j := client.get_job(good.id)).state == api.DONE and j,
                     "the requeued job to end")
        assert again.attempt == 1
        # (its clean into history is the last entry this test makes)
        wait_until(lambda: [j.attempt for j in client.history(api.HistoryRequest())
                            if j.id == good.id] == [1], "the requeued job's clean into history")
    # Every replica holds the same history.
    wait_converged(cluster)
    cluster.stop()
    dumps = {replica_dump(cluster, r.id)[0] for r in cluster.config.replicas}
    assert len(dumps) == 1
