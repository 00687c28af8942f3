"""Live reconfiguration's pure parts: what a running replica cannot take from a re-read file
(controller/reconfig.py), and config errors naming the line of the key (controller/config.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from controller import config
from controller.reconfig import needs_restart

BASE = """cluster_id = "c1"
password = "secret"
[[replicas]]
id = 1
grpc = "127.0.0.1:7100"
raft = "127.0.0.1:7200"
[tls]
insecure = true
"""


def test_what_needs_a_restart_and_what_does_not(tmp_path: Path) -> None:
    path = tmp_path / "cluster.toml"
    path.write_text(BASE + '[[queues]]\nname = "normal"\n')
    old = config.load(path)
    path.write_text(BASE + '[[queues]]\nname = "normal"\npriority = 99\n[hosts]\nheartbeat_s = 0.5\n')
    new = config.load(path)
    assert needs_restart(old, new) == ["heartbeat_s"]  # the queue's priority is taken at once
    assert needs_restart(old, dataclasses.replace(old, password="other")) == ["password"]


@pytest.mark.parametrize(("extra", "line", "words"), [
    ('[[queues]]\nname = "normal"\n\n[[queues]]\nname = "bad"\n# a comment\npriority = "high"\n', 15,
     "queue 'bad': priority must be an integer (32-bit)"),
    ("[state]\nclean_period_s = 60\nevents_kept = -1\n", 11,
     "[state] events_kept must be a positive integer"),
])
def test_a_bad_key_is_named_with_its_line(tmp_path: Path, extra: str, line: int, words: str) -> None:
    path = tmp_path / "cluster.toml"
    path.write_text(BASE + extra)
    with pytest.raises(config.ConfigError) as refused:
        config.load(path)
    assert str(refused.value) == f"{path.resolve()}:{line}: {words}"
