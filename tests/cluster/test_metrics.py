"""Prometheus /metrics on every daemon: replicas, the scheduler, a worker and the gateway,
scraped from real processes while jobs run and wait."""

from __future__ import annotations

import urllib.request

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from ops.local_cluster import LocalGateway, LocalScheduler, LocalWorkers, free_ports
from tests.conftest import FAST_HOSTS, wait_until

pytestmark = pytest.mark.cluster


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def value(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), float("nan"))


def test_every_daemon_serves_its_metrics(make_cluster) -> None:  # type: ignore[no-untyped-def]
    cluster = make_cluster(extra_config=FAST_HOSTS, metrics=True)
    cluster.start()
    leader = cluster.leader()
    workers = LocalWorkers(cluster)
    worker_port, scheduler_port = free_ports(2)
    scheduler = LocalScheduler(cluster, metrics=f"127.0.0.1:{scheduler_port}")
    gateway = LocalGateway(cluster)
    try:
        workers.start("w1", 1, f'metrics = "127.0.0.1:{worker_port}"\n')
        scheduler.start()
        gateway.start()
        headers = {"Authorization": f"Bearer {cluster.admin_token}"}
        for name in ("a", "b", "c"):
            answer = httpx.post(gateway.url + "/xce/v1/jobs", headers=headers, timeout=30,
                                json={"command": ["sleep", "60"], "name": name, "cwd": "/tmp"})
            assert answer.status_code == 201, answer.text
        replicas = {r.id: f"http://{r.metrics}/metrics" for r in cluster.config.replicas}

        def leader_counts() -> dict[tuple[str, tuple[tuple[str, str], ...]], float] | None:
            samples = scrape(replicas[leader])
            wanted = (value(samples, "xce_jobs", state="RUN"), value(samples, "xce_jobs", state="PEND"),
                      value(samples, "xce_queue_jobs", queue="normal"),
                      value(samples, "xce_hosts", status="HOST_OK"))
            return samples if wanted == (1, 2, 3, 1) else None

        samples = wait_until(leader_counts, "the leader's job and host counts", timeout_s=60)
        assert value(samples, "xce_leader") == 1 and value(samples, "xce_raft_term") >= 1
        assert value(samples, "xce_commit_latency_seconds_count") >= 3  # the submits at least
        assert value(samples, "xce_sync_streams") >= 2  # the scheduler's and the gateway's
        assert value(samples, "xce_applied_index") >= value(samples, "xce_commit_index") - 5
        follower = next(r for r in replicas if r != leader)
        assert value(scrape(replicas[follower]), "xce_leader") == 0

        sched = wait_until(lambda: (s := scrape(f"http://127.0.0.1:{scheduler_port}/metrics")) and value(
            s, "xce_scheduler_decisions_total", kind="dispatch", outcome="accepted") >= 1 and s,
            "the scheduler's counted dispatch")
        assert value(sched, "xce_scheduler_lease_held") == 1
        assert value(sched, "xce_scheduler_pass_seconds_count") >= 1
        worker = wait_until(lambda: (s := scrape(f"http://127.0.0.1:{worker_port}/metrics")) and value(
            s, "xce_worker_running_jobs") == 1 and s, "the worker's running job")
        assert value(worker, "xce_worker_connected") == 1
        served = scrape(gateway.url + "/metrics")
        assert value(served, "xce_gateway_requests_total", method="POST", route="/xce/v1/jobs",
                     status="201") == 3
        assert value(served, "xce_gateway_event_revision") > 0  # its hub follows the state
    finally:
        gateway.kill()
        scheduler.kill()
        workers.stop()
