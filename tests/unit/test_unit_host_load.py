"""Load indices: what a worker measures (worker/host_load.py) and when the leader commits a host's
(controller/load_commits.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from controller.load_commits import LoadCommits
from worker.host_load import LoadMeter
from xce.v1 import log_pb2 as log


def write_proc(root: Path, running: int, busy: int, idle: int, swapped: int) -> None:
    (root / "loadavg").write_text(f"1.50 0.80 0.25 {running + 1}/300 4242\n")
    (root / "stat").write_text(f"cpu  {busy} 0 0 {idle} 0 0 0 0 0 0\ncpu0 1 2 3 4\n")
    (root / "vmstat").write_text(f"nr_free_pages 1\npswpin {swapped}\npswpout 0\n")
    (root / "meminfo").write_text("MemTotal: 16384000 kB\nMemAvailable: 2048000 kB\nSwapFree: 1024000 kB\n")


def test_the_meter_reads_the_run_queue_utilization_paging_and_free_space(tmp_path: Path) -> None:
    write_proc(tmp_path, running=4, busy=1000, idle=1000, swapped=0)
    meter = LoadMeter(proc=tmp_path, tmp=tmp_path)
    first = meter.sample(100.0)
    assert first["r1m"] == 1.5 and first["r15m"] == 0.25 and first["r15s"] == 4.0  # less the reader
    assert first["mem"] == 2000.0 and first["swp"] == 1000.0 and first["tmp"] > 0
    assert "ut" not in first and "pg" not in first  # rates need a second sample
    write_proc(tmp_path, running=0, busy=1750, idle=1250, swapped=600)
    second = meter.sample(102.0)
    assert second["ut"] == 0.75 and second["pg"] == 300.0  # the averages start at their first value
    write_proc(tmp_path, running=0, busy=1750, idle=2250, swapped=600)
    third = meter.sample(162.0)  # idle for a minute: ut and pg fall by 1 - e^-1, r15s nearly to 0
    assert third["ut"] == pytest.approx(0.75 * 0.3679, abs=0.01)
    assert third["pg"] == pytest.approx(300 * 0.3679, abs=0.05) and third["r15s"] < 0.1


def test_a_meter_without_proc_files_reports_what_it_can(tmp_path: Path) -> None:
    meter = LoadMeter(proc=tmp_path / "absent", tmp=tmp_path / "absent")
    assert meter.sample(1.0) == {} and meter.sample(2.0) == {}
    if os.path.exists("/proc/loadavg"):  # this host's
        assert {"r1m", "r15m", "r15s", "mem"} <= LoadMeter().sample(1.0).keys()


def test_a_host_s_load_is_committed_at_most_every_period_and_only_when_it_changed() -> None:
    commits = LoadCommits(period_s=15.0)
    commits.heard("a", 1, {"r1m": 0.5, "bogus": 3.0})
    commits.heard("b", 1, {"r1m": 1.0})
    sent = commits.due(0.0)
    assert [(load.name, dict(load.values)) for load in sent] == [("a", {"r1m": 0.5}), ("b", {"r1m": 1.0})]
    assert commits.due(5.0) == []  # one entry in flight at a time
    commits.settled(sent, [log.OK, None], 5.0)  # b's outcome is not known: tried again
    assert [load.name for load in commits.due(6.0)] == ["b"]
    commits.settled([load for load in sent if load.name == "b"], [log.OK], 6.0)
    commits.heard("a", 1, {"r1m": 0.9})
    assert commits.due(10.0) == []  # changed, but committed 5 s ago
    assert [load.name for load in commits.due(20.5)] == ["a"]
    commits.settled([log.HostLoad(name="a", generation=1, values={"r1m": 0.9})], [log.OK], 20.5)
    assert commits.due(60.0) == []  # nothing changed: nothing to commit
    commits.forget("a")
    commits.heard("a", 2, {"r1m": 0.9})  # re-joined: its load is committed at once
    assert [(load.name, load.generation) for load in commits.due(61.0)] == [("a", 2)]


def test_a_period_of_zero_commits_nothing() -> None:
    commits = LoadCommits(period_s=0.0)
    commits.heard("a", 1, {"r1m": 0.5})
    assert commits.due(100.0) == [] and commits.next_s == float("inf")
