"""etcd, the yardstick: the same measurements against a three-member etcd 3.4.

The scripts in bench/etcd/ (copied from shared/peers/etcd/) install etcd and
a client venv, start the cluster on 127.0.0.1 and stop it; bench/etcd/load.py
runs the load inside that venv and prints its figures as one JSON line.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent / "etcd"
UP, DOWN, LOAD = HERE / "up.sh", HERE / "down.sh", HERE / "load.py"
# Same defaults as bench/etcd/common.sh, which reads the same variables.
PEER_DIR = Path(os.environ.get("ETCD_PEER_DIR", "/tmp/etcd-peer"))
VENV = Path(os.environ.get("ETCD_PEER_VENV", "/tmp/etcd-peer-venv"))
INSTALL_TIMEOUT_S = 900  # apt-get update + install and a pip install on a cold machine


def run(client_levels: Sequence[int], seconds: float, max_ops: int, kills: int) -> dict[str, Any]:
    """etcd's figures, or {"error": why}; the cluster is stopped whatever happens."""
    try:
        started = _up()
        if started is not None:
            return {"error": f"etcd could not be installed or started: {started}"}
        result = _load(client_levels, seconds, max_ops, kills)
        result["version"] = _version()
        return result
    finally:
        subprocess.run([str(DOWN)], capture_output=True, timeout=120, stdin=subprocess.DEVNULL)


def _up() -> str | None:
    """Install if needed and start fresh; None on success, else the reason."""
    try:
        proc = subprocess.run([str(UP), "--clean"], capture_output=True, text=True,
                              timeout=INSTALL_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-5:]
        return f"up.sh exited {proc.returncode}: " + " | ".join(tail)
    return None


def _load(client_levels: Sequence[int], seconds: float, max_ops: int, kills: int) -> dict[str, Any]:
    cmd = [str(VENV / "bin" / "python"), str(LOAD), "--seconds", str(seconds),
           "--clients", ",".join(str(c) for c in client_levels), "--max-ops", str(max_ops),
           "--kills", str(kills), "--piddir", str(PEER_DIR / "run"), "--up", str(UP)]
    # Bounded: each level plus process start-up, and each failover with its restart.
    timeout = len(client_levels) * (seconds + 180) + kills * 150 + 60
    try:
        # stderr is inherited so load.py's progress lines show as they happen.
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {"error": f"etcd load did not finish within {timeout:.0f} s"}
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        return {"error": f"etcd load exited {proc.returncode}"}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def _version() -> str:
    try:
        out = subprocess.run(["etcd", "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    first = out.stdout.strip().splitlines()
    return first[0] if first else "?"
