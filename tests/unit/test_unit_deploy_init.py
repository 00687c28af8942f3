"""`xce init` (ops/deploy_init.py): the bundles it writes load as each daemon loads them, hold only what
their host needs, with safe modes; bad arguments are refused and nothing is written."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from cli.main import main
from client.credentials import read_token_file, token_hash
from controller.config import grpc_addresses
from controller.config import load as load_cluster
from ops import deploy_init
from worker.config import load as load_worker
from xce import pki


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_every_host_gets_what_its_daemons_load_and_nothing_more(tmp_path: Path) -> None:
    out = tmp_path / "deploy"
    assert main(["init", "--replicas", "a:7101,b:7101,c:7101:7301", "--workers", "n1,a", "--cluster-id",
                 "prod", "--admin", "alice", "--out", str(out)]) == 0
    hosts = out / "hosts"
    assert sorted(p.name for p in hosts.iterdir()) == ["a", "b", "c", "n1"]
    for replica_id, host in enumerate("abc", start=1):
        config = load_cluster(hosts / host / "cluster.toml")  # as the replica loads it, password included
        assert [r.raft for r in config.replicas] == ["a:7201", "b:7201", "c:7301"]
        me = config.replica(replica_id)
        assert me.cert is not None and me.cert.parent == hosts / host / "tls"
        assert pki.identity(me.cert.read_bytes()) == pki.Identity("replica", str(replica_id))
        assert config.data_dir == Path("/var/lib/xce")
        assert _mode(hosts / host / "secret") == 0o600
        assert (hosts / host / f"tls/scheduler-sched-{host}.key").exists()
    assert len({(hosts / h / "secret").read_bytes() for h in "abc"}) == 1  # one password
    assert not (hosts / "n1" / "secret").exists()  # workers never hold the Raft password
    assert grpc_addresses(hosts / "n1" / "cluster.toml") == ["a:7101", "b:7101", "c:7101"]  # the CLI there
    for host in ("n1", "a"):
        worker = load_worker(hosts / host / "worker.toml")
        assert worker.host.name == host and worker.controllers == ("a:7101", "b:7101", "c:7101")
        assert worker.spool_dir == Path("/var/spool/xce")
        assert pki.identity(worker.credentials.cert or b"") == pki.Identity("worker", host)
    assert not (hosts / "b" / "worker.toml").exists()
    # Modes: private keys and secrets 0600 wherever they are; the shared client key is readable (it proves
    # nothing: every user's CLI presents it); the CA's key and the admin token stay in 0700 directories.
    for path in out.rglob("*"):
        if path.is_dir():
            assert _mode(path) == (0o700 if path.name in ("ca", "admin") else 0o755), path
        elif path.name.endswith(".key") and path.name != "client-xce.key" or path.name in ("secret", "token"):
            assert _mode(path) == 0o600, path
        else:
            assert _mode(path) == 0o644, path
    assert not any(p.name == "ca.key" for p in hosts.rglob("*"))
    token = read_token_file(out / "admin" / "token", required=True)
    config = load_cluster(hosts / "a" / "cluster.toml")
    assert token is not None and token_hash(token) in config.static_tokens


@pytest.mark.parametrize(("args", "message"), [
    (["--replicas", "a:7101,a:7101"], "share an address"),
    (["--replicas", "a:7101,a:7201"], "share an address"),
    (["--replicas", "a:70000"], "not a port"),
    (["--replicas", "a:65500"], "out of range"),
    (["--replicas", "a"], "expected HOST:GRPC_PORT"),
    (["--replicas", "a b:7101"], "not a host name"),
    (["--replicas", "a:7101", "--workers", "n1,n1"], "appears twice"),
    (["--replicas", "a:7101", "--cluster-id", "my-cluster"], "cluster id"),
    (["--replicas", "a:7101", "--data-dir", "state"], "absolute path"),
])
def test_bad_arguments_are_refused_and_nothing_is_written(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          args: list[str], message: str) -> None:
    out = tmp_path / "deploy"
    assert main(["init", *args, "--out", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_it_never_writes_into_a_directory_in_use(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "deploy"
    assert main(["init", "--replicas", "a:7101", "--out", str(out)]) == 0
    ca = (out / "ca" / "ca.key").read_bytes()
    assert main(["init", "--replicas", "a:7101", "--out", str(out)]) == 2
    assert "never overwrites" in capsys.readouterr().err
    assert (out / "ca" / "ca.key").read_bytes() == ca


def test_a_plan_lists_each_host_once_replicas_first() -> None:
    plan = deploy_init.plan("c", "x:1,y:1,x:2", workers="n1,y", schedulers="n1")
    assert plan.hosts() == ["x", "y", "n1"]
    assert [r.id for r in plan.replicas] == [1, 2, 3]


def test_a_replica_to_add_gets_a_bundle_from_the_same_ca(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "deploy"
    assert main(["init", "--replicas", "a:7101,b:7101,c:7101", "--out", str(out)]) == 0
    assert main(["init-replica", "--deploy", str(out), "--id", "4", "--address", "d:7101"]) == 0
    assert "xce member add d:7101" in capsys.readouterr().out
    etc = out / "hosts" / "d"
    config = load_cluster(etc / "cluster.toml")
    assert [r.id for r in config.replicas] == [1, 2, 3, 4] and config.replica(4).raft == "d:7201"
    assert config.password == load_cluster(out / "hosts" / "a" / "cluster.toml").password
    me = config.replica(4)
    assert me.cert is not None and pki.identity(me.cert.read_bytes()) == pki.Identity("replica", "4")
    assert (etc / "tls" / "ca.crt").read_bytes() == (out / "ca" / "ca.crt").read_bytes()
    assert (etc / "controller-4.env").read_text() == "XCE_CONTROLLER_ARGS=--join\n"
    assert _mode(etc / "secret") == 0o600 and _mode(etc / "tls" / "replica-4.key") == 0o600
    # The others' bundles are not touched: their cluster files stay the bootstrap list.
    assert [r.id for r in load_cluster(out / "hosts" / "a" / "cluster.toml").replicas] == [1, 2, 3]
    for args, message in ((["--id", "2", "--address", "e:7101"], "already"),
                          (["--id", "5", "--address", "a:7101"], "already"),
                          (["--id", "5", "--address", "d:7102"], "exists"),
                          (["--id", "5", "--address", "e"], "expected HOST:GRPC_PORT")):
        assert main(["init-replica", "--deploy", str(out), *args]) == 2
        assert message in capsys.readouterr().err
    assert not (out / "hosts" / "e").exists()
    assert main(["init-replica", "--deploy", str(tmp_path / "nothing"), "--id", "5", "--address", "e:1"]) == 2
    assert "not an `xce init` output" in capsys.readouterr().err
