"""Memory and usage on real processes (M6): a job past its -M is killed and ends with exit
reason MEMLIMIT; a running job's CPU and RSS reach `xce job` while it runs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import FAST_HOSTS, wait_until, xce_cli

from ops.local_cluster import LocalScheduler
from xce.v1 import api_pb2 as api

pytestmark = pytest.mark.cluster

GROW = """
import time
held = []
for _ in range(100):  # up to 500 MB, 5 MB every 20 ms: the limit is met on the way
    held.append(bytearray(5 << 20))
    time.sleep(0.02)
time.sleep(30)
"""

BUSY = """
import os, sys, time
flag, deadline = sys.argv[1], time.monotonic() + 300
held = bytearray(40 << 20)  # 40 MB, touched: resident
while not os.path.exists(flag) and time.monotonic() < deadline:
    sum(range(10000))
"""


def test_a_job_past_its_limit_ends_memlimit_and_a_running_job_shows_its_usage(  # type: ignore[no-untyped-def]
        make_fleet, tmp_path: Path) -> None:
    cluster, workers = make_fleet(FAST_HOSTS)
    workers.start("w1", 2, "usage_report_s = 1\nmemory_poll_s = 0.2\n")
    scheduler = LocalScheduler(cluster)
    scheduler.start()
    (tmp_path / "grow.py").write_text(GROW)
    (tmp_path / "busy.py").write_text(BUSY)
    flag = tmp_path / "stop"
    try:
        with cluster.client() as client:
            grower = client.submit([api.JobSpec(command=[sys.executable, str(tmp_path / "grow.py")],
                                                cwd=str(tmp_path), mem_limit_mb=100)]).jobs[0]
            busy = client.submit([api.JobSpec(command=[sys.executable, str(tmp_path / "busy.py"), str(flag)],
                                              cwd=str(tmp_path))]).jobs[0]
            wait_until(lambda: client.get_job(str(grower.id)).state == api.EXIT, "the grower to be killed")
            ended = client.get_job(str(grower.id))
            assert ended.exit_reason == "MEMLIMIT" and ended.term_signal in (9, 15)
            assert "(MEMLIMIT)" in xce_cli(cluster, "job", str(grower.id))
            wait_until(lambda: client.get_job(str(busy.id)).usage_now.user_cpu_s > 0.5,
                       "the busy job's CPU time to be reported while it runs")
            running = client.get_job(str(busy.id))
            assert running.state == api.RUN and running.usage_now.max_rss_kb > 40 * 1024
            assert "usage      cpu" in xce_cli(cluster, "job", str(busy.id))
            flag.touch()
            wait_until(lambda: client.get_job(str(busy.id)).state == api.DONE, "the busy job to end")
    finally:
        scheduler.kill()


def test_a_job_past_its_run_limit_is_killed_with_the_runlimit_reason(  # type: ignore[no-untyped-def]
        make_fleet, tmp_path: Path) -> None:
    """-W (bsub -W): the worker kills a job that has run past its limit; it ends EXIT, RUNLIMIT."""
    cluster, workers = make_fleet(FAST_HOSTS)
    workers.start("w1", 2, "memory_poll_s = 0.2\n")
    scheduler = LocalScheduler(cluster)
    scheduler.start()
    try:
        with cluster.client() as client:
            # The CLI takes minutes (LSF's [hour:]minute); the API takes seconds: 1 s here.
            sleeper = client.submit([api.JobSpec(command=["sleep", "300"], cwd=str(tmp_path),
                                                 run_limit_s=1)]).jobs[0]
            wait_until(lambda: client.get_job(str(sleeper.id)).state == api.EXIT, "the sleeper to be killed")
            ended = client.get_job(str(sleeper.id))
            assert ended.exit_reason == "RUNLIMIT" and ended.term_signal in (9, 15)
            assert ended.end_time_ms - ended.start_time_ms < 60_000  # not its 300 s
            shown = xce_cli(cluster, "job", str(sleeper.id))
            assert "(RUNLIMIT)" in shown and "run limit  0:00" in shown
    finally:
        scheduler.kill()
