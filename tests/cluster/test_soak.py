"""The HA soak in CI: a short run passes, and a deliberately broken build fails it.

`python -m soak` runs as a child process with its own cleanup; on a timeout
it gets SIGTERM (it unwinds: daemons, jobs, namespaces), then SIGKILL.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from soak_run import soak as _soak

from soak.netns import available

pytestmark = pytest.mark.cluster


def test_short_soak_with_leader_kills_and_a_partition_loses_nothing(tmp_path: Path) -> None:
    partitions = 1 if available() is None else 0
    code, output = _soak(tmp_path, "--duration", "70", "--kill-every", "10", "--seed", "11",
                         "--partitions", str(partitions), timeout_s=480)
    assert code == 0, output[-5000:]
    result = json.loads((tmp_path / "soak.json").read_text())
    verdict = result["verdict"]
    assert verdict["ok"] and verdict["lost"] == verdict["duplicated"] == 0
    # The clients' history (the load's and the readers') was checked, and is linearizable.
    assert verdict["linearizable"] == "yes" and result["linearizability"]["operations"] > 500
    assert result["faults"].get("leader", 0) >= 5 and result["faults"].get("partition", 0) == partitions
    assert result["failover_kill"]["write"]["n"] >= 5
    assert result["drained"] and result["submits_acknowledged"] > 210  # 3 a second, as 300 were in 100 s
    assert result["stops"] > 0 and result["kills_acknowledged"] > 0
    # The checks per resource and per host of a parallel job had something to check.
    assert result["parallel_jobs"] > 0 and result["parts_journaled"] > 0 and result["gpu_instances"] > 0, {
        k: result[k] for k in ("parallel_jobs", "parts_journaled", "gpu_instances")}
    if partitions:  # the cut-off leader stepped down (fallback 1 s, plus a tick and a 50 ms poll)
        partition = result["failover_partition"]
        assert partition["step_down"]["n"] == 1 and partition["step_down"]["max_ms"] <= 2000
        assert partition["minority_writes"] == ["refused"] and verdict["minority_commits"] == 0
    assert (tmp_path / "timeline.png").stat().st_size > 10_000


@pytest.mark.slow  # 40 s; the checks that catch it are unit-tested (test_unit_soak_checks.py)
def test_soak_fails_a_build_that_requeues_on_success(tmp_path: Path) -> None:
    code, output = _soak(tmp_path, "--duration", "20", "--kill-every", "0", "--partitions", "0",
                         "--drain", "15", "--fault", "requeue-on-success", timeout_s=240)
    assert code == 1, output[-3000:]
    verdict = json.loads((tmp_path / "soak.json").read_text())["verdict"]
    assert not verdict["ok"] and verdict["duplicated"] > 0
