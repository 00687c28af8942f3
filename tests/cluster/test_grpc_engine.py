"""A replica's gRPC I/O path (xce/grpc_engine.py): chosen before grpc is imported, an operator's wins."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from xce import grpc_engine

REPO = Path(__file__).resolve().parents[2]

# `xce controller ...` as it is run, with the replica's own code replaced by a stub that returns at once,
# and a spy on the choice that records whether grpc was imported by then.
PROBE = """
import os, runpy, sys, types
import xce.grpc_engine as engine
seen = []
chosen = engine.use_polled_listener
def spy():
    seen.append('grpc' in sys.modules)
    chosen()
engine.use_polled_listener = spy
for name in ('controller.main',):
    stub = types.ModuleType(name)
    stub.run = lambda *args, **kwargs: 0
    sys.modules[name] = stub
sys.argv = ['xce'] + sys.argv[1:]
try:
    runpy.run_module('cli', run_name='__main__')
except SystemExit:
    pass
print(seen, os.environ.get('GRPC_EXPERIMENTS'))
"""


def test_the_polled_path_is_the_default_and_an_operators_choice_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GRPC_EXPERIMENTS", raising=False)
    grpc_engine.use_polled_listener()
    assert os.environ["GRPC_EXPERIMENTS"] == "-event_engine_listener"
    monkeypatch.setenv("GRPC_EXPERIMENTS", "")  # the operator asks for gRPC's own defaults
    grpc_engine.use_polled_listener()
    assert os.environ["GRPC_EXPERIMENTS"] == ""


def test_a_replica_chooses_before_grpc_is_imported(tmp_path: Path) -> None:
    """gRPC reads the variable when its core starts: a replica that imported grpc first (an import
    moved up into `xce`'s start) would serve on the default path whatever it set."""
    file = tmp_path / "daemon.toml"
    file.write_text("")
    env = {k: v for k, v in os.environ.items() if k != "GRPC_EXPERIMENTS"}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run([sys.executable, "-c", PROBE, "controller", "--config", str(file), "--id", "1"],
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[False]", "-event_engine_listener"], \
        done.stdout + done.stderr
