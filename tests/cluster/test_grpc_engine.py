"""A replica's gRPC I/O path (xce/grpc_engine.py): chosen before grpc is imported, an operator's wins."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from xce import grpc_engine

REPO = Path(__file__).resolve().parents[2]

# `xce controller ...` as it is run (its cluster file empty: it stops at reading it, starting nothing),
# with a spy on imports that notes, when the replica's code (controller.main, the one import of
# run_controller) and grpc are first looked for, whether grpc was loaded and what the variable said.
PROBE = """
import os, runpy, sys
seen = []
class Spy:
    def find_spec(self, name, path=None, target=None):
        if name in ('controller.main', 'grpc') and name not in [n for n, _, _ in seen]:
            seen.append((name, 'grpc' in sys.modules, os.environ.get('GRPC_EXPERIMENTS')))
        return None
sys.meta_path.insert(0, Spy())
sys.argv = ['xce'] + sys.argv[1:]
try:
    runpy.run_module('cli', run_name='__main__')
except SystemExit:
    pass
print(seen[0])
"""


def test_the_polled_path_is_the_default_and_an_operators_choice_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRPC_EXPERIMENTS", "recorded")  # so that teardown restores this process's own
    monkeypatch.delenv("GRPC_EXPERIMENTS")
    grpc_engine.use_polled_listener()
    assert os.environ["GRPC_EXPERIMENTS"] == "-event_engine_listener"
    monkeypatch.setenv("GRPC_EXPERIMENTS", "")  # the operator asks for gRPC's own defaults
    grpc_engine.use_polled_listener()
    assert os.environ["GRPC_EXPERIMENTS"] == ""


def test_a_replica_chooses_before_its_code_or_grpc_is_imported(tmp_path: Path) -> None:
    """gRPC reads the variable when its core starts: a replica that imported grpc first (an import
    moved up into `xce`'s start, or the choice moved below the replica's import) would serve on the
    default path whatever it set."""
    file = tmp_path / "cluster.toml"
    file.write_text("")
    env = {k: v for k, v in os.environ.items() if k != "GRPC_EXPERIMENTS"}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run([sys.executable, "-c", PROBE, "controller", "--config", str(file), "--id", "1"],
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "missing cluster_id" in done.stderr  # it got as far as the replica's code
    assert done.stdout.strip() == "('controller.main', False, '-event_engine_listener')", \
        done.stdout + done.stderr


def test_grpc_knows_the_switch() -> None:
    """An upgrade of grpcio that dropped the switch would ignore it, saying so only in a log line."""
    env = {**os.environ, "GRPC_EXPERIMENTS": grpc_engine.POLLED_LISTENER}
    done = subprocess.run([sys.executable, "-c", "import grpc; grpc.insecure_channel('127.0.0.1:1').close()"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Unknown experiment" not in done.stderr, done.stderr
    env["GRPC_EXPERIMENTS"] = "-no_such_switch_here"  # the check above can fail
    done = subprocess.run([sys.executable, "-c", "import grpc; grpc.insecure_channel('127.0.0.1:1').close()"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert "Unknown experiment" in done.stderr, done.stderr
