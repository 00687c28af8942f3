"""Under systemd: each daemon says READY=1 on $NOTIFY_SOCKET once it serves (Type=notify), its logs
carry the journal's priority when stderr is the journal, and the unit files pass `systemd-analyze
verify`. (PID 1 here is not systemd, so a unit's Restart= is checked by hand: docs/DEPLOY.md.)"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from client.channel import Client
from ops.local_cluster import LocalCluster, LocalScheduler, LocalWorkers
from xce import daemon_logging

UNITS = Path(__file__).resolve().parents[2] / "deploy" / "systemd"


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(tmp_path / "notify"))
    sock.settimeout(60)  # a deadline only a broken build reaches
    yield sock
    sock.close()


def _ready_messages(sock: socket.socket, count: int) -> list[str]:
    return [sock.recv(4096).decode() for _ in range(count)]


@pytest.mark.cluster
def test_every_daemon_says_ready_once_it_serves(make_cluster, notify_socket: socket.socket,  # type: ignore[no-untyped-def]
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", notify_socket.getsockname())
    cluster: LocalCluster = make_cluster()
    cluster.start()
    messages = _ready_messages(notify_socket, 3)
    assert sorted(m.splitlines()[0] for m in messages) == ["READY=1"] * 3
    assert sorted(m.splitlines()[1].split(":")[0] for m in messages) == [
        "STATUS=replica 1", "STATUS=replica 2", "STATUS=replica 3"]
    # Ready means serving gRPC: the replica that said so first answers at once.
    first = int(messages[0].splitlines()[1].split(":")[0].split()[-1])
    with Client([cluster.address(first)], cluster.credentials, deadline_s=5) as client:
        assert client.status(local_only=True).replicas[0].id == first
    cluster.leader()
    workers = LocalWorkers(cluster)
    scheduler = LocalScheduler(cluster, "sched-1")
    try:
        workers.start("w1", 1)
        assert _ready_messages(notify_socket, 1)[0].startswith("READY=1\nSTATUS=host w1")
        scheduler.start()
        assert _ready_messages(notify_socket, 1)[0].startswith("READY=1\nSTATUS=scheduler sched-1")
    finally:
        scheduler.kill()
        workers.stop()


def test_under_the_journal_each_line_carries_its_priority(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    root = logging.getLogger()
    saved, level = root.handlers[:], root.level
    try:
        for journal in (True, False):
            path = tmp_path / f"stderr-{journal}"
            with open(path, "w") as stderr:
                st = os.fstat(stderr.fileno())
                monkeypatch.setattr(sys, "stderr", stderr)
                # Inherited from a parent whose stderr was the journal: only a match counts.
                monkeypatch.setenv("JOURNAL_STREAM", f"{st.st_dev}:{st.st_ino}" if journal else "8:1234")
                daemon_logging.setup("replica-2")
                logging.getLogger("controller.leader").warning("leading in term %d", 7)
                logging.getLogger("controller.leader").info("serving")
            lines = path.read_text().splitlines()
            if journal:
                assert lines == ["<4>replica-2 WARNING controller.leader: leading in term 7",
                                 "<6>replica-2 INFO controller.leader: serving"]
            else:  # a terminal or a file: the time first, no priority
                assert lines[0].endswith(" replica-2 WARNING controller.leader: leading in term 7")
                assert lines[0][:4].isdigit()
    finally:
        for handler in root.handlers[:]:
            root.removeHandler(handler)
        for handler in saved:
            root.addHandler(handler)
        root.setLevel(level)


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
@pytest.mark.parametrize("unit", ["xce-controller@1.service", "xce-scheduler@sched-a.service",
                                  "xce-worker.service", "xce-gateway.service"])
def test_the_units_pass_systemd_analyze_verify(tmp_path: Path, unit: str) -> None:
    xce = Path(sys.executable).parent / "xce"  # the units name /opt/xce/bin/xce; verify wants it to exist
    for source in UNITS.glob("*.service"):
        (tmp_path / source.name).write_text(source.read_text().replace("/opt/xce/bin/xce", str(xce)))
    result = subprocess.run(["systemd-analyze", "verify", "--man=no", unit], cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and not result.stderr.strip(), result.stderr
