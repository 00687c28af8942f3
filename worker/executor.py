"""Running job instances on this host as process groups, surviving worker restarts.

Theory of operation. `run(job)` starts at most one instance per (job id,
attempt), ever: the journal (journal.py) records the instance before its
process starts, and a repeat only repeats its reports. Each instance is its
own session and process group, led by the shim (shim.py), which runs the
command with its working directory, environment and stdout/stderr files
(default: the spool directory, `<job>.<attempt>.out|.err`, like LSF's -o/-e;
relative paths are relative to the working directory) and writes how the
command ended, with its usage, to a status file. When the worker runs as root
and the submitting user exists, the job runs as that user; otherwise as the
worker's user.

A started instance is watched by the process host (process_host.py): wait4
on the shim when this worker started it, otherwise (re-adopted after a worker
restart: same pid and same process start time) polling /proc until it is
gone. Either way the outcome is
read from the status file; without one (the shim was killed with the job)
the report says which signal ended it if known, or "exit status unknown".
An instance that ended while the worker was down is reported the same way
when the worker comes back (H4).

Reports go to `report`; the daemon sends them until acknowledged and calls
`acknowledged` then. Nothing here knows about gRPC; processes, time and the
journal are injected (a ProcessHost, a Clock, a journal), so the protocol
simulation runs this very code on a simulated host.
"""

from __future__ import annotations

import json
import logging
import os
import pwd
import shutil
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from worker.journal import KEEP_ACKED, Journal, JournalStore
from worker.process_host import ProcessHost, RealProcessHost
from xce.clock import REAL_CLOCK, Clock
from xce.v1 import api_pb2 as api

log = logging.getLogger("xce.worker")

Key = tuple[int, int]

COMMAND_NOT_FOUND, CWD_MISSING, UNKNOWN_USER, DRAINING, START_FAILED = -1, -2, -3, -4, -5
PRUNE_EVERY_ACKS = 100


STOPPED = (api.USUSP, api.SSUSP)


