"""The worker's executor on real processes, without a cluster."""

from __future__ import annotations

import os
import pwd
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from worker.executor import Executor
from xce.start_failures import COMMAND_NOT_FOUND, CWD_MISSING, NOT_EXECUTABLE, OUTPUT_FILE, START_FAILED
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
    ex.run(job)  # a repeat (while it runs, or once it ended): reports again, never a second instance
    final = _wait_final(reports, 1)
    assert final.finished.exit_code == 4 and final.finished.usage.wall_s > 0
    ended = [r for r in reports if r.WhichOneof("body") == "finished"]
    ex.run(job)  # a repeat once it surely ended: the same end, reported once more
    assert ledger.read_text() == "x\n"
    again = [r for r in reports if r.WhichOneof("body") == "finished"]
    assert len(again) == len(ended) + 1 and again[-1].finished.exit_code == 4  # repeated, not re-run


def test_a_repeated_run_job_restates_a_start_only_when_the_leader_does_not_hold_it(  # type: ignore[no-untyped-def]
        executor, tmp_path: Path) -> None:
    """A new leader restates every running instance with a RunJob: one that already holds the start
    as this host has it gets no report (a failover's thousands of them changed nothing); one that
    does not (its start never committed, or the job UNKWN) gets the start again, marked `again`."""
    ex, reports = executor
    job = _job(1, "sleep", "30", cwd=tmp_path)
    ex.run(job)
    deadline = time.monotonic() + 10
    while not any(r.WhichOneof("body") == "started" for r in reports):
        assert time.monotonic() < deadline, reports
        time.sleep(0.02)
    [first] = reports
    assert first.started.pid > 0 and first.started.time_ms > 0 and not first.started.again
    held = api.Job()
    held.CopyFrom(job)
    held.pid, held.start_time_ms = first.started.pid, first.started.time_ms
    ex.run(held)
    assert reports == [first]
    for n, differs in enumerate(({"start_time_ms": 0, "pid": 0}, {"pid": first.started.pid + 1},
                                 {"state": api.UNKWN, "state_before_unknown": api.RUN}), start=2):
        ex.run(api.Job(**{**{f.name: v for f, v in held.ListFields()}, **differs}))  # type: ignore[arg-type]
        assert len(reports) == n, (differs, reports)
        restated = reports[-1]
        assert (restated.started.pid, restated.started.time_ms, restated.started.again) == \
            (first.started.pid, first.started.time_ms, True)
    # Once it ended, a RunJob that holds its start still gets the end (only the end corrects it).
    ex.signal((1, 0), api.SIGNAL_KILL)
    final = _wait_final(reports, 1)
    ended = len(reports)
    ex.run(held)
    assert [r.WhichOneof("body") for r in reports[ended:]] == ["started", "finished"]
    assert reports[-1] == final


