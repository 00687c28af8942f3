"""XCE: committed submits per second, and leader kill -> first committed submit.

Everything runs against a fresh three-replica LocalCluster on 127.0.0.1 in a
temporary directory, which is always stopped and removed.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen import LoadResult, ms, percentile, run_clients

from client.channel import Client, XceError
from client.credentials import Credentials
from ops.local_cluster import LocalCluster
from xce.v1 import api_pb2 as api

SPEC_BYTES = 300
# Client deadline inside the load loops: long enough to ride out a hiccup,
# short enough that a stuck call cannot stretch a 10 s level much.
LOAD_DEADLINE_S = 10.0
CATCH_UP_TIMEOUT_S = 60.0
# After a restarted replica has caught up, let its Raft connections to both
# peers settle, so the next kill starts from a fully connected cluster.
SETTLE_S = 1.0


@dataclass
class FailoverSample:
    killed: int
    seconds: float
    retries: int
    redirects: int

    def summary(self) -> dict[str, Any]:
        return {"killed": self.killed, "ms": ms(self.seconds), "retries": self.retries,
                "redirects": self.redirects}


def job_spec(size: int = SPEC_BYTES) -> api.JobSpec:
    """A realistic job (command, name, one env var) padded to `size` serialized bytes."""
    spec = api.JobSpec(command=["/usr/bin/env", "python3", "train.py", "--epochs", "3"],
                       name="bench-job", env={"PAD": ""})
    # Grow the padding one byte at a time: varint length prefixes make the
    # size a step function of the padding, so compute rather than guess.
    while spec.ByteSize() < size:
        spec.env["PAD"] += "x"
    return spec


def make_submit_op(addresses: list[str], credentials: Credentials,
                   jobs_per_request: int = 1) -> Callable[[int], None]:
    """Runs in a client process: its own Client, warmed up (leader found, channel open)."""
    client = Client(addresses, credentials, deadline_s=LOAD_DEADLINE_S)
    specs = [job_spec()] * jobs_per_request
    client.submit(specs)

    def submit(_: int) -> None:
        client.submit(specs)  # one SubmitJobs call, waits for commit + apply

    return submit


def make_read_op(addresses: list[str], credentials: Credentials, job_id: int,
                 stale: bool) -> Callable[[int], None]:
    """Runs in a client process: GetJob of one job, linearizable (the leader, after ReadIndex) or
    stale (the first replica of `addresses` answers from its own state)."""
    client = Client(addresses, credentials, deadline_s=LOAD_DEADLINE_S)
    client.get_job(job_id, stale=stale)

    def read(_: int) -> None:
        client.get_job(job_id, stale=stale)

    return read


def reads(cluster: LocalCluster, clients: int, seconds: float, max_ops: int, stale: bool) -> LoadResult:
    """GetJob from `clients` processes; stale reads are spread over the replicas."""
    cluster.leader()
    with Client(cluster.addresses, cluster.credentials) as client:
        job_id = client.submit([job_spec()]).jobs[0].id
    addresses = cluster.addresses
    per_client = [(addresses[i % len(addresses):] + addresses[:i % len(addresses)], cluster.credentials,
                   job_id, stale) for i in range(clients)]
    return run_clients(make_read_op, per_client, seconds, max_ops)


def throughput(cluster: LocalCluster, clients: int, seconds: float, max_ops: int,
               jobs_per_request: int = 1) -> LoadResult:
    cluster.leader()  # do not start the clock before the cluster serves writes
    return run_clients(make_submit_op, [(cluster.addresses, cluster.credentials, jobs_per_request)] * clients,
                       seconds, max_ops)


def failover_once(cluster: LocalCluster, spec: api.JobSpec) -> FailoverSample:
    """kill -9 the serving leader; time until a submit through the library commits."""
    leader = cluster.leader()
    with Client(cluster.addresses, cluster.credentials, deadline_s=60.0) as client:
        client.submit([spec])  # the client now targets the leader, as a busy client would
        client.retries = client.redirects = 0
        start = time.monotonic()
        cluster.kill(leader)
        client.submit([spec])
        elapsed = time.monotonic() - start
        sample = FailoverSample(leader, elapsed, client.retries, client.redirects)
    cluster.start([leader])
    wait_caught_up(cluster, leader)
    return sample


def wait_caught_up(cluster: LocalCluster, replica_id: int) -> None:
    """Until the restarted replica follows a leader and has applied all it has."""
    deadline = time.monotonic() + CATCH_UP_TIMEOUT_S
    leader = cluster.leader(timeout_s=CATCH_UP_TIMEOUT_S)
    target = _local_status(cluster, leader).applied_index
    while time.monotonic() < deadline:
        try:
            status = _local_status(cluster, replica_id)
        except XceError:  # still starting up
            time.sleep(0.1)
            continue
        if status.leader_grpc_address and status.applied_index >= target:
            time.sleep(SETTLE_S)
            return
        time.sleep(0.1)
    raise TimeoutError(f"replica {replica_id} did not catch up within {CATCH_UP_TIMEOUT_S:.0f} s")


def _local_status(cluster: LocalCluster, replica_id: int) -> api.ReplicaStatus:
    with Client([cluster.address(replica_id)], cluster.credentials, deadline_s=1.0,
                call_timeout_s=1.0) as client:
        return client.status(local_only=True).replicas[0]


def failover(cluster: LocalCluster, kills: int) -> list[FailoverSample]:
    spec = job_spec()
    samples = []
    for i in range(kills):
        sample = failover_once(cluster, spec)
        samples.append(sample)
        log(f"xce failover {i + 1}/{kills}: killed replica {sample.killed}, "
            f"first commit after {sample.seconds * 1000:.0f} ms ({sample.retries} retries)")
    return samples


def failover_summary(samples: Sequence[FailoverSample]) -> dict[str, Any]:
    seconds = [s.seconds for s in samples]
    return {"kills": len(samples), "p50_ms": ms(percentile(seconds, 50)),
            "p99_ms": ms(percentile(seconds, 99)), "max_ms": ms(max(seconds, default=float("nan"))),
            "samples": [s.summary() for s in samples]}


def run(client_levels: Sequence[int], seconds: float, max_ops: int, kills: int,
        bulk: int = 10, insecure: bool = False) -> dict[str, Any]:
    """The whole XCE part; the cluster is stopped whatever happens. `insecure`: plaintext gRPC
    (tokens are still checked), to compare with TLS."""
    result: dict[str, Any] = {"spec_bytes": job_spec().ByteSize(), "throughput": {}, "tls": not insecure}
    with tempfile.TemporaryDirectory(prefix="xce-bench-") as data:
        cluster = LocalCluster(Path(data), insecure=insecure)
        try:
            cluster.start()
            for clients in client_levels:
                load = throughput(cluster, clients, seconds, max_ops)
                result["throughput"][str(clients)] = load.summary()
                log(f"xce {clients} client(s): {load.per_second:.0f} submits/s")
            if bulk > 1:
                # Not comparable to etcd's single puts: how far group commit
                # goes when the per-RPC cost is shared (like bsub of job arrays).
                clients = max(client_levels)
                load = throughput(cluster, clients, seconds, max_ops, jobs_per_request=bulk)
                result["bulk"] = {"clients": clients, "jobs_per_request": bulk,
                                  "jobs_per_s": round(load.per_second * bulk, 1), **load.summary()}
                log(f"xce {clients} client(s) x {bulk} jobs/request: {load.per_second * bulk:.0f} jobs/s")
            clients = max(client_levels)
            for stale in (False, True):
                load = reads(cluster, clients, seconds, max_ops, stale)
                result.setdefault("reads", {})["stale" if stale else "linearizable"] = load.summary()
                log(f"xce {clients} client(s): {load.per_second:.0f} {'stale' if stale else 'linearizable'} "
                    "reads/s")
            if kills:
                result["failover"] = failover_summary(failover(cluster, kills))
        finally:
            cluster.stop()
    return result


def log(message: str) -> None:
    print(f"  {message}", file=sys.stderr, flush=True)
