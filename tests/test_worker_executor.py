"""The worker's executor on real processes, without a cluster."""

from __future__ import annotations

import os
import pwd
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from worker.executor import CWD_MISSING, Executor
from xce.v1 import api_pb2 as api

ME = pwd.getpwuid(os.geteuid()).pw_name  # the owner of every job here: jobs run as their owner


@pytest.fixture
def executor(tmp_path: Path) -> Iterator[tuple[Executor, list[api.JobReport]]]:
    reports: list[api.JobReport] = []
    ex = Executor(tmp_path / "spool", kill_grace_s=0.5, report=reports.append, allow_root_jobs=True)
    try:
        yield ex, reports
    finally:
        for key in ex.running():
            ex.signal(key, api.SIGNAL_KILL)
        ex.close()


def _job(job_id: int, *command: str, cwd: Path, **fields: object) -> api.Job:
    spec = api.JobSpec(command=command, cwd=str(cwd), user=ME)
    return api.Job(id=job_id, attempt=0, state=api.RUN, spec=spec, **fields)


def _wait_final(reports: list[api.JobReport], job_id: int, timeout_s: float = 10) -> api.JobReport:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for report in reports:
            if report.job_id == job_id and report.WhichOneof("body") in ("finished", "dispatch_failed"):
                return report
        time.sleep(0.02)
    raise AssertionError(f"no final report for {job_id}: {reports}")


def test_runs_once_and_reports_exit_code_and_usage(executor, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ex, reports = executor
    ledger = tmp_path / "ledger"
    job = _job(1, "sh", "-c", f"echo x >> {ledger}; exit 4", cwd=tmp_path)
    ex.run(job)
    ex.run(job)  # a repeat: reports again, never a second instance
    final = _wait_final(reports, 1)
    assert final.finished.exit_code == 4 and final.finished.usage.wall_s > 0
    ex.run(job)
    assert ledger.read_text() == "x\n"
    assert [r.WhichOneof("body") for r in reports].count("finished") == 2  # repeated, not re-run


def test_start_failures_are_negative_codes(executor, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ex, reports = executor
    ex.run(_job(1, "true", cwd=tmp_path / "missing"))
    ex.run(_job(2, "no-such-command-xce", cwd=tmp_path))
    assert _wait_final(reports, 1).dispatch_failed.code == CWD_MISSING
    assert _wait_final(reports, 2).dispatch_failed.code < 0


def test_kill_escalates_to_sigkill_after_the_grace(executor, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ex, reports = executor
    trapped = tmp_path / "trapped"
    script = f"trap '' TERM; touch {trapped}; while true; do sleep 0.1; done"
    ex.run(_job(1, "sh", "-c", script, cwd=tmp_path))
    deadline = time.monotonic() + 30
    while not trapped.exists():  # the TERM must find the trap set, however slow the start
        assert time.monotonic() < deadline, "the job did not start"
        time.sleep(0.02)
    ex.signal((1, 0), api.SIGNAL_KILL)
    assert _wait_final(reports, 1).finished.term_signal == signal.SIGKILL


def test_a_killed_or_unknown_job_is_never_started(executor, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ex, reports = executor
    ledger = tmp_path / "ledger"
    ex.run(_job(1, "sh", "-c", f"echo x >> {ledger}", cwd=tmp_path, kill_requested=True))
    ex.run(api.Job(id=2, attempt=0, state=api.UNKWN, spec=api.JobSpec(command=["true"], cwd=str(tmp_path))))
    assert _wait_final(reports, 1).finished.term_signal == signal.SIGKILL
    assert _wait_final(reports, 2).dispatch_failed.code < 0  # never started here: a safe requeue
    assert not ledger.exists()


def test_the_owners_directory_is_reachable_whatever_the_umask(tmp_path: Path) -> None:
    from worker.process_host import RealProcessHost

    host = RealProcessHost()
    account = host.account(ME)
    assert account is not None
    old = os.umask(0o077)
    try:
        mine = host.owner_dir(tmp_path / "spool" / "users" / ME, account)
    finally:
        os.umask(old)
    assert (mine.parent.stat().st_mode & 0o777, mine.stat().st_mode & 0o777) == (0o711, 0o700)


def test_the_fence_kills_only_rerunnable_jobs_and_reports_them_fenced(  # type: ignore[no-untyped-def]
        executor, tmp_path: Path) -> None:
    ex, reports = executor
    started = [tmp_path / f"started-{n}" for n in (1, 2)]
    for n, rerunnable in ((1, True), (2, False)):
        job = _job(n, "sh", "-c", f"touch {started[n - 1]}; sleep 60", cwd=tmp_path)
        job.spec.rerunnable = rerunnable
        ex.run(job)
    deadline = time.monotonic() + 30
    while not all(p.exists() for p in started):
        assert time.monotonic() < deadline, "the jobs did not start"
        time.sleep(0.02)
    assert ex.fence(grace_s=0.5) == [(1, 0)]
    assert ex.fence(grace_s=0.5) == []  # once
    final = _wait_final(reports, 1)
    assert final.finished.fenced and final.finished.term_signal == signal.SIGTERM
    assert ex.running() == [(2, 0)]  # not rerunnable: it runs on, the leader decides
    ex.signal((2, 0), api.SIGNAL_KILL)
    assert not _wait_final(reports, 2).finished.fenced


def test_the_shim_writes_json_and_reads_the_environment_by_hand() -> None:
    import json

    from worker import shim
    from worker.executor import env_bytes

    status = {"exit_code": 3, "wall_s": 0.25, "unknown": True, "start_error": 'no "x"\\ here\n\x1b'}
    assert json.loads(shim.to_json(status)) == status
    env = {"A": "1", "EMPTY": "", "EQ": "a=b", "UTF": "é"}
    assert shim.parse_env(env_bytes(env)) == env
