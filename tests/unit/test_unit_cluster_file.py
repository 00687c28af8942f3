"""client/cluster_file.py's cached reads of the cluster file: the same table as parsing it, a change to
the file is seen at once, and a cache this user did not write alone is ignored."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from client import cluster_file


def write(path: Path, text: str, age_s: float = 60.0) -> None:
    """The file as an operator's edit left it a while ago (a file changed within the last
    seconds is parsed every time: cluster_file.RACY_S)."""
    path.write_text(text)
    then = time.time() - age_s
    os.utime(path, (then, then))


TOML = '[[replicas]]\nid = 1\ngrpc = "127.0.0.1:7001"\n\n[tls]\nca = "tls/ca.crt"\n'


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(cluster_file, "_TABLES", {})  # as a fresh command starts
    return tmp_path / "cache" / "xce"


def fresh_process(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Forget this process's copies (as the next command would) and count the TOML parses."""
    monkeypatch.setattr(cluster_file, "_TABLES", {})
    parsed: list[str] = []
    real = cluster_file.read_toml

    def counting(path: Path | str, error: type[Exception], what: str) -> dict[str, object]:
        parsed.append(str(path))
        return real(path, error, what)

    monkeypatch.setattr(cluster_file, "read_toml", counting)
    return parsed


def test_the_next_command_reads_the_cached_table_and_a_changed_file_is_parsed_again(
        tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "cluster.toml"
    write(path, TOML)
    parsed = fresh_process(monkeypatch)
    first = cluster_file.client_table(path, ValueError)
    assert first == cluster_file.client_part(cluster_file.read_toml(path, ValueError, "x"))
    assert len(parsed) == 2
    [copy] = cache.glob("cluster-*.json")
    assert copy.stat().st_mode & 0o777 == 0o600
    parsed = fresh_process(monkeypatch)
    assert cluster_file.client_table(path, ValueError) == first and parsed == []
    assert cluster_file.grpc_addresses(path, cached=True) == ["127.0.0.1:7001"] and parsed == []
    write(path, TOML.replace("7001", "7002"), age_s=30)  # the same size: the times tell
    parsed = fresh_process(monkeypatch)
    assert cluster_file.grpc_addresses(path, cached=True) == ["127.0.0.1:7002"] and len(parsed) == 1


def test_a_file_changed_just_now_is_parsed_every_time(tmp_path: Path, cache: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "cluster.toml"
    path.write_text(TOML)
    for _ in range(2):
        parsed = fresh_process(monkeypatch)
        assert cluster_file.grpc_addresses(path, cached=True) == ["127.0.0.1:7001"] and len(parsed) == 1
    assert not list(cache.glob("cluster-*.json"))


@pytest.mark.parametrize("spoil", ["corrupt", "other_path", "writable_by_others", "a_symlink"])
def test_a_cache_that_cannot_be_trusted_is_ignored(tmp_path: Path, cache: Path,
                                                   monkeypatch: pytest.MonkeyPatch, spoil: str) -> None:
    path = tmp_path / "cluster.toml"
    write(path, TOML)
    cluster_file.client_table(path, ValueError)
    [copy] = cache.glob("cluster-*.json")
    held = json.loads(copy.read_text())
    held["table"]["replicas"][0]["grpc"] = "evil.example:1"  # where a poisoned copy would send us
    if spoil == "corrupt":
        copy.write_text(copy.read_text()[:-5])
    elif spoil == "other_path":
        held["path"] = str(tmp_path / "elsewhere.toml")
        copy.write_text(json.dumps(held))
    elif spoil == "writable_by_others":
        copy.write_text(json.dumps(held))
        os.chmod(copy, 0o622)
    else:
        planted = tmp_path / "planted.json"
        planted.write_text(json.dumps(held))
        copy.unlink()
        copy.symlink_to(planted)
    parsed = fresh_process(monkeypatch)
    assert cluster_file.grpc_addresses(path, cached=True) == ["127.0.0.1:7001"] and len(parsed) == 1


def test_bad_files_say_what_is_wrong(tmp_path: Path, cache: Path) -> None:
    with pytest.raises(ValueError, match="no cluster file at"):
        cluster_file.client_table(tmp_path / "missing.toml", ValueError)
    bad = tmp_path / "bad.toml"
    bad.write_text("[[replicas]\n")
    with pytest.raises(ValueError, match="not valid TOML"):
        cluster_file.client_table(bad, ValueError)
    assert not list(cache.glob("cluster-*.json"))  # nothing cached for a file that does not parse


def test_the_cache_holds_what_a_client_reads_never_the_password(tmp_path: Path, cache: Path) -> None:
    path = tmp_path / "cluster.toml"
    write(path, TOML + 'password = "s3cret-raft"\n[auth]\nmunge = true\nsecret_thing = "x"\n')
    table = cluster_file.client_table(path, ValueError)
    assert table["replicas"] == [{"grpc": "127.0.0.1:7001"}] and table["auth"] == {"munge": True}
    [copy] = cache.glob("cluster-*.json")
    assert "s3cret" not in copy.read_text() and "secret_thing" not in copy.read_text()
