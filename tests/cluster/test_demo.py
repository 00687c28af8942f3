"""`xce demo` tells its story and exits 0 (the issue's acceptance for the run command)."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.cluster


def test_xce_demo_exits_0_with_every_job_done_once() -> None:
    result = subprocess.run([sys.executable, "-m", "cli", "demo"], capture_output=True, text=True,
                            timeout=300, start_new_session=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "all 100 jobs DONE" in result.stdout and "each ran exactly once: True" in result.stdout
    assert "kill -9 the leader" in result.stdout and "everything stopped" in result.stdout
