"""Running job instances on this host as process groups.

Theory of operation. `run(job)` starts at most one instance per (job id,
attempt): a repeat only repeats its reports. Each instance is its own
session and process group (so signals reach the whole job), with its working
directory, environment, and stdout/stderr files (default: the spool
directory, `<job>.<attempt>.out|.err`, like LSF's -o/-e; relative paths are
relative to the working directory). When the worker runs as root and the
submitting user exists, the job runs as that user; otherwise as the worker's
user. A thread per instance waits for it with wait4, so the report carries
user and system CPU, max RSS and wall time (M6).

Every report goes to `report`; the daemon keeps it until the leader
acknowledges it. Nothing here knows about gRPC.
"""

from __future__ import annotations

import logging
import os
import pwd
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from xce.v1 import api_pb2 as api

log = logging.getLogger("xce.worker")

Key = tuple[int, int]

COMMAND_NOT_FOUND, CWD_MISSING, UNKNOWN_USER, DRAINING, START_FAILED = -1, -2, -3, -4, -5


@dataclass
class Instance:
    key: Key
    pid: int
    started_ms: int
    started_mono: float
    finished: api.JobReport | None = None


class Executor:
    def __init__(self, spool: Path, kill_grace_s: float, report: Callable[[api.JobReport], None],
                 draining: Callable[[], bool] = lambda: False) -> None:
        self.spool = Path(spool)
        self.spool.mkdir(parents=True, exist_ok=True)
        self.kill_grace_s = kill_grace_s
        self._report = report
        self._draining = draining
        self._lock = threading.Lock()
        self.instances: dict[Key, Instance] = {}
        self.failed: dict[Key, api.JobReport] = {}

    # -------------------------------------------------------------- commands

    def run(self, job: api.Job) -> None:
        key = (job.id, job.attempt)
        with self._lock:
            instance = self.instances.get(key)
            failed = self.failed.get(key)
        if instance is not None or failed is not None:
            self.rereport(key)
            return
        try:
            popen = self._start(job)
        except _StartFailure as exc:
            report = api.JobReport(job_id=job.id, attempt=job.attempt,
                                   dispatch_failed=api.DispatchFailed(code=exc.code, reason=exc.reason))
            with self._lock:
                self.failed[key] = report
            log.warning("job %d.%d not started: %s", job.id, job.attempt, exc.reason)
            self._report(report)
            return
        instance = Instance(key, popen.pid, int(time.time() * 1000), time.monotonic())
        with self._lock:
            self.instances[key] = instance
        log.info("job %d.%d started, pid %d", job.id, job.attempt, popen.pid)
        self._report(self._started(instance))
        threading.Thread(target=self._wait, args=(instance, popen), daemon=True).start()

    def signal(self, key: Key, kind: api.SignalKind) -> None:
        with self._lock:
            instance = self.instances.get(key)
        if instance is None or instance.finished is not None:
            return
        if kind == api.SIGNAL_STOP:
            _killpg(instance.pid, signal.SIGSTOP)
        elif kind == api.SIGNAL_CONT:
            _killpg(instance.pid, signal.SIGCONT)
        elif kind == api.SIGNAL_KILL:
            _killpg(instance.pid, signal.SIGTERM)
            _killpg(instance.pid, signal.SIGCONT)  # a stopped job must see the TERM
            timer = threading.Timer(self.kill_grace_s, self._kill_hard, args=(instance,))
            timer.daemon = True
            timer.start()

    def rereport(self, key: Key) -> None:
        """Repeat what is known about an instance (after a repeated RunJob)."""
        with self._lock:
            instance = self.instances.get(key)
            failed = self.failed.get(key)
        if failed is not None:
            self._report(failed)
        if instance is not None:
            self._report(self._started(instance))
            if instance.finished is not None:
                self._report(instance.finished)

    def running(self) -> list[Key]:
        with self._lock:
            return [k for k, i in self.instances.items() if i.finished is None]

    # -------------------------------------------------------------- internals

    def _start(self, job: api.Job) -> subprocess.Popen[bytes]:
        if self._draining():
            raise _StartFailure(DRAINING, "worker draining")
        cwd = Path(job.spec.cwd) if job.spec.cwd else self.spool
        if not cwd.is_dir():
            raise _StartFailure(CWD_MISSING, f"working directory {cwd} missing")
        user = self._user(job.spec.user)
        out = self._output(cwd, job.spec.stdout_path, job, "out")
        err = self._output(cwd, job.spec.stderr_path, job, "err")
        env = {**os.environ, **job.spec.env, "XCE_JOB_ID": str(job.id), "XCE_JOB_ATTEMPT": str(job.attempt),
               "XCE_JOB_READABLE_ID": job.readable_id}
        try:
            with open(out, "ab") as stdout, open(err, "ab") as stderr:
                return subprocess.Popen(list(job.spec.command), cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                        stdout=stdout, stderr=stderr, start_new_session=True, user=user)
        except FileNotFoundError:
            raise _StartFailure(COMMAND_NOT_FOUND, f"command not found: {job.spec.command[0]}") from None
        except PermissionError as exc:
            raise _StartFailure(COMMAND_NOT_FOUND, f"cannot execute {job.spec.command[0]}: {exc}") from None
        except OSError as exc:
            raise _StartFailure(START_FAILED, f"start failed: {exc}") from None

    def _user(self, name: str) -> str | None:
        if os.geteuid() != 0 or not name:
            return None
        try:
            pwd.getpwnam(name)
        except KeyError:
            return None  # documented: an unknown user runs as the worker's user
        return name if name != pwd.getpwuid(os.geteuid()).pw_name else None

    def _output(self, cwd: Path, path: str, job: api.Job, suffix: str) -> Path:
        if path:
            return cwd / path
        return self.spool / f"{job.id}.{job.attempt}.{suffix}"

    def _started(self, instance: Instance) -> api.JobReport:
        return api.JobReport(job_id=instance.key[0], attempt=instance.key[1],
                             started=api.JobStarted(pid=instance.pid, time_ms=instance.started_ms))

    def _wait(self, instance: Instance, popen: subprocess.Popen[bytes]) -> None:
        _, status, rusage = os.wait4(instance.pid, 0)
        popen.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        finished = api.JobFinished(time_ms=int(time.time() * 1000), usage=api.Usage(
            user_cpu_s=rusage.ru_utime, system_cpu_s=rusage.ru_stime, max_rss_kb=rusage.ru_maxrss,
            wall_s=time.monotonic() - instance.started_mono))
        if os.WIFSIGNALED(status):
            finished.term_signal = os.WTERMSIG(status)
        else:
            finished.exit_code = os.WEXITSTATUS(status)
        report = api.JobReport(job_id=instance.key[0], attempt=instance.key[1], finished=finished)
        with self._lock:
            instance.finished = report
        log.info("job %d.%d ended: exit %d signal %d", *instance.key, finished.exit_code,
                 finished.term_signal)
        self._report(report)

    def _kill_hard(self, instance: Instance) -> None:
        if instance.finished is None:
            _killpg(instance.pid, signal.SIGKILL)


class _StartFailure(Exception):
    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass
