"""Prometheus /metrics on every daemon of a local cluster as `xce cluster up` starts it (ops/local_cluster.py
LocalStack: replicas, a scheduler, a worker and the gateway, each on a free port, found through `xce
status`), scraped directly and by a real Prometheus while jobs run and wait; and the shipped alert rules
(deploy/prometheus/) checked and unit-tested with promtool."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from ops.local_cluster import LocalStack, free_ports
from tests.conftest import FAST_HOSTS, wait_until

pytestmark = pytest.mark.cluster

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), float("nan"))


def status(data: Path) -> dict[str, Any]:
    """What `xce status --json` says of the cluster in `data` (as an operator would ask)."""
    env = {**os.environ, "XCE_DATA": str(data)}
    env.pop("XCE_CONTROLLERS", None)
    out = subprocess.run([sys.executable, "-m", "cli", "status", "--json"], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    answer: dict[str, Any] = json.loads(out.stdout)
    return answer


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[LocalStack]:
    """The cluster, with three jobs submitted through the gateway to its one slot: one runs, two wait.
    Nothing is scraped before the job runs (a replica counts jobs at most every 10 s)."""
    data = tmp_path_factory.mktemp("metrics") / "xce-data"
    stack = LocalStack(data, workers=1, slots=1, extra_config=FAST_HOSTS)
    failed = request.session.testsfailed
    try:
        stack.start()
        headers = {"Authorization": f"Bearer {stack.cluster.admin_token}"}
        for name in ("a", "b", "c"):
            answer = httpx.post(stack.gateway.url + "/xce/v1/jobs", headers=headers, timeout=30,
                                json={"command": ["sleep", "60"], "name": name, "cwd": "/tmp"})
            assert answer.status_code == 201, answer.text
        with stack.cluster.client() as client:
            wait_until(lambda: len(client.list_jobs(["state:eq:RUN"])) == 1, "the first job running")
        yield stack
    finally:
        stack.stop()
        if request.session.testsfailed > failed:
            for log in sorted(data.glob("*.log")):
                tail = log.read_text(errors="replace").splitlines()[-60:]
                print(f"----- {log.name} -----", *tail, sep="\n")


def test_every_daemon_serves_its_metrics_where_status_says(stack: LocalStack) -> None:
    said = wait_until(lambda: (s := status(stack.cluster.data)) and len(s.get("daemons", [])) == 3 and s,
                      "the scheduler, the worker and the gateway in `xce status`")
    replicas = {r["id"]: f"http://{r['metrics_address']}/metrics" for r in said["replicas"]}
    daemons = {d["kind"]: f"http://{d['metrics_address']}/metrics" for d in said["daemons"]}
    assert len(replicas) == 3 and set(daemons) == {"scheduler", "worker", "gateway"}
    leader = next(r["id"] for r in said["replicas"] if r["role"] == "leader")

    def leader_counts() -> Samples | None:
        samples = scrape(replicas[leader])
        wanted = (value(samples, "xce_jobs", queue="normal", state="RUN"),
                  value(samples, "xce_jobs", queue="normal", state="PEND"),
                  value(samples, "xce_hosts", status="HOST_OK"), value(samples, "xce_host_up", host="node1"))
        return samples if wanted == (1, 2, 1, 1) else None

    samples = wait_until(leader_counts, "the leader's job and host counts", timeout_s=60)
    pending = {labels: n for (name, labels), n in samples.items() if name == "xce_pending_jobs"}
    assert sum(pending.values()) == 2, pending
    assert all(dict(labels)["queue"] == "normal" for labels in pending), pending
    assert value(samples, "xce_leader") == 1 and value(samples, "xce_raft_term") >= 1
    assert value(samples, "xce_commit_latency_seconds_count") >= 3  # the submits at least
    assert value(samples, "xce_sync_streams") >= 2  # the scheduler's and the gateway's
    assert value(samples, "xce_applied_index") >= value(samples, "xce_commit_index") - 5
    follower = next(r for r in replicas if r != leader)
    assert value(scrape(replicas[follower]), "xce_leader") == 0

    sched = wait_until(lambda: (s := scrape(daemons["scheduler"])) and value(
        s, "xce_scheduler_decisions_total", kind="dispatch", outcome="accepted") >= 1 and s,
        "the scheduler's counted dispatch")
    assert value(sched, "xce_scheduler_lease_held") == 1
    assert value(sched, "xce_scheduler_pass_seconds_count") >= 1
    worker = wait_until(lambda: (s := scrape(daemons["worker"])) and value(
        s, "xce_worker_running_jobs") == 1 and s, "the worker's running job")
    assert value(worker, "xce_worker_connected") == 1
    served = scrape(daemons["gateway"])
    assert value(served, "xce_gateway_requests_total", method="POST", route="/xce/v1/jobs",
                 status="201") == 3
    assert value(served, "xce_gateway_request_duration_seconds_count", method="POST",
                 route="/xce/v1/jobs") == 3
    assert value(served, "xce_gateway_event_revision") > 0  # its hub follows the state
    for kind, every in (("replica", samples), ("scheduler", sched), ("worker", worker), ("gateway", served)):
        info = [labels for (name, labels), n in every.items() if name == "xce_build_info" and n == 1]
        assert len(info) == 1 and dict(info[0])["daemon"] == kind, info
        assert value(every, "process_cpu_seconds_total") > 0 and value(every, "process_open_fds") > 0


@pytest.mark.skipif(shutil.which("prometheus") is None,
                    reason="prometheus is not installed (scripts/install_prometheus.sh, the install step)")
def test_a_prometheus_server_scrapes_every_daemon(stack: LocalStack, tmp_path: Path) -> None:
    said = wait_until(lambda: (s := status(stack.cluster.data)) and len(s.get("daemons", [])) == 3 and s,
                      "the scheduler, the worker and the gateway in `xce status`")
    jobs = {"xce-replica": [r["metrics_address"] for r in said["replicas"]]}
    for daemon in said["daemons"]:
        jobs.setdefault(f"xce-{daemon['kind']}", []).append(daemon["metrics_address"])
    shutil.copy(RULES / "xce-alerts.yml", tmp_path / "xce-alerts.yml")
    config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
              "rule_files": ["xce-alerts.yml"],
              "scrape_configs": [{"job_name": job, "static_configs": [{"targets": targets}]}
                                 for job, targets in sorted(jobs.items())]}
    (tmp_path / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
    port = free_ports(1)[0]
    with open(tmp_path / "prometheus.log", "wb") as log:
        server = subprocess.Popen(
            ["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
             f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        def query(promql: str) -> list[dict[str, Any]] | None:
            if server.poll() is not None:
                log = (tmp_path / "prometheus.log").read_text()
                raise AssertionError(f"prometheus exited: {log[-2000:]}")
            url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
            try:
                with urllib.request.urlopen(url, timeout=10) as answer:
                    result: list[dict[str, Any]] = json.load(answer)["data"]["result"]
                    return result
            except OSError:
                return None  # not serving yet

        def every(promql: str, wanted: dict[str, float], key: str) -> bool:
            found = query(promql) or []
            return {r["metric"].get(key, ""): float(r["value"][1]) for r in found} == wanted

        wanted = {"xce-replica": 3.0, "xce-scheduler": 1.0, "xce-worker": 1.0, "xce-gateway": 1.0}
        wait_until(lambda: every("sum by (job) (up)", wanted, "job"), "every daemon up", timeout_s=60)
        assert every("sum(xce_leader)", {"": 1.0}, "")
        assert every('max by (state) (xce_jobs{queue="normal"})', {"RUN": 1.0, "PEND": 2.0}, "state")
        assert every("max by (host) (xce_host_up)", {"node1": 1.0}, "host")
        assert every("count by (daemon) (xce_build_info)",
                     {"replica": 3.0, "scheduler": 1.0, "worker": 1.0, "gateway": 1.0}, "daemon")
        assert every("sum(xce_scheduler_lease_held)", {"": 1.0}, "")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/rules", timeout=10) as answer:
            groups = json.load(answer)["data"]["groups"]
        assert sorted(rule["name"] for group in groups for rule in group["rules"]) == sorted(
            ("XceNoLeader", "XceLeaderFlapping", "XceCommitLatencyHigh", "XceReplicaBehind", "XceHostDown",
             "XceJobsPendingOnReason", "XceSchedulerLeaseLost", "XceDaemonDown"))
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


@pytest.mark.skipif(shutil.which("promtool") is None,
                    reason="promtool is not installed (Debian's prometheus: scripts/install_prometheus.sh)")
def test_the_alert_rules_pass_promtool_check_and_their_unit_tests() -> None:
    for args in (["check", "rules", "xce-alerts.yml"], ["test", "rules", "xce-alerts.test.yml"],
                 ["check", "config", "prometheus.yml"]):
        result = subprocess.run(["promtool", *args], cwd=RULES, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stdout + result.stderr
