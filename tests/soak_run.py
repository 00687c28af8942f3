"""Running `python -m soak` from a test: a child process with its own cleanup; on a timeout it gets
SIGTERM (it unwinds: daemons, jobs, namespaces, mounts), then SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any


def soak(out: Path, *args: str, timeout_s: float) -> tuple[int, str]:
    proc = subprocess.Popen([sys.executable, "-m", "soak", "--out", str(out), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)
        try:
            output, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            output, _ = proc.communicate()
        raise AssertionError(f"the soak did not end in {timeout_s:.0f} s:\n{output[-5000:]}") from None
    return proc.returncode, output


def result(out: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((out / "soak.json").read_text())
    return loaded
