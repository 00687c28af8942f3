"""A replica's files are its own: another local user can neither read the state nor the log.

The state holds every job's command and environment (tokens, passwords in
env); the Raft log holds the same entries. Tried as a real unprivileged uid
(`nobody`), not only by looking at mode bits.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ops.local_cluster import LocalCluster
from xce.v1 import api_pb2 as api

pytestmark = pytest.mark.cluster


def test_replica_directories_are_private(cluster: LocalCluster) -> None:
    with cluster.client() as client:
        client.submit([api.JobSpec(command=["true"], env={"TOKEN": "s3cret-token"})])
    for replica in cluster.config.replicas:
        directory = cluster.config.replica_dir(replica.id)
        assert directory.stat().st_mode & 0o777 == 0o700, directory


@pytest.fixture
def open_cluster() -> Iterator[LocalCluster]:
    """A cluster whose data directory others may traverse, as an operator's /var/lib/xce is:
    pytest's own temporary directories are private, which would hide the replica's modes."""
    base = Path(tempfile.mkdtemp(prefix="xce-files-", dir="/tmp"))
    base.chmod(0o755)
    cluster = LocalCluster(base / "c", 3)
    cluster.data.chmod(0o755)
    cluster.config.data_dir.chmod(0o755)
    try:
        cluster.start()
        cluster.leader()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
def test_an_unprivileged_user_cannot_read_a_replica_s_files(open_cluster: LocalCluster) -> None:
    cluster = open_cluster
    with cluster.client() as client:
        client.submit([api.JobSpec(command=["true"], env={"TOKEN": "s3cret-token"})])
    directory = cluster.config.replica_dir(cluster.leader())
    for target in (directory / "state" / "data.mdb", directory / "wal" / "data.mdb"):
        assert target.exists()
        attempt = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                                  "grep", "-c", "s3cret-token", str(target)],
                                 capture_output=True, text=True, timeout=30)
        assert attempt.returncode == 2 and "Permission denied" in attempt.stderr, attempt