class Executor:
    def __init__(self, spool: Path, kill_grace_s: float, report: Callable[[api.JobReport], None],
                 draining: Callable[[], bool] = lambda: False, keep_acked: int = KEEP_ACKED,
                 host: ProcessHost | None = None, clock: Clock = REAL_CLOCK,
                 journal: JournalStore | None = None) -> None:
        self.spool = Path(spool)
        self.spool.mkdir(parents=True, exist_ok=True)
        self.kill_grace_s = kill_grace_s
        self._report = report
        self._draining = draining
        self.host = host or RealProcessHost()
        self.clock = clock
        self._lock = threading.Lock()  # reports come from the host's watch threads too
        self.journal: JournalStore = journal or Journal(self.spool / "journal", keep_acked)
        self._running: dict[Key, int] = {}  # instance -> shim pid, while it runs
        self._killed_hard: set[Key] = set()
        self._acks = 0  # SIGKILLed by us: the end is known even without a status

    # -------------------------------------------------------------- restart

    def recover(self) -> None:
        """After a restart: re-adopt live instances, report the ended ones."""
        for key, record in list(self.journal.items()):
            state = record.get("state")
            if state == "ended":
                if not record.get("acked"):
                    self._report(_report_from(record["final"]))
                continue
            pid = record.get("pid")
            ticks = self.host.start_ticks(pid) if pid else None
            if pid:  # alive only if the pid still names the same process, not a reused pid
                alive = ticks is not None and ticks == record.get("pid_start")
            else:
                pid = self.host.find_by_env(key, self.spool)
                alive = bool(pid)
                ticks = self.host.start_ticks(pid) if pid else None
                record.setdefault("started_ms", self.clock.now_ms())
            if alive:
                record.update(pid=pid, pid_start=ticks, state="running")
                self.journal.put(key, record)
                with self._lock:
                    self._running[key] = pid
                log.info("job %d.%d re-adopted, pid %d", *key, pid)
                self._watch(key, record, started_here=False)
            elif state == "starting" and not Path(record["status_file"]).exists():
                self._end(key, record, api.JobReport(job_id=key[0], attempt=key[1],
                          dispatch_failed=api.DispatchFailed(code=START_FAILED,
                                                             reason="worker died while starting it")))
            else:
                self._end(key, record, self._finished(key, record, None))

    # -------------------------------------------------------------- commands

    def run(self, job: api.Job) -> None:
        key = (job.id, job.attempt)
        known = self.journal.get(key)
        if known is not None and known.get("readable_id", job.readable_id) == job.readable_id:
            self.rereport(key)
            self._hold(key, job)  # a RunJob states whether the job should be stopped
            return  # (a record of another cluster's job with the same numbers is replaced below)
        if job.state == api.UNKWN:  # the leader asks after an instance this host never had
            record: dict[str, Any] = {"state": "starting", "status_file": "", "readable_id": job.readable_id}
            self._end(key, record, _failed(job, START_FAILED, "this host has no record of the job"))
            return
        if job.kill_requested:  # killed before it reached this host: never start it
            record = {"state": "starting", "status_file": "", "readable_id": job.readable_id}
            self._end(key, record, api.JobReport(job_id=job.id, attempt=job.attempt, finished=api.JobFinished(
                term_signal=signal.SIGKILL, time_ms=self.clock.now_ms())))
            return
        failure = self._check(job)
        status_file = self.spool / f"{job.id}.{job.attempt}.status"
        record = {"state": "starting", "status_file": str(status_file),  # journaled before the start
                  "readable_id": job.readable_id}
        if failure is not None:
            log.warning("job %d.%d not started: %s", job.id, job.attempt, failure.dispatch_failed.reason)
            self._end(key, record, failure)
            return
        self.journal.put(key, record)
        try:
            pid = self._spawn(job, status_file)
        except Exception as exc:  # noqa: BLE001 - one bad job must not take the worker down
            self._end(key, record, _failed(job, START_FAILED, f"start failed: {exc}"))
            return
        record.update(state="running", pid=pid, pid_start=self.host.start_ticks(pid),
                      started_ms=self.clock.now_ms())
        self.journal.put(key, record)
        with self._lock:
            self._running[key] = pid
        log.info("job %d.%d started, pid %d", job.id, job.attempt, pid)
        self._report(self._started(key, record))
        if job.state in STOPPED:  # stopped before it reached this host
            self._hold(key, job)
        self._watch(key, record, started_here=True)

    def _hold(self, key: Key, job: api.Job) -> None:
        state = job.state_before_unknown if job.state == api.UNKWN else job.state
        if state in STOPPED:
            self.signal(key, api.SIGNAL_STOP)
        elif state == api.RUN:
            self.signal(key, api.SIGNAL_CONT)

    def signal(self, key: Key, kind: api.SignalKind) -> None:
        with self._lock:
            pid = self._running.get(key)
        if pid is None:
            return
        if kind == api.SIGNAL_STOP:
            self.host.killpg(pid, signal.SIGSTOP)
        elif kind == api.SIGNAL_CONT:
            self.host.killpg(pid, signal.SIGCONT)
        elif kind == api.SIGNAL_KILL:
            self.host.killpg(pid, signal.SIGTERM)
            self.host.killpg(pid, signal.SIGCONT)  # a stopped job must see the TERM
            self.host.call_later(self.kill_grace_s, lambda: self._kill_hard(key, pid))

    def rereport(self, key: Key) -> None:
        """Repeat what is known about an instance (after a reconnect or a repeated RunJob)."""
        record = self.journal.get(key)
        if record is None:
            return
        if record.get("state") == "running":
            self._report(self._started(key, record))
        elif record.get("state") == "ended" and not record.get("acked"):
            if record.get("pid"):
                self._report(self._started(key, record))
            self._report(_report_from(record["final"]))

    def acknowledged(self, key: Key, kind: str) -> None:
        record = self.journal.get(key)
        if record is not None and record.get("state") == "ended" and kind != "started":
            record["acked"] = True
            self.journal.put(key, record)
            self._acks += 1
            if self._acks % PRUNE_EVERY_ACKS == 0:  # a full scan of the journal: not on every ack
                self.journal.prune_acked()

    def running(self) -> list[Key]:
        with self._lock:
            return list(self._running)

    def close(self) -> None:
        self.journal.close()

    # -------------------------------------------------------------- starting

    def _check(self, job: api.Job) -> api.JobReport | None:
        if self._draining():
            return _failed(job, DRAINING, "worker draining")
        cwd = Path(job.spec.cwd) if job.spec.cwd else self.spool
        if not cwd.is_dir():
            return _failed(job, CWD_MISSING, f"working directory {cwd} missing")
        program = job.spec.command[0] if job.spec.command else ""
        path = {**os.environ, **job.spec.env}.get("PATH")
        found = shutil.which(program, path=path) if "/" not in program else (
            program if os.access(cwd / program, os.X_OK) else None)
        if not found:
            return _failed(job, COMMAND_NOT_FOUND, f"command not found: {program}")
        return None

    def _spawn(self, job: api.Job, status_file: Path) -> int:
        cwd = Path(job.spec.cwd) if job.spec.cwd else self.spool
        user = self._user(job.spec.user)
        # Paths the submitter chose are opened as the job's user (by the shim),
        # never as the worker's: a root worker must not append to any file.
        own_paths = user is not None
        out = self._output(cwd, "" if own_paths else job.spec.stdout_path, job, "out")
        err = self._output(cwd, "" if own_paths else job.spec.stderr_path, job, "err")
        env = {**os.environ, **job.spec.env, "XCE_JOB_ID": str(job.id), "XCE_JOB_ATTEMPT": str(job.attempt),
               "XCE_JOB_READABLE_ID": job.readable_id, "XCE_SPOOL": str(self.spool)}
        options = ["--user", user] if user else []
        if own_paths and job.spec.stdout_path:
            options += ["--stdout", str(cwd / job.spec.stdout_path)]
        if own_paths and job.spec.stderr_path:
            options += ["--stderr", str(cwd / job.spec.stderr_path)]
        shim = [sys.executable, "-m", "worker.shim", str(status_file), *options, "--", *job.spec.command]
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).resolve().parent.parent),
                                                          os.environ.get("PYTHONPATH")]))
        return self.host.spawn(shim, cwd, env, out, err)

    def _user(self, name: str) -> str | None:
        if os.geteuid() != 0 or not name:
            return None
        try:
            pwd.getpwnam(name)
        except KeyError:
            return None  # documented: an unknown user runs as the worker's user
        return name if name != pwd.getpwuid(os.geteuid()).pw_name else None

    def _output(self, cwd: Path, path: str, job: api.Job, suffix: str) -> Path:
        return cwd / path if path else self.spool / f"{job.id}.{job.attempt}.{suffix}"

    # -------------------------------------------------------------- ending

    def _watch(self, key: Key, record: dict[str, Any], started_here: bool) -> None:
        def ended(shim_signal: int) -> None:
            self._end(key, record, self._finished(key, record, shim_signal))

        self.host.watch(record["pid"], started_here, record.get("pid_start"), ended)

    def _finished(self, key: Key, record: dict[str, Any], shim_signal: int | None) -> api.JobReport:
        report = api.JobReport(job_id=key[0], attempt=key[1])
        try:
            status = json.loads(Path(record["status_file"]).read_text())
        except (OSError, ValueError):
            status = {}
        if "start_error" in status:
            report.dispatch_failed.code = COMMAND_NOT_FOUND
            report.dispatch_failed.reason = str(status["start_error"])[:500]
            return report
        finished = report.finished
        finished.time_ms = int(status.get("time_ms") or self.clock.now_ms())
        if "exit_code" in status:
            finished.exit_code = int(status["exit_code"])
            finished.term_signal = int(status["term_signal"])
            finished.usage.CopyFrom(api.Usage(user_cpu_s=status["user_cpu_s"],
                                              system_cpu_s=status["system_cpu_s"],
                                              max_rss_kb=status["max_rss_kb"], wall_s=status["wall_s"]))
        elif shim_signal or key in self._killed_hard:
            finished.term_signal = shim_signal or signal.SIGKILL  # the group got it after the grace
        else:
            finished.status_unknown = True  # it ended while no worker watched, and left no status
        return report

    def _end(self, key: Key, record: dict[str, Any], report: api.JobReport) -> None:
        record.update(state="ended", final=report.SerializeToString().hex())
        self.journal.put(key, record)
        with self._lock:
            self._running.pop(key, None)
        if report.HasField("finished"):
            f = report.finished
            log.info("job %d.%d ended: exit %d signal %d%s", *key, f.exit_code, f.term_signal,
                     " (status unknown)" if f.status_unknown else "")
        self._report(report)

    def _started(self, key: Key, record: dict[str, Any]) -> api.JobReport:
        return api.JobReport(job_id=key[0], attempt=key[1], started=api.JobStarted(
            pid=int(record.get("pid", 0)), time_ms=int(record.get("started_ms", 0))))

    def _kill_hard(self, key: Key, pid: int) -> None:
        with self._lock:
            still = self._running.get(key) == pid
        if still:
            self._killed_hard.add(key)
            self.host.killpg(pid, signal.SIGKILL)


def _failed(job: api.Job, code: int, reason: str) -> api.JobReport:
    return api.JobReport(job_id=job.id, attempt=job.attempt,
                         dispatch_failed=api.DispatchFailed(code=code, reason=reason))


def _report_from(hex_bytes: str) -> api.JobReport:
    return api.JobReport.FromString(bytes.fromhex(hex_bytes))