def test_start_failures_are_negative_codes_that_say_whose_fault(executor, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Each of the job's own failures has its code (xce/start_failures.py sorts them), none the host's
    START_FAILED: an output file was -5 once, and cooled the host for everyone."""
    ex, reports = executor
    script = tmp_path / "script"
    script.write_text("#!/bin/sh\ntrue\n")
    script.chmod(0o644)  # not executable
    ex.run(_job(1, "true", cwd=tmp_path / "missing"))
    ex.run(_job(2, "no-such-command-xce", cwd=tmp_path))
    ex.run(_job(3, str(script), cwd=tmp_path))
    unwritable = _job(4, "true", cwd=tmp_path)
    unwritable.spec.stdout_path = str(tmp_path / "no-dir" / "out")
    ex.run(unwritable)
    failed = {n: _wait_final(reports, n).dispatch_failed for n in (1, 2, 3, 4)}
    assert {n: f.code for n, f in failed.items()} == {1: CWD_MISSING, 2: COMMAND_NOT_FOUND, 3: NOT_EXECUTABLE,
                                                      4: OUTPUT_FILE}
    assert "no-such-command-xce" in failed[2].reason and "no-dir/out" in failed[4].reason


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


def test_a_kill_at_once_after_the_start_ends_the_command_with_its_term(tmp_path: Path) -> None:
    """A TERM to the job's group before the command's process has its default handlers (the shim
    holds the group's signals over its fork and passes on what came), or before the shim leads its
    session (a served shim's pid is answered only then), still ends the command at once: not the
    grace's KILL, a minute later (scancel right after sbatch once showed 0:9 for 0:15)."""
    reports: list[api.JobReport] = []
    ex = Executor(tmp_path / "spool", kill_grace_s=60, report=reports.append, allow_root_jobs=True)
    try:
        for n in range(1, 21):
            ex.run(_job(n, "sleep", "60", cwd=tmp_path))
            ex.signal((n, 0), api.SIGNAL_KILL)
        ended = {n: _wait_final(reports, n, timeout_s=45).finished.term_signal for n in range(1, 21)}
        assert ended == dict.fromkeys(range(1, 21), signal.SIGTERM)
    finally:
        for key in ex.running():  # (a failure leaves no sleep behind)
            if pid := ex._i.running.get(key):
                ex.host.killpg(pid, signal.SIGKILL)
        ex.close()


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


def test_an_output_file_in_the_workers_spool_is_the_hosts_fault_one_the_job_chose_its_own(
        tmp_path: Path) -> None:
    """The shim alone (as a process of its own): the same failure to open, two codes."""
    import json
    import subprocess
    import sys

    from worker.process_host import SHIM

    def code(*extra: str) -> int:
        status = tmp_path / "status"
        outputs = ["--stdout", str(tmp_path / "gone" / "out"), "--stderr", str(tmp_path / "err")]
        shim = [sys.executable, "-I", "-S", SHIM, str(status), "--cwd", str(tmp_path)]
        subprocess.run([*shim, *outputs, *extra, "--", "true"], stdin=subprocess.DEVNULL, timeout=30)
        return int(json.loads(status.read_text())["code"])

    assert code() == OUTPUT_FILE
    assert code("--spool-outputs", "1,2") == START_FAILED


@pytest.mark.parametrize("way", ["spawned", "forked"])
def test_a_start_by_posix_spawn_and_one_by_a_child_that_becomes_the_owner_end_alike(
        tmp_path: Path, way: str) -> None:
    """The shim alone: a job whose owner the shim is already (no --user: a worker that is not root)
    starts by posix_spawn, any other (or one with a pre-exec, as here, "forked") by a forked child
    that becomes the owner first. The same
    search of the job's PATH (a command found not executable in an earlier directory: run from a later
    one, else NOT_EXECUTABLE), the same working directory and its fallback's note, output paths
    relative to it, the same start failures."""
    import json
    import subprocess
    import sys

    from worker.process_host import SHIM
    from worker.spawn import env_bytes

    bin_a, bin_b = tmp_path / "a", tmp_path / "b"
    for where, mode in ((bin_a, 0o644), (bin_b, 0o755)):
        where.mkdir()
        (where / "both").write_text("#!/bin/sh\necho \"ran $0 in $PWD\"\n")
        (where / "both").chmod(mode)
    (bin_a / "only-a").write_text("#!/bin/sh\ntrue\n")
    (bin_a / "only-a").chmod(0o644)
    work = tmp_path / "work"
    work.mkdir()
    extra = ["--pre-exec", "true"] if way == "forked" else []

    def start(command: str, cwd: Path, *more: str) -> dict[str, object]:
        status = tmp_path / "status"
        status.unlink(missing_ok=True)
        shim = [sys.executable, "-I", "-S", SHIM, str(status), "--cwd", str(cwd), *more,
                "--stdout", "out", "--stderr", "out", *extra, "--", command]
        env = env_bytes({"PATH": f"{bin_a}:{bin_b}:/usr/bin:/bin", "HOME": str(tmp_path)})
        # (a session of its own: the shim's group ends with it)
        subprocess.run(shim, input=env, timeout=30, check=False, cwd="/", start_new_session=True)
        return dict(json.loads(status.read_text()))

    assert start("both", work)["exit_code"] == 0
    assert (work / "out").read_text() == f"ran {bin_b}/both in {work}\n"
    # Which way it went: a spawning shim has moved to the job's directory (it runs from /); the
    # command's stdin is /dev/null either way, not the memfd of its environment.
    (bin_b / "where").write_text("#!/bin/sh\nreadlink /proc/$PPID/cwd /proc/self/fd/0\n")
    (bin_b / "where").chmod(0o755)
    (work / "out").unlink()
    assert start("where", work)["exit_code"] == 0
    shim_cwd = str(work) if way == "spawned" else "/"
    assert (work / "out").read_text().splitlines() == [shim_cwd, os.devnull]
    assert start("only-a", work)["code"] == NOT_EXECUTABLE
    missing = start("no-such-command-xce", work)
    assert missing["code"] == COMMAND_NOT_FOUND and "no-such-command-xce" in str(missing["start_error"])
    assert start("both", tmp_path / "gone")["code"] == CWD_MISSING
    assert start("both", tmp_path / "gone\udcff")["code"] == CWD_MISSING  # a name not UTF-8 (b"\xff")
    assert start("both", tmp_path / "gone", "--cwd-fallback", str(work))["exit_code"] == 0
    note, ran = (work / "out").read_text().splitlines()[-2:]
    assert note.startswith(f"xce: home directory {tmp_path / 'gone'} not accessible")
    assert ran.endswith(str(work))


def test_the_shim_writes_json_and_reads_the_environment_by_hand() -> None:
    import json

    from worker import shim
    from worker.spawn import env_bytes

    status = {"exit_code": 3, "wall_s": 0.25, "unknown": True, "start_error": 'no "x"\\ here\n\x1b'}
    assert json.loads(shim.to_json(status)) == status
    env = {"A": "1", "EMPTY": "", "EQ": "a=b", "UTF": "é"}
    assert shim.parse_env(env_bytes(env)) == env


def _wait_for(path: Path, what: str) -> None:
    deadline = time.monotonic() + 30
    while not path.exists() or not path.read_text():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_shims_are_forked_by_the_server_lead_their_session_and_jobs_cannot_reach_it(  # type: ignore[no-untyped-def]
        executor, tmp_path: Path) -> None:
    ex, reports = executor
    fds = tmp_path / "fds"
    ex.run(_job(1, "sh", "-c", f"ls -l /proc/$$/fd > {fds}.tmp; mv {fds}.tmp {fds}; sleep 30", cwd=tmp_path))
    _wait_for(fds, "the job did not start")
    [pid] = [ex.instances.running[(1, 0)]]
    server = ex.host._server.process.pid
    assert _parent(pid) == server and os.getsid(pid) == pid and os.getpgid(pid) == pid
    assert "socket:" not in fds.read_text()  # the server's socket is closed in every shim
    ex.signal((1, 0), api.SIGNAL_KILL)
    assert _wait_final(reports, 1).finished.term_signal == signal.SIGTERM


def test_a_shim_killed_from_outside_is_reported_with_its_signal(executor, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ex, reports = executor
    started = tmp_path / "started"
    ex.run(_job(1, "sh", "-c", f"echo $$ > {started}; exec sleep 30", cwd=tmp_path))
    _wait_for(started, "the job did not start")
    shim = ex.instances.running[(1, 0)]
    os.kill(shim, signal.SIGKILL)  # the OOM killer, say: no status file; the server saw the signal
    final = _wait_final(reports, 1)
    assert final.finished.term_signal == signal.SIGKILL and not final.finished.status_unknown
    os.kill(int(started.read_text()), signal.SIGKILL)  # the command it left


def test_jobs_outlive_the_server_and_the_next_job_gets_a_new_one(executor, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ex, reports = executor
    started, go = tmp_path / "started", tmp_path / "go"
    ex.run(_job(1, "sh", "-c", f"echo x > {started}; while [ ! -e {go} ]; do sleep 0.05; done; exit 3",
                cwd=tmp_path))
    _wait_for(started, "the job did not start")
    first = ex.host._server.process
    first.kill()  # SIGKILL: the job's shim goes on, watched through /proc from now on
    first.wait()
    go.touch()
    assert _wait_final(reports, 1).finished.exit_code == 3  # from its status file
    ex.run(_job(2, "sh", "-c", "exit 5", cwd=tmp_path))
    assert _wait_final(reports, 2).finished.exit_code == 5
    assert ex.host._server.process.pid != first.pid


def test_a_worker_that_died_before_journaling_the_pid_finds_the_shim_by_its_pid_file(tmp_path: Path) -> None:
    spool, started, go = tmp_path / "spool", tmp_path / "started", tmp_path / "go"
    first = Executor(spool, kill_grace_s=0.5, report=lambda report: None, allow_root_jobs=True)
    first.run(_job(1, "sh", "-c", f"echo x > {started}; while [ ! -e {go} ]; do sleep 0.05; done; exit 4",
                   cwd=tmp_path))
    _wait_for(started, "the job did not start")
    pid = first.instances.running[(1, 0)]
    record = first.journal.get((1, 0))
    record.update(state="starting")  # as journaled just before the start
    del record["pid"], record["pid_start"]
    first.journal.put((1, 0), record)
    first.close()
    reports: list[api.JobReport] = []
    second = Executor(spool, kill_grace_s=0.5, report=reports.append, allow_root_jobs=True)
    try:
        second.recover()
        assert second.instances.running == {(1, 0): pid}
        go.touch()
        assert _wait_final(reports, 1).finished.exit_code == 4
    finally:
        go.touch()  # the job ends even when an assertion failed: no process outlives the test
        second.close()
    # The pid file became the status file (the status after its line): no file of the shim's is left.
    assert sorted(p.name for p in spool.glob("1.0.*")) == ["1.0.status"]
    assert (spool / "1.0.status").read_text().startswith(f"{pid} ")


def test_a_served_shims_pid_file_names_it_while_its_status_is_written_after_the_line(tmp_path: Path) -> None:
    """The window a restarted worker may read it in: the line first, the status partly written."""
    from worker.process_host import _served_shim, start_ticks

    status, ticks = tmp_path / "3.0.status", start_ticks(os.getpid())
    assert ticks is not None
    (tmp_path / "3.0.pid").write_text(f"{os.getpid()} {ticks}\n{{\"exit_co")
    assert _served_shim(str(status)) == os.getpid()
    (tmp_path / "3.0.pid").write_text(f"{os.getpid()} {ticks + 1}\n")
    assert _served_shim(str(status)) == 0  # a reused pid is not the shim


def test_a_shared_file_is_kept_while_it_holds_the_text_and_replaced_whole_otherwise(tmp_path: Path) -> None:
    from worker.instances import RealFiles

    files, path, elsewhere = RealFiles(), tmp_path / "hosts" / "here.2", tmp_path / "elsewhere"
    files.write_shared(path, "h\nh\n")
    inode = path.stat().st_ino
    files.write_shared(path, "h\nh\n")
    assert path.stat().st_ino == inode  # not written again
    path.write_text("changed by a job\n")  # (a worker that is not root: a job of its user may)
    files.write_shared(path, "h\nh\n")
    assert path.read_text() == "h\nh\n" and path.stat().st_ino != inode
    elsewhere.write_text("theirs\n")
    path.unlink()
    path.symlink_to(elsewhere)
    files.write_shared(path, "h\nh\n")  # the link is replaced, never written through
    assert elsewhere.read_text() == "theirs\n" and not path.is_symlink() and path.read_text() == "h\nh\n"
    path.unlink()
    os.mkfifo(path)  # no writer: a read of it would wait forever
    files.write_shared(path, "h\nh\n")
    assert path.is_file() and path.read_text() == "h\nh\n" and path.stat().st_mode & 0o777 == 0o644
    assert sorted(p.name for p in path.parent.iterdir()) == ["here.2"]


def test_a_start_whose_server_died_answering_finds_its_shim_ended_already(tmp_path: Path) -> None:
    """A short job's shim renames its pid file to its status file as it ends: the job ran."""
    import subprocess

    from worker.process_host import _wait_for_served_shim

    status, gone = tmp_path / "4.0.status", subprocess.Popen(["true"])
    gone.wait()  # a pid no process has now
    status.write_text(f'{gone.pid} 1187\n{{"exit_code": 0}}')
    assert _wait_for_served_shim(str(status), timeout_s=0.1) == gone.pid
    status.write_text(f'{os.getpid()} 1187\n{{"exit_code": 0}}')  # its pid another process's by now
    assert _wait_for_served_shim(str(status), timeout_s=0.1) == 0
    status.write_text('{"exit_code": 0}')  # a shim run on its own: no pid in its status
    assert _wait_for_served_shim(str(status), timeout_s=0.1) == 0


def test_a_child_that_becomes_the_owner_holds_no_file_of_its_shim(executor, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """With a post-exec, the shim's child lives as long as the job, as its owner (the command runs in a
    child of it): the pid file its shim keeps open for the status is not among its files."""
    ex, reports = executor
    fds = tmp_path / "fds"
    job = _job(1, "sh", "-c", f"ls -l /proc/$PPID/fd > {fds}.tmp; mv {fds}.tmp {fds}", cwd=tmp_path)
    job.spec.post_exec = "true"
    ex.run(job)
    assert _wait_final(reports, 1).finished.exit_code == 0
    listing = fds.read_text()
    assert "/dev/null" in listing and ".pid" not in listing and ".status" not in listing


def test_a_job_that_ends_after_its_executor_closed_is_left_to_the_next_one(tmp_path: Path) -> None:
    """A shim watched through /proc (its server died) ends after the executor closed: the watch writes
    nothing to the closed journal (it raised in that thread, failing whichever test came next), and the
    next executor recovers the end from the job's status file."""
    spool, started, go = tmp_path / "spool", tmp_path / "started", tmp_path / "go"
    failed: list[threading.ExceptHookArgs] = []
    hook = threading.excepthook
    threading.excepthook = failed.append
    try:
        first = Executor(spool, kill_grace_s=0.5, report=lambda report: None, allow_root_jobs=True)
        first.run(_job(1, "sh", "-c", f"echo x > {started}; while [ ! -e {go} ]; do sleep 0.05; done; exit 3",
                       cwd=tmp_path))
        _wait_for(started, "the job did not start")
        server = first.host._server.process  # type: ignore[attr-defined]
        server.kill()  # the job's shim goes on, watched through /proc by a thread of its own
        server.wait()
        deadline = time.monotonic() + 30
        # (alive: enumerate also lists a thread started but not yet running, which cannot be joined)
        while not (watches := [t for t in threading.enumerate()
                               if t.name.startswith("watch-") and t.is_alive()]):
            assert time.monotonic() < deadline, "no watch of the shim"
            time.sleep(0.02)
        first.close()
        go.touch()
        for watch in watches:
            watch.join(timeout=30)
            assert not watch.is_alive(), "the job did not end"
    finally:
        go.touch()  # the job ends even when an assertion failed: no process outlives the test
        threading.excepthook = hook
    assert not failed, [str(args.exc_value) for args in failed]
    reports: list[api.JobReport] = []
    second = Executor(spool, kill_grace_s=0.5, report=reports.append, allow_root_jobs=True)
    try:
        second.recover()
        assert _wait_final(reports, 1).finished.exit_code == 3
    finally:
        second.close()


def test_a_command_line_larger_than_a_socket_message_runs(executor, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ex, reports = executor
    out = tmp_path / "count"
    arguments = ["a" * 1000] * 400  # 400 KB: past SOCK_SEQPACKET's ~208 KB message
    ex.run(_job(1, "sh", "-c", f'echo $# > {out}', "sh", *arguments, cwd=tmp_path))
    assert _wait_final(reports, 1).finished.exit_code == 0
    assert out.read_text().strip() == "400"


def test_jobs_get_the_default_sigpipe_and_sigxfsz(executor, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ex, reports = executor
    out = tmp_path / "status"
    ex.run(_job(1, "sh", "-c", f"grep SigIgn /proc/self/status > {out}", cwd=tmp_path))
    assert _wait_final(reports, 1).finished.exit_code == 0
    ignored = int(out.read_text().split()[1], 16)
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):
        assert not ignored & (1 << (sig - 1)), f"{sig.name} ignored in the job"


def test_every_one_of_many_short_jobs_reports_its_end(executor, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # A shim may end before its spawn has returned (its end is kept until it is watched), and a pid
    # may come back for a later shim: none of that may lose an end.
    ex, reports = executor
    for n in range(1, 151):
        ex.run(_job(n, "sh", "-c", f"exit {n % 7}", cwd=tmp_path))
    for n in range(1, 151):
        assert _wait_final(reports, n, timeout_s=60).finished.exit_code == n % 7


def test_an_end_heard_before_its_watch_is_kept_for_it_and_a_reused_pid_starts_clean() -> None:
    from worker.process_host import RealProcessHost

    host = RealProcessHost()
    ends: list[int] = []
    host._shim_started(4242)
    host._shim_ended(4242, 9)  # SIGKILL, heard before the executor watches it
    host.watch(4242, True, None, ends.append)
    assert ends == [signal.SIGKILL]
    host._shim_ended(4343, 0)  # an end nobody watched (a start that failed after the spawn)...
    host._shim_started(4343)  # ...then the pid comes back for a new shim: the old end is not its
    host.watch(4343, True, None, ends.append)
    assert ends == [signal.SIGKILL]
    host._shim_ended(4343, 0)
    deadline = time.monotonic() + 10
    while len(ends) < 2:  # told from a thread of its own
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert ends == [signal.SIGKILL, 0]


def _shim_status(tmp_path: Path, command: list[str], *extra: str) -> dict[str, object]:
    """The shim alone, as a session's leader (as the worker runs it), with an empty environment."""
    import json
    import subprocess
    import sys

    from worker.process_host import SHIM

    status = tmp_path / "status"
    shim = [sys.executable, "-I", "-S", SHIM, str(status), "--cwd", str(tmp_path), "--stdout",
            str(tmp_path / "out"), "--stderr", str(tmp_path / "err"), *extra, "--", *command]
    subprocess.run(shim, stdin=subprocess.DEVNULL, timeout=60, start_new_session=True)
    found: dict[str, object] = json.loads(status.read_text())
    return found


def test_a_command_killed_beside_its_post_exec_is_reported_with_its_signal(tmp_path: Path) -> None:
    """The process that outlives the command to run the post-exec ends as the command did: SIGKILL,
    which no handler may be set for, included (not the 127 of a start that failed)."""
    marker = tmp_path / "post"
    post = f"echo $LSB_JOBEXIT_STAT > {marker}"
    ended = _shim_status(tmp_path, ["sh", "-c", "kill -9 $$"], "--post-exec", post)
    assert (ended["exit_code"], ended["term_signal"]) == (0, 9)
    assert marker.read_text() == "9\n"
    ended = _shim_status(tmp_path, ["sh", "-c", "exit 4"], "--post-exec", "exit 1")
    assert (ended["exit_code"], ended["term_signal"]) == (4, 0)  # the post-exec's failure changes nothing
