"""`xce snapshot save` and `status` (controller/backup.py) on a real cluster: a backup holds every write
acknowledged before it, only admins may take one, and a damaged file is refused by name."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from controller.backup import TRAILER_BYTES, verify
from controller.store import StateStore, StoreError
from xce.cli import main
from xce.client import Client, XceError
from xce.local_cluster import LocalCluster
from xce.v1 import api_pb2 as api

pytestmark = pytest.mark.cluster


def _state_of(backup_file: Path, into: Path, cluster_id: str) -> StateStore:
    """The backup's state, opened as a replica would open it."""
    header, offset = StateStore.read_snapshot_header(backup_file)
    (into / "state").mkdir(parents=True)
    with open(backup_file, "rb") as src, open(into / "state" / "data.mdb", "wb") as dst:
        src.seek(offset)
        shutil.copyfileobj(src, dst)
        dst.truncate(backup_file.stat().st_size - offset - TRAILER_BYTES)
    return StateStore(into / "state", cluster_id)


def test_a_snapshot_holds_every_acknowledged_write(cluster: LocalCluster, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    with cluster.client() as client:
        submitted = client.submit([api.JobSpec(command=["true"], name=f"b{i}", cwd="/tmp")
                                   for i in range(50)])
    # Through a follower: it is referred to the leader, whose read barrier puts every write above in.
    leader = cluster.leader()
    follower = next(r for r in cluster.procs if r != leader)
    monkeypatch.setenv("XCE_CLUSTER", str(cluster.config_path))
    monkeypatch.setenv("XCE_TOKEN", cluster.admin_token)
    out = tmp_path / "backup.xce"
    assert main(["--controllers", cluster.address(follower), "snapshot", "save", str(out)]) == 0
    assert "SHA-256 checked" in capsys.readouterr().out
    assert out.stat().st_mode & 0o777 == 0o600  # every job's environment, the token hashes
    saved = verify(out)
    assert saved.cluster_id == cluster.config.cluster_id and saved.revision >= submitted.revision
    store = _state_of(out, tmp_path / "restored", cluster.config.cluster_id)
    try:
        with store.read() as tables:
            names = {api.Job.FromString(raw).spec.name for _, raw in tables.scan("jobs")}
        assert {f"b{i}" for i in range(50)} <= names
        assert store.meta().applied_index == saved.revision
    finally:
        store.close()
    assert main(["snapshot", "status", str(out)]) == 0
    assert f"at revision {saved.revision}" in capsys.readouterr().out
    # A second save never replaces the first.
    assert main(["--controllers", cluster.address(leader), "snapshot", "save", str(out)]) == 2
    assert "exists" in capsys.readouterr().err


def test_only_cluster_admins_may_take_one(cluster: LocalCluster, tmp_path: Path) -> None:
    operator = cluster.new_user("olga", role="operator")
    with Client(cluster.addresses, operator) as client, open(tmp_path / "x", "wb") as out, \
            pytest.raises(XceError) as refused:
        client.save_snapshot(out)
    assert refused.value.code.name == "PERMISSION_DENIED" and "cluster.backup" in refused.value.message
    assert (tmp_path / "x").stat().st_size == 0


def test_a_damaged_file_is_refused_by_name(cluster: LocalCluster, tmp_path: Path) -> None:
    good = tmp_path / "good.xce"
    with cluster.client() as client, open(good, "wb") as out:
        header, sha256 = client.save_snapshot(out)
        out.write(b"\nXCE-BACKUP-SHA256:" + sha256)
    verify(good)
    flipped = tmp_path / "flipped.xce"
    data = bytearray(good.read_bytes())
    data[len(data) // 2] ^= 0x01
    flipped.write_bytes(bytes(data))
    with pytest.raises(StoreError, match="corrupt: its SHA-256 does not match"):
        verify(flipped)
    cut = tmp_path / "cut.xce"
    cut.write_bytes(good.read_bytes()[: header.size // 2])
    with pytest.raises(StoreError, match="no checksum trailer"):
        verify(cut)
    foreign = tmp_path / "foreign.xce"
    foreign.write_bytes(b"x" * 100)
    with pytest.raises(StoreError, match="not an XCE backup"):
        verify(foreign)
