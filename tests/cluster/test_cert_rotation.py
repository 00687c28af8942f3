"""Certificate rotation without stopping the cluster (docs/SECURITY.md, "Rotating certificates"): renewed
certificates of the same CA, then a new CA (both trusted, every certificate reissued, the old CA
dropped). Replicas take up new files at their next handshake, clients and daemons at their next
connection; the replicas that were not restarted keep their PIDs."""

from __future__ import annotations

import shutil
import socket
import ssl
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from client.channel import Client, XceError
from client.credentials import Credentials
from ops.local_cluster import LocalCluster, LocalScheduler, LocalWorkers
from tests.conftest import wait_until
from xce import pki
from xce.private import write_private
from xce.v1 import api_pb2 as api

pytestmark = pytest.mark.cluster


def _served(address: str, tls: Path) -> bytes:
    """The certificate a replica presents to a new connection (DER)."""
    context = ssl.create_default_context(cafile=str(tls / "ca.crt"))
    context.check_hostname = False
    context.load_cert_chain(str(tls / "client-xce.crt"), str(tls / "client-xce.key"))
    context.set_alpn_protocols(["h2"])
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as raw, \
            context.wrap_socket(raw, server_hostname=host) as conn:
        der = conn.getpeercert(binary_form=True)
    assert der is not None
    return der


def _der(path: Path) -> bytes:
    return x509.load_pem_x509_certificate(path.read_bytes()).public_bytes(Encoding.DER)


def _job_runs(cluster: LocalCluster) -> None:
    with cluster.client() as client:
        job = client.submit([api.JobSpec(command=["true"], cwd="/tmp")]).jobs[0]
        wait_until(lambda: client.get_job(str(job.id)).state == api.DONE, "a job to run")


def test_renewed_certificates_and_a_new_ca_are_taken_up_without_a_restart(  # type: ignore[no-untyped-def]
        make_fleet, tmp_path: Path) -> None:
    cluster: LocalCluster
    workers: LocalWorkers
    cluster, workers = make_fleet()
    scheduler = LocalScheduler(cluster)
    scheduler.start()
    try:
        workers.start("w1", 2)
        _job_runs(cluster)
        tls = cluster.data / "tls"
        pids = {r: proc.pid for r, proc in cluster.procs.items()}

        # Renewed certificates, same CA: the next handshake presents them.
        for replica_id in (1, 2, 3):
            before = _served(cluster.address(replica_id), tls)
            pki.issue(tls, "replica", str(replica_id), sans=["127.0.0.1", "localhost"])
            assert _der(tls / f"replica-{replica_id}.crt") != before
            wait_until(lambda: _served(cluster.address(replica_id), tls)  # noqa: B023
                       == _der(tls / f"replica-{replica_id}.crt"),  # noqa: B023
                       f"replica {replica_id} to present its renewed certificate")
        _job_runs(cluster)

        # A new CA: trusted beside the old one, every certificate reissued from it, the old one dropped.
        old_client = tmp_path / "old-client"
        old_client.mkdir()
        for name in ("client-xce.crt", "client-xce.key"):
            shutil.copy(tls / name, old_client / name)
        new_ca = tmp_path / "ca2"
        pki.init_ca(new_ca, "local")
        old_ca_pem = (tls / "ca.crt").read_bytes()
        write_private(tls / "ca.crt", old_ca_pem + (new_ca / "ca.crt").read_bytes(), mode=0o644)  # atomic
        for role, name, sans in [*(("replica", str(r), ["127.0.0.1", "localhost"]) for r in (1, 2, 3)),
                                 ("client", "xce", []), ("scheduler", "sched-1", []), ("worker", "w1", [])]:
            pki.issue(new_ca, role, name, sans=sans, out=tls)
        write_private(tls / "ca.crt", (new_ca / "ca.crt").read_bytes(), mode=0o644)
        for replica_id in (1, 2, 3):
            wait_until(lambda: _served(cluster.address(replica_id), tls)  # noqa: B023
                       == _der(tls / f"replica-{replica_id}.crt"),  # noqa: B023
                       f"replica {replica_id} to present its certificate of the new CA")
        with cluster.client() as client:  # the new client certificate, the new CA only
            client.status()
        old = old_client / "client-xce"
        stale = Credentials(ca=(tls / "ca.crt").read_bytes(), cert=Path(f"{old}.crt").read_bytes(),
                            key=Path(f"{old}.key").read_bytes(),
                            token=cluster.admin_token)
        with Client(cluster.addresses, stale, deadline_s=2) as client, pytest.raises(XceError) as refused:
            client.status()
        assert refused.value.code == grpc.StatusCode.UNAVAILABLE  # the old CA's certificate: no handshake

        # Daemons connect again with their new files: the leader's streams break, and the worker and the
        # scheduler follow the new leader presenting certificates of the new CA.
        leader = cluster.leader()
        cluster.kill(leader)
        cluster.leader(exclude=leader)
        _job_runs(cluster)
        cluster.start([leader])
        assert all(cluster.procs[r].pid == pid for r, pid in pids.items() if r != leader)
    finally:
        scheduler.kill()
