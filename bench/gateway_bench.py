"""The gateway's figures: submits per second through REST, the event stream's lag from
commit to client at 1,000 job changes per second, and the gateway's memory with 100 event clients.

A local three-replica cluster (no workers: submitted jobs stay pending, so every change is a submit
the bench paces) and one `xce gateway`, real processes on loopback. Reports, never asserts.

`.venv/bin/python bench/gateway_bench.py [--seconds 10] [--threads 8] [--rate 1000] [--clients 100]`;
part of `make bench`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ops.local_cluster import LocalCluster, LocalGateway  # noqa: E402
from xce.v1 import api_pb2 as api  # noqa: E402

V1 = "/xce/v1"


def run(seconds: float = 10.0, threads: int = 8, rate: int = 1000, clients: int = 100) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="xce-gateway-bench-") as tmp:
        cluster = LocalCluster(Path(tmp) / "cluster")
        gateway = LocalGateway(cluster)
        try:
            cluster.start()
            cluster.leader()
            gateway.start()
            key = cluster.admin_token
            out: dict[str, Any] = {"seconds": seconds, "threads": threads}
            out["rest"] = submits_rest(gateway, key, threads, seconds)
            out["grpc"] = submits_grpc(cluster, threads, seconds)
            out["rest_vs_grpc"] = round(out["rest"]["per_s"] / out["grpc"]["per_s"], 2) \
                if out["grpc"]["per_s"] else None
            out["lag"] = event_lag(gateway, key, rate, seconds)
            out["memory"] = memory(gateway, key, clients)
            return out
        finally:
            gateway.kill()
            cluster.stop()


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1) if ordered else 0.0


def submits_rest(gateway: LocalGateway, key: str, threads: int, seconds: float) -> dict[str, Any]:
    """Single-job POST /xce/v1/jobs from `threads` clients, each waiting for its answer."""
    done: list[float] = []
    failed = [0]
    deadline = time.monotonic() + seconds

    def client() -> None:
        with httpx.Client(base_url=gateway.url + V1, headers={"Authorization": f"Bearer {key}"},
                          timeout=30) as http:
            while time.monotonic() < deadline:
                began = time.monotonic()
                answer = http.post("/jobs", json={"command": ["true"]})
                if answer.status_code == 201:
                    done.append((time.monotonic() - began) * 1000)
                else:
                    failed[0] += 1

    _together(client, threads)
    return {"per_s": round(len(done) / seconds, 1), "p50_ms": _percentile(done, 0.5),
            "p99_ms": _percentile(done, 0.99), "failed": failed[0]}


def submits_grpc(cluster: LocalCluster, threads: int, seconds: float) -> dict[str, Any]:
    """The same through the client library (gRPC straight to the leader), for the ratio."""
    done: list[float] = []
    deadline = time.monotonic() + seconds

    def client() -> None:
        with cluster.client() as grpc_client:
            while time.monotonic() < deadline:
                began = time.monotonic()
                grpc_client.submit([api.JobSpec(command=["true"])])
                done.append((time.monotonic() - began) * 1000)

    _together(client, threads)
    return {"per_s": round(len(done) / seconds, 1), "p50_ms": _percentile(done, 0.5),
            "p99_ms": _percentile(done, 0.99)}


def _together(work: Any, count: int) -> None:
    workers = [threading.Thread(target=work, daemon=True) for _ in range(count)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


class Follower:
    """An SSE client that notes, for each job.created, how long after its commit it arrived (the
    job's submit time is the leader's stamp of the entry, on this machine's clock)."""

    def __init__(self, gateway: LocalGateway, key: str, since: str) -> None:
        self.lags_ms: list[float] = []
        self.events = 0
        self.stop = threading.Event()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(gateway, key, since), daemon=True)
        self.thread.start()

    def _run(self, gateway: LocalGateway, key: str, since: str) -> None:
        headers = {"Authorization": f"Bearer {key}", "Last-Event-ID": since}
        try:
            with httpx.Client(timeout=httpx.Timeout(10, read=60)) as http, \
                    http.stream("GET", gateway.url + V1 + "/events", headers=headers) as answer:
                self.ready.set()
                kind = ""
                for line in answer.iter_lines():
                    if self.stop.is_set():
                        return
                    if line.startswith("event: "):
                        kind = line[7:]
                    elif line.startswith("data: ") and kind == "job.created":
                        self.events += 1
                        submitted = int(json.loads(line[6:])["job"]["submit_time_ms"])
                        self.lags_ms.append(time.time() * 1000 - submitted)
        except httpx.HTTPError:
            self.ready.set()  # the gateway went away (the bench's end): what was read is kept


