"""MUNGE: a real munged of the test's own proves the caller's uid; nothing else is believed."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from conftest import NOBODY, nobody_cli_env, run_munged, xce_as_nobody

from ops.local_cluster import LocalCluster
from xce.v1 import api_pb2 as api

pytestmark = [pytest.mark.cluster,
              pytest.mark.skipif(shutil.which("munged") is None,
                                 reason="munge is not installed (scripts/install_munge.sh, part of the "
                                 "install step, needs root and apt-get)"),
              pytest.mark.skipif(os.geteuid() != 0, reason="a credential of another uid needs root to start")]



@pytest.fixture
def munged() -> Iterator[Path]:
    with run_munged() as socket:
        yield socket


def _credential(socket: Path, uid: int = NOBODY.pw_uid, gid: int = NOBODY.pw_gid) -> str:
    done = subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "munge", "-n",
                           "-S", str(socket)], capture_output=True, text=True, timeout=30, check=True)
    return done.stdout.strip()


def _who(cluster: LocalCluster, metadata: tuple[tuple[str, str], ...]) -> api.WhoAmIResponse | grpc.RpcError:
    with cluster.credentials_for(None).channel(cluster.address(cluster.leader())) as channel:
        stub = channel.unary_unary("/xce.v1.AdminService/WhoAmI",
                                   request_serializer=api.WhoAmIRequest.SerializeToString,
                                   response_deserializer=api.WhoAmIResponse.FromString)
        try:
            return stub(api.WhoAmIRequest(), timeout=10, metadata=metadata)  # type: ignore[no-any-return]
        except grpc.RpcError as exc:
            return exc


def test_munge_proves_the_uid_once_and_a_replay_is_refused(make_cluster, munged: Path) -> None:  # type: ignore[no-untyped-def]
    cluster = make_cluster(extra_config=f'\n[auth]\nmunge = true\nmunge_socket = "{munged}"\n')
    cluster.start()
    credential = _credential(munged)
    answer = _who(cluster, (("x-xce-munge", credential),))
    assert isinstance(answer, api.WhoAmIResponse), answer
    assert (answer.name, answer.role, answer.via) == ("nobody", "user", "munge")
    replayed = _who(cluster, (("x-xce-munge", credential),))
    assert isinstance(replayed, grpc.RpcError) and replayed.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "replayed" in (replayed.details() or "").lower()
    forged = _who(cluster, (("x-xce-munge", credential[:-8] + "AAAAAAA:"),))
    assert isinstance(forged, grpc.RpcError) and forged.code() == grpc.StatusCode.UNAUTHENTICATED


def test_the_cli_as_nobody_submits_with_munge_and_owns_the_job(make_cluster, munged: Path,  # type: ignore[no-untyped-def]
                                                                reachable_by_nobody: None) -> None:
    cluster = make_cluster(extra_config=f'\n[auth]\nmunge = true\nmunge_socket = "{munged}"\n')
    cluster.start()
    cluster.leader()
    files = Path(tempfile.mkdtemp(prefix="xce-munge-cli-", dir="/tmp"))
    try:
        files.chmod(0o755)
        env = {**nobody_cli_env(cluster, files), "USER": "root", "XCE_MUNGE": "1",
               "XCE_MUNGE_SOCKET": str(munged)}
        done = xce_as_nobody(["submit", "--cwd", "/tmp", "--", "true"], env, files)
        assert done.returncode == 0, done.stderr
    finally:
        shutil.rmtree(files, ignore_errors=True)
    with cluster.client() as client:
        assert [j.spec.user for j in client.list_jobs()] == ["nobody"]


def test_a_payload_that_looks_like_metadata_proves_nothing(  # type: ignore[no-untyped-def]
        make_cluster, munged: Path) -> None:
    """unmunge prints the sender's payload after the metadata: a payload "UID: root (0)" must not
    pass for the credential's uid."""
    cluster = make_cluster(extra_config=f'\n[auth]\nmunge = true\nmunge_socket = "{munged}"\n'
                                        'munge_roles = { root = "cluster_admin" }\n')
    cluster.start()
    forged = subprocess.run(["setpriv", f"--reuid={NOBODY.pw_uid}", f"--regid={NOBODY.pw_gid}",
                             "--clear-groups", "munge", "-S", str(munged)],
                            input="\nSTATUS: Success (0)\nUID: root (0)\n", capture_output=True, text=True,
                            timeout=30, check=True).stdout.strip()
    answer = _who(cluster, (("x-xce-munge", forged),))
    assert isinstance(answer, grpc.RpcError) and answer.code() == grpc.StatusCode.UNAUTHENTICATED, answer
