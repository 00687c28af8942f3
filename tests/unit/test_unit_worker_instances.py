"""The instances on a worker without a disk or processes (worker/instances.py with MemoryFiles, a
fake process host, the in-memory journal): recovery reads how an instance ended from its status file,
a start that never happened fails, a re-adopted one is watched; GPU indices are held and given back."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from worker.executor import Executor
from worker.gpus import GpuIndices
from worker.instances import MemoryFiles
from worker.journal import MemoryJournal
from worker.process_host import Account
from xce.start_failures import START_FAILED
from xce.v1 import api_pb2 as api

SPOOL = Path("/nowhere/spool")


class Host:
    """Processes by pid -> start ticks; nothing is ever started or signalled for real."""

    def __init__(self, alive: dict[int, int]) -> None:
        self.alive = alive
        self.watched: dict[int, Callable[[int], None]] = {}

    def host_name(self) -> str:
        return "here"

    def account(self, user: str) -> Account | None:
        return Account(user, 1000, 1000, "/", "/bin/sh")

    def euid(self) -> int:
        return 1000

    def start_ticks(self, pid: int) -> int | None:
        return self.alive.get(pid)

    def find_by_env(self, key: tuple[int, int], spool: Path) -> int:
        return 0

    def find_served(self, status_file: Path) -> int:
        return 0

    def watch(self, pid: int, started_here: bool, start_ticks: int | None,
              on_end: Callable[[int], None]) -> None:
        self.watched[pid] = on_end

    def close(self) -> None:
        pass


def executor(journal: MemoryJournal, files: MemoryFiles, host: Host) -> tuple[Executor, list[api.JobReport]]:
    reports: list[api.JobReport] = []
    return Executor(SPOOL, 1.0, reports.append, host=host, journal=journal, files=files,  # type: ignore[arg-type]
                    name="here"), reports


def test_an_instance_that_ended_unwatched_is_reported_from_its_status_file() -> None:
    journal, files = MemoryJournal(), MemoryFiles()
    status = str(SPOOL / "7.0.status")
    journal.put((7, 0), {"state": "running", "status_file": status, "pid": 42, "pid_start": 5,
                         "started_ms": 1})
    files.files[status] = json.dumps({"exit_code": 3, "term_signal": 0, "user_cpu_s": 1.5,
                                      "system_cpu_s": 0.5, "max_rss_kb": 64, "wall_s": 2.0, "time_ms": 99})
    ex, reports = executor(journal, files, Host({}))
    ex.recover()
    [report] = reports
    assert report.finished.exit_code == 3 and report.finished.time_ms == 99
    assert report.finished.usage.max_rss_kb == 64
    assert (journal.get((7, 0)) or {})["state"] == "ended"


def test_a_start_that_left_no_status_file_failed() -> None:
    journal, files = MemoryJournal(), MemoryFiles()
    journal.put((8, 1), {"state": "starting", "status_file": str(SPOOL / "8.1.status")})
    ex, reports = executor(journal, files, Host({}))
    ex.recover()
    [report] = reports
    assert report.dispatch_failed.code == START_FAILED
    assert "while starting" in report.dispatch_failed.reason


def test_a_live_instance_is_readopted_and_its_end_read_when_it_comes() -> None:
    journal, files, host = MemoryJournal(), MemoryFiles(), Host({42: 5})
    status = str(SPOOL / "9.0.status")
    journal.put((9, 0), {"state": "running", "status_file": status, "pid": 42, "pid_start": 5,
                         "started_ms": 1})
    ex, reports = executor(journal, files, host)
    ex.recover()
    assert reports == [] and ex.running() == [(9, 0)] and 42 in host.watched
    files.files[status] = json.dumps({"start_error": "no such command", "code": START_FAILED})
    host.watched.pop(42)(0)
    [report] = reports
    assert report.dispatch_failed.reason == "no such command" and ex.running() == []


def gpu_job(key: tuple[int, int], host: str, gpus: int) -> api.Job:
    job = api.Job(id=key[0], attempt=key[1], host=host)
    job.spec.slots = 1
    job.allocation.add(host=host, slots=1, resources={"gpu": gpus})
    return job


def test_gpu_indices_are_the_lowest_free_ones_and_come_back() -> None:
    gpus = GpuIndices(4)
    assert gpus.take((1, 0), gpu_job((1, 0), "h", 2), "h") == [0, 1]
    assert gpus.take((2, 0), gpu_job((2, 0), "h", 3), "h") is None  # only 2 free
    assert gpus.take((3, 0), gpu_job((3, 0), "h", 1), "h") == [2]
    gpus.release((1, 0))
    assert gpus.take((2, 0), gpu_job((2, 0), "h", 3), "h") == [0, 1, 3]
    assert gpus.held_text() == "2.0: [0, 1, 3], 3.0: [2]"


def test_a_job_on_this_host_alone_shares_its_host_file_and_one_on_several_has_its_own() -> None:
    files = MemoryFiles()
    ex, _ = executor(MemoryJournal(), files, Host({}))
    here = api.Job(id=5, attempt=0, spec=api.JobSpec(slots=2))
    also_here = api.Job(id=6, attempt=1, spec=api.JobSpec(slots=2))
    wide = api.Job(id=7, attempt=0, spec=api.JobSpec(slots=3))
    wide.allocation.add(host="here", slots=2)
    wide.allocation.add(host="there", slots=1)
    shared = ex.instances.write_hostfile(here)
    assert shared == ex.instances.write_hostfile(also_here) == str(SPOOL / "hosts" / "here.2")
    assert files.files[shared] == "here\nhere\n"
    own = ex.instances.write_hostfile(wide)
    assert own == str(SPOOL / "hosts" / "7.0") and files.files[own] == "here\nhere\nthere\n"
    ex.instances.forget_hostfile((7, 0))
    ex.instances.forget_hostfile((5, 0))  # a job's end takes its own file, never the shared one
    assert list(files.files) == [shared]


def test_a_status_file_is_read_after_the_pid_line_a_served_shim_leaves_first() -> None:
    files = MemoryFiles()
    files.files["a"] = '{"exit_code": 3}'  # a shim run alone (or by the build before)
    files.files["b"] = '4242 1187\n{"exit_code": 4}'
    files.files["c"] = '4242 1187\n{"exit_co'  # never renamed to the status file: not read whole
    assert [files.read_status(p).get("exit_code") for p in "abc"] == [3, 4, None]
