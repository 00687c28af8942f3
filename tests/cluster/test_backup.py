"""`xce snapshot save` and `status` (controller/backup.py) on a real cluster: a backup holds every write
acknowledged before it, only admins may take one, and a damaged file is refused by name."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cli.main import main
from client.channel import Client, XceError
from controller.backup import TRAILER_BYTES, verify
from controller.store import StateStore, StoreError
from ops.local_cluster import LocalCluster, write_config
from tests.conftest import Submitting, wait_converged, wait_until, xce_cli
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


def test_a_damaged_file_is_refused_by_name(cluster: LocalCluster, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
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
    # A restore checks the same way, and writes nothing when it refuses.
    config = tmp_path / "new" / "cluster.toml"
    write_config(config.parent, cluster_id="new")
    for bad, words in ((flipped, "corrupt"), (cut, "no checksum trailer"), (foreign, "not an XCE backup")):
        assert main(["snapshot", "restore", str(bad), "--config", str(config), "--id", "1"]) == 1
        assert words in capsys.readouterr().err
    assert main(["snapshot", "restore", str(good), "--config", str(config), "--id", "1", "--keep-id"]) == 1
    assert "is a backup of cluster 'local'" in capsys.readouterr().err
    same = tmp_path / "same" / "cluster.toml"
    write_config(same.parent, cluster_id="local")
    assert main(["snapshot", "restore", str(good), "--config", str(same), "--id", "1"]) == 1
    assert "give it a new cluster_id" in capsys.readouterr().err
    assert not (config.parent / "replica-1").exists() and not (same.parent / "replica-1").exists()
    (config.parent / "replica-1").mkdir()
    (config.parent / "replica-1" / "in-use").write_text("x")
    assert main(["snapshot", "restore", str(good), "--config", str(config), "--id", "1"]) == 1
    assert "never writes over" in capsys.readouterr().err
    assert sorted(p.name for p in (config.parent / "replica-1").iterdir()) == ["in-use"]


def test_a_restore_under_load_holds_exactly_what_was_acknowledged_before_the_save(  # type: ignore[no-untyped-def]
        make_cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old: LocalCluster = make_cluster()
    old.start()
    old.leader()
    saved_file = tmp_path / "backup.xce"
    with Submitting(old) as load:
        wait_until(lambda: load.count() >= 30, "submits before the save")
        xce_cli(old, "snapshot", "save", str(saved_file))
        after_save = load.count()
        wait_until(lambda: load.count() >= after_save + 30, "submits after the save")
    assert not load.errors
    saved = verify(saved_file)
    new: LocalCluster = make_cluster(name="restored", cluster_id="restored")
    for replica_id in (1, 2, 3):
        assert main(["snapshot", "restore", str(saved_file), "--config", str(new.config_path), "--id",
                     str(replica_id)]) == 0
        assert f"restored at revision {saved.revision}" in capsys.readouterr().out
    new.start()
    new.leader()
    with new.client() as client:
        jobs = {j.request_id: j.id for j in client.list_jobs()}
        status = client.status()
    before = {rid for rid, revision in load.revisions.items() if revision <= saved.revision}
    later = {rid for rid, revision in load.revisions.items() if revision > saved.revision}
    assert before and later
    assert all(jobs.get(rid) == load.acked[rid][0] for rid in before)  # every one, with its id
    assert not later & jobs.keys()  # and nothing after the save
    assert status.cluster_id == "restored"
    wait_converged(new)  # (a follower may still be applying what the leader answered)
    assert {m.grpc_address for m in status.members} == set(new.addresses)
    # The new cluster takes writes, from where the backup stopped.
    with new.client() as client:
        response = client.submit([api.JobSpec(command=["true"], cwd="/tmp")])
    assert response.revision > saved.revision and response.jobs[0].id > max(jobs.values())
