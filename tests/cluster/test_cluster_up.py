"""`xce cluster up`: a foreground local cluster that Ctrl-C stops cleanly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.cluster


def _pids_alive(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):  # gone, or being reaped as we read (ESRCH)
            continue
        if state != "Z":
            alive.append(pid)
    return alive


def test_cluster_up_serves_and_ctrl_c_stops_every_replica(tmp_path: Path) -> None:
    data = tmp_path / "xce-data"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("XCE_CONTROLLERS", None)
    proc = subprocess.Popen([sys.executable, "-m", "cli", "cluster", "up", "--data", str(data)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)
    try:
        assert proc.stdout is not None
        lines = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            lines.append(line)
            if "Ctrl-C stops the cluster" in line or not line:
                break
        assert any("up: 3 replicas" in line for line in lines), lines

        cli = [sys.executable, "-m", "cli"]
        xce_env = {**env, "XCE_DATA": str(data)}
        out = subprocess.run([*cli, "submit", "--", "echo", "hi"], env=xce_env, capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 0 and "is submitted" in out.stdout, out.stderr
        status = subprocess.run([*cli, "status"], env=xce_env, capture_output=True, text=True, timeout=60)
        rows = [row.split() for row in status.stdout.splitlines()[2:]]
        pids = [int(row[5]) for row in rows if row and row[0].isdigit()]  # the replica rows
        assert len(pids) == 3 and all(_pids_alive([p]) for p in pids)

        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
        assert "stopping the cluster" in proc.stdout.read()
        deadline = time.monotonic() + 10
        while _pids_alive(pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _pids_alive(pids) == []
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