def event_lag(gateway: LocalGateway, key: str, rate: int, seconds: float) -> dict[str, Any]:
    """Jobs submitted in batches of 50 paced to `rate` a second; each is one job.created."""
    admin = httpx.Client(base_url=gateway.url + V1, headers={"Authorization": f"Bearer {key}"}, timeout=30)
    since = admin.get("/jobs", params={"page_size": 1}).json()["revision"]
    follower = Follower(gateway, key, since)
    follower.ready.wait(30)
    batch, sent = 50, 0
    began = time.monotonic()
    while time.monotonic() - began < seconds:
        due = began + sent / rate
        if time.monotonic() < due:
            time.sleep(due - time.monotonic())
        admin.post("/jobs", json={"jobs": [{"command": ["true"]}] * batch})
        sent += batch
    offered = sent / (time.monotonic() - began)
    deadline = time.monotonic() + 30
    while follower.events < sent and time.monotonic() < deadline:
        time.sleep(0.05)
    follower.stop.set()
    admin.close()
    lags = follower.lags_ms
    return {"changes_per_s": round(offered), "received": follower.events, "sent": sent,
            "p50_ms": _percentile(lags, 0.5), "p99_ms": _percentile(lags, 0.99),
            "mean_ms": round(statistics.fmean(lags), 1) if lags else None}


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def memory(gateway: LocalGateway, key: str, clients: int) -> dict[str, Any]:
    """The gateway's resident memory idle, then with `clients` event streams open while 1,000 jobs
    are submitted and sent to every one of them."""
    assert gateway.proc is not None
    pid = gateway.proc.pid
    admin = httpx.Client(base_url=gateway.url + V1, headers={"Authorization": f"Bearer {key}"}, timeout=30)
    since = admin.get("/jobs", params={"page_size": 1}).json()["revision"]
    idle = _rss_mb(pid)
    followers = [Follower(gateway, key, since) for _ in range(clients)]
    for follower in followers:
        follower.ready.wait(30)
    for _ in range(20):
        admin.post("/jobs", json={"jobs": [{"command": ["true"]}] * 50})
    deadline = time.monotonic() + 60
    while min(f.events for f in followers) < 1000 and time.monotonic() < deadline:
        time.sleep(0.1)
    loaded = _rss_mb(pid)
    delivered = sum(f.events for f in followers)
    for follower in followers:
        follower.stop.set()
    admin.close()
    return {"clients": clients, "idle_rss_mb": idle, "rss_mb": loaded,
            "per_client_kb": round((loaded - idle) * 1024 / clients, 1), "events_delivered": delivered}


def summary(figures: dict[str, Any]) -> str:
    rest, grpc, lag, mem = figures["rest"], figures["grpc"], figures["lag"], figures["memory"]
    return (f"gateway: {rest['per_s']} submits/s through REST ({figures['threads']} clients, p50 "
            f"{rest['p50_ms']} ms, p99 {rest['p99_ms']} ms) vs {grpc['per_s']}/s over gRPC "
            f"(x{figures['rest_vs_grpc']}); SSE lag commit -> client at {lag['changes_per_s']} changes/s: "
            f"p50 {lag['p50_ms']} ms, p99 {lag['p99_ms']} ms ({lag['received']}/{lag['sent']} received); "
            f"{mem['clients']} SSE clients: RSS {mem['idle_rss_mb']} -> {mem['rss_mb']} MB "
            f"({mem['per_client_kb']} KB each)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=100)
    args = parser.parse_args()
    figures = run(args.seconds, args.threads, args.rate, args.clients)
    print(summary(figures))
    print(json.dumps(figures, separators=(",", ":")))


if __name__ == "__main__":
    main()
