"""Running job instances on this host as process groups, surviving worker restarts.

Theory of operation. `run(job)` starts at most one instance per (job id,
attempt), ever: the journal (journal.py) records the instance before its
process starts, and a repeat only repeats its reports. Each instance is its
own session and process group, led by the shim (shim.py), which runs the
command with its working directory, environment and stdout/stderr files
(default: the owner's directory in the spool, `users/<owner>/<job>.<attempt>.out|.err`,
like LSF's -o/-e, with %J and %I; relative paths are relative to the working directory) and
writes how the command ended, with its usage, to a status file.

Jobs run as their owner, the user the controller authenticated, never as
the worker's user: an owner with no account here, a root owner without
`allow_root_jobs`, or (on a worker that is not root) any other user than the
worker's is a failed dispatch that says why. Each failed start has a code
that says whose fault it is (xce/start_failures.py: the job's own command,
working directory or output file; its owner's on this host; this host's),
which decides what the controller makes of it. A job that names no working
directory runs in its owner's home, or in /tmp if the owner has none.
The environment is built like `sbatch --export`: a clean baseline for the
owner (HOME, USER, LOGNAME, SHELL, a default PATH), what was submitted, and
XCE_JOB_ID, XCE_JOB_ATTEMPT, XCE_JOB_READABLE_ID, XCE_SPOOL (an array's
element also XCE_ARRAY_ID, XCE_ARRAY_INDEX and LSF's LSB_JOBINDEX); nothing
of the worker's environment. It reaches the job through the shim's
stdin, read only after the shim's child has become the owner.

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
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from worker.journal import KEEP_ACKED, Journal, JournalStore
from worker.output_reader import OutputUnreadable
from worker.process_host import SHIM, SHIM_PATH, Account, ProcessHost, RealProcessHost
from worker.tasks import Tasks
from xce import feasibility
from xce.clock import REAL_CLOCK, Clock
from xce.start_failures import CODES, DRAINING, START_FAILED, UNKNOWN_USER, USER_NOT_ALLOWED
from xce.v1 import api_pb2 as api

log = logging.getLogger("xce.worker")

Key = tuple[int, int]

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
HOME_FALLBACK = "/tmp"  # where a job without a working directory runs if its owner's home is missing
PRUNE_EVERY_ACKS = 100
CONFIRM_EVERY_S, CONFIRM_TRIES = 0.05, 600  # a stopped group is looked for in /proc for up to 30 s


STOPPED = (api.USUSP, api.SSUSP)


class Executor:
    def __init__(self, spool: Path, kill_grace_s: float, report: Callable[[api.JobReport], None],
                 draining: Callable[[], bool] = lambda: False, keep_acked: int = KEEP_ACKED,
                 host: ProcessHost | None = None, clock: Clock = REAL_CLOCK,
                 journal: JournalStore | None = None, allow_root_jobs: bool = False, name: str = "",
                 tell: Callable[[api.TaskState], None] = lambda state: None,
                 job_env: dict[str, str] | None = None, gpus: int = 0) -> None:
        self.spool = Path(spool)
        # Status files and the journal are the worker's alone; owners reach only users/<owner>/ (0711: pass).
        self.spool.mkdir(parents=True, exist_ok=True, mode=0o711)
        self.spool.chmod(0o711)
        self.allow_root_jobs = allow_root_jobs
        self.kill_grace_s = kill_grace_s
        self._report = report
        self._draining = draining
        self.host = host or RealProcessHost()
        self.clock = clock
        self._lock = threading.Lock()  # reports come from the host's watch threads too
        self._closed = False  # (under the lock) the journal is closed: a watch that ends late writes nothing
        self.journal: JournalStore = journal or Journal(self.spool / "journal", keep_acked)
        self._running: dict[Key, int] = {}  # instance -> shim pid, while it runs
        self._killed_hard: set[Key] = set()
        self._acks = 0  # SIGKILLed by us: the end is known even without a status
        self.name = name  # this host's name in the cluster: a job whose first host is another is a part here
        self._parts: set[Key] = set()  # parts of parallel jobs whose first host is another, not over yet
        self.tasks = Tasks(self, tell)
        self.job_env = dict(job_env or {})  # for every job: how `xce launch` reaches this worker
        self.gpus = gpus  # the host's GPUs (its [resources] gpu): indices 0..gpus-1
        self._limits: dict[Key, int] = {}  # memory limits (KB) of the instances and parts running here
        self._memlimited: set[Key] = set()  # killed for passing theirs
        self._run_limits: dict[Key, int] = {}  # run limits (-W, ms) of the instances running here
        self._gpus: dict[Key, list[int]] = {}  # the indices each instance or part holds

    def report(self, report: api.JobReport) -> None:
        self._report(report)

    @staticmethod
    def _slots_here(job: api.Job, host: str = "") -> int:
        """The job's part of its allocation on `host` (default: its first, which runs the command;
        all its slots unless it spans hosts)."""
        parts = feasibility.allocation_of(job)
        mine = [p for p in parts if p.host == host] if host else parts[:1]
        return mine[0].slots if mine else job.spec.slots

    # -------------------------------------------------------------- restart

    def recover(self) -> None:
        """After a restart: re-adopt live instances and tasks, report the ended ones; the tasks of
        an instance that is over are ended (its end may have come while no worker watched)."""
        self.tasks.recover()
        for key, record in list(self.journal.items()):
            state = record.get("state")
            if record.get("mem_limit_kb") and state in ("starting", "running", "part"):
                self._limits[key] = int(record["mem_limit_kb"])
            if record.get("run_limit_ms") and state in ("starting", "running"):
                self._run_limits[key] = int(record["run_limit_ms"])
            if record.get("gpus") and (state in ("starting", "running", "part")
                                       or key in self.tasks.with_tasks()):  # its tasks still use them
                self._gpus[key] = list(record["gpus"])
            if state == "part":
                with self._lock:
                    self._parts.add(key)
                continue
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
        for key in self.tasks.with_tasks():
            known = self.journal.get(key)
            if known is None or known.get("state") not in ("running", "part"):
                self.tasks.over(key)

    # -------------------------------------------------------------- commands

    def run(self, job: api.Job, credential: str = "") -> None:
        key = (job.id, job.attempt)
        if self.name and job.host and job.host != self.name:
            self._part(key, job, credential)
            return
        known = self.journal.get(key)
        if known is not None and known.get("readable_id", job.readable_id) == job.readable_id:
            # Its end too, even once acknowledged: a RunJob means the leader's state holds it as
            # running (a state restored from before its end, say), and only the end corrects that.
            self.rereport(key, acknowledged_too=True)
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
        account, failure = self._check(job)
        status_file = self.spool / f"{job.id}.{job.attempt}.status"
        record = {"state": "starting", "status_file": str(status_file),  # journaled before the start
                  "readable_id": job.readable_id, "rerunnable": job.spec.rerunnable,
                  "slots": self._slots_here(job), "credential": credential}
        if credential:  # what a task launched into it needs (tasks.py); dropped at its end
            record["job"] = job.SerializeToString().hex()
        limit = _mem_limit_kb(job, job.host or self.name)
        if limit:
            record["mem_limit_kb"] = limit
        if job.spec.run_limit_s > 0:
            record["run_limit_ms"] = job.spec.run_limit_s * 1000
        if failure is None:
            gpus = self._take_gpus(key, job, job.host or self.name)
            if gpus is None:
                failure = _failed(job, START_FAILED, f"no free GPU index on host {self.name} "
                                                     f"(held: {self._held_gpus()})")
            else:
                record["gpus"] = gpus
        if failure is not None:
            log.warning("job %d.%d not started: %s", job.id, job.attempt, failure.dispatch_failed.reason)
            self._end(key, record, failure)
            return
        self.journal.put(key, record)
        try:
            assert account is not None
            pid = self._spawn(job, account, status_file, credential=credential, gpus=record.get("gpus"))
        except Exception as exc:  # noqa: BLE001 - one bad job must not take the worker down
            self._end(key, record, _failed(job, START_FAILED, f"start failed: {exc}"))
            return
        record.update(state="running", pid=pid, pid_start=self.host.start_ticks(pid),
                      started_ms=self.clock.now_ms())
        self.journal.put(key, record)
        with self._lock:
            self._running[key] = pid
            if limit:
                self._limits[key] = limit
            if record.get("run_limit_ms"):
                self._run_limits[key] = int(record["run_limit_ms"])
        log.info("job %d.%d started, pid %d", job.id, job.attempt, pid)
        self._report(self._started(key, record))
        if job.state in STOPPED:  # stopped before it reached this host
            self._hold(key, job)
        self._watch(key, record, started_here=True)

    def _part(self, key: Key, job: api.Job, credential: str) -> None:
        """The job's part on this host of its allocation (its first host is another): a record for
        the tasks `xce launch` may start here; no process of its own."""
        known = self.journal.get(key)
        if known is None or known.get("readable_id") != job.readable_id:
            if job.state == api.UNKWN or job.kill_requested:
                return
            known = {"state": "part", "readable_id": job.readable_id, "credential": credential,
                     "job": job.SerializeToString().hex(), "slots": self._slots_here(job, self.name),
                     "part_ms": self.clock.now_ms()}  # when this host learned of its part (the soak reads it)
            limit = _mem_limit_kb(job, self.name)
            if limit:
                known["mem_limit_kb"] = limit
                with self._lock:
                    self._limits[key] = limit
            gpus = self._take_gpus(key, job, self.name)
            if gpus is None:  # the barrier counted them free: a record from before says otherwise
                log.error("job %d.%d: no free GPU index for its part here (held: %s)", *key,
                          self._held_gpus())
            else:
                known["gpus"] = gpus
            self.journal.put(key, known)
            with self._lock:
                self._parts.add(key)
            log.info("job %d.%d: its part here (%d slots)", *key, known["slots"])
        if known.get("state") == "part":
            self._hold(key, job)

    def _hold(self, key: Key, job: api.Job) -> None:
        state = job.state_before_unknown if job.state == api.UNKWN else job.state
        if state in STOPPED:
            self.signal(key, api.SIGNAL_STOP, preempted=state == api.SSUSP)
        elif state == api.RUN:
            self.signal(key, api.SIGNAL_CONT)

    def signal(self, key: Key, kind: api.SignalKind, preempted: bool = False) -> None:
        """`preempted`: a STOP for a preemption (the job's slots go to another job once it is stopped)."""
        sig = {api.SIGNAL_STOP: signal.SIGSTOP, api.SIGNAL_CONT: signal.SIGCONT}.get(kind)
        if sig is not None:  # tasks launched while the job is stopped start stopped
            self._mark_stopped(key, sig == signal.SIGSTOP, preempted)
            self.tasks.signal(key, sig)
        with self._lock:
            pid = self._running.get(key)
            part = key in self._parts
        if part and kind == api.SIGNAL_KILL:
            with self._lock:
                self._parts.discard(key)
            self.tasks.over(key, 0.0 if self._given_away(key) else None)
        if pid is None:
            return
        if kind == api.SIGNAL_STOP:
            self.host.killpg(pid, signal.SIGSTOP)
            self._confirm_stopped(key, pid)
        elif kind == api.SIGNAL_CONT:
            self.host.killpg(pid, signal.SIGCONT)
        elif kind == api.SIGNAL_KILL:
            self._terminate(key, pid, self.kill_grace_s)

    def checkpoint(self, key: Key, sig: int, number: int) -> None:
        """The job's -k signal to its process group, once per checkpoint number: a leader sends the
        latest again on every new connection, so the number signalled is journaled with the instance
        (a restarted worker does not signal it again). The job checkpoints itself as its handler does."""
        if sig not in (signal.SIGHUP, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2):  # the shim outlives
            return
        with self._lock:
            pid = self._running.get(key)
            record = self.journal.get(key) or {}
            if pid is None or int(record.get("checkpointed", 0)) >= number:
                return
            record["checkpointed"] = number
            self.journal.put(key, record)
        self.host.killpg(pid, sig)

    def _given_away(self, key: Key) -> bool:
        """Stopped for a preemption: its slots may be another job's now."""
        return _stopped_for_preemption(self.journal.get(key) or {})

    def _terminate(self, key: Key, pid: int, grace_s: float) -> None:
        """TERM (continued, so that a stopped job sees it), then KILL after the grace. A job stopped for
        a preemption is killed at once: continued, its TERM handler would run on slots another job
        has (LSF's kill without time for clean-up)."""
        if self._given_away(key):
            self._kill_hard(key, pid)
            return
        self.host.killpg(pid, signal.SIGTERM)
        self.host.killpg(pid, signal.SIGCONT)
        self.host.call_later(grace_s, lambda: self._kill_hard(key, pid))

    def launch_check(self, request: api.LaunchTask, uid: int) -> str | None:
        """Whether `xce launch` in a job of this host may ask for this task: None, or why not."""
        record = self.journal.get((request.job_id, request.attempt))
        if record is None or record.get("state") not in ("running", "part") or not record.get("job"):
            return f"job {request.job_id} at attempt {request.attempt} runs nothing on this host"
        if not request.credential or record.get("credential") != request.credential:
            return "the job credential does not match"
        owner = api.Job.FromString(bytes.fromhex(record["job"])).spec.user
        account = self.host.account(owner)
        if uid != 0 and (account is None or account.uid != uid):
            return f"only the job's owner ({owner}) may launch its tasks"
        if not request.host or not request.command or not 0 < len(request.task_id) <= 64:
            return "a task needs a host, a command and a task id"
        return None

    def _mark_stopped(self, key: Key, stopped: bool, preempted: bool = False) -> None:
        """Journaled, with when: `stops` lists [stopped ms, continued ms or 0], so the time an instance
        held no CPU is on record (a preempted job's slots were its preemptor's then); `preempted` while
        it is stopped for a preemption (a restated stop may say so of a job stopped already)."""
        with self._lock:
            record = self.journal.get(key)
            if record is not None and record.get("state") in ("running", "part") and stopped and preempted \
                    and record.get("stopped") and not record.get("preempted"):
                record["preempted"] = True
                self.journal.put(key, record)
            if record is not None and record.get("state") in ("running", "part") \
                    and record.get("stopped", False) != stopped:
                record["stopped"] = stopped
                if stopped and preempted:
                    record["preempted"] = True
                else:
                    record.pop("preempted", None)
                stops = record.setdefault("stops", [])
                if stopped:
                    stops.append([self.clock.now_ms(), 0])
                elif stops:
                    stops[-1][1] = self.clock.now_ms()
                self.journal.put(key, record)

    def _confirm_stopped(self, key: Key, pid: int, tries: int = 0) -> None:
        """Report `suspended` once every process of the instance's group is stopped (T in /proc): what
        lets the leader give a preempted job's slots to its preemptor (controller/fsm/preempt.py)."""
        with self._lock:
            record = self.journal.get(key)
            current = self._running.get(key) == pid and record is not None and record.get("stopped")
        if not current:
            return  # ended, or continued meanwhile
        if self.host.group_stopped(pid):
            self._report(api.JobReport(job_id=key[0], attempt=key[1],
                                       suspended=api.JobSuspended(time_ms=self.clock.now_ms())))
        elif tries < CONFIRM_TRIES:
            self.host.call_later(CONFIRM_EVERY_S, lambda: self._confirm_stopped(key, pid, tries + 1))
        else:
            log.warning("job %d.%d: its processes did not all stop within %.0f s; not reported stopped", *key,
                        CONFIRM_TRIES * CONFIRM_EVERY_S)

    def fence(self, grace_s: float) -> list[Key]:
        """The worker-side fence: kill every running rerunnable instance (TERM, then KILL after
        grace_s); each is reported `fenced`, so the leader requeues it. The ones newly fenced."""
        fenced = []
        for key in self.running():
            with self._lock:
                part = key in self._parts
            if part:  # a part's tasks: the job is over once the leader gives this host up
                with self._lock:
                    self._parts.discard(key)
                self.tasks.over(key, 0.0 if self._given_away(key) else grace_s)
                fenced.append(key)
                continue
            with self._lock:  # not while its end is being journaled (_end): that record is the last word
                pid = self._running.get(key)
                record = self.journal.get(key) if pid is not None else None
                if pid is None or record is None or not record.get("rerunnable") or record.get("fenced"):
                    continue
                record["fenced"] = True  # journaled first: a restart in the grace still reports it fenced
                self.journal.put(key, record)
            fenced.append(key)
            self._terminate(key, pid, grace_s)
        return fenced

    def rereport(self, key: Key, acknowledged_too: bool = False) -> None:
        """Repeat what is known about an instance (after a reconnect or a repeated RunJob)."""
        record = self.journal.get(key)
        if record is None:
            return
        if record.get("state") == "part":  # after a re-join: the leader kills it if the job is over
            self._report(api.JobReport(job_id=key[0], attempt=key[1], started=api.JobStarted(part=True)))
        elif record.get("state") == "running":
            self._report(self._started(key, record))
        elif record.get("state") == "ended" and (acknowledged_too or not record.get("acked")):
            if record.get("pid"):
                self._report(self._started(key, record))
            self._report(_report_from(record["final"]))

    def acknowledged(self, key: Key, kind: str) -> None:
        if kind == "part_ended":
            self.tasks.acknowledged(key)
            return
        record = self.journal.get(key)
        if record is not None and record.get("state") == "ended" and kind != "started":
            record["acked"] = True
            self.journal.put(key, record)
            self._acks += 1
            if self._acks % PRUNE_EVERY_ACKS == 0:  # a full scan of the journal: not on every ack
                self.journal.prune_acked()

    def running(self, parts: bool = True) -> list[Key]:
        """The instances that run here: the jobs' commands, and (`parts`) the parts of parallel jobs
        whose first host is another (a join lists only the commands: recovery.py knows those)."""
        with self._lock:
            return list(self._running) + (sorted(self._parts - self._running.keys()) if parts else [])

    def close(self) -> None:
        self.host.close()  # first: an end heard meanwhile is still journaled
        with self._lock:  # an end heard later is left to the next executor's recovery (its status file)
            self._closed = True
            self.journal.close()

    # -------------------------------------------------------------- starting

    def _check(self, job: api.Job, draining_too: bool = True) -> tuple[Account | None, api.JobReport | None]:
        """The owner's account here, or the failed dispatch that says why the job cannot run here
        (`draining_too=False`: a task of a job that runs already, which draining does not stop)."""
        if draining_too and self._draining():
            return None, _failed(job, DRAINING, "worker draining")
        host_name = self.host.host_name()
        if not job.spec.user:
            return None, _failed(job, UNKNOWN_USER, "the job has no owner")
        account = self.host.account(job.spec.user)
        if account is None:
            return None, _failed(job, UNKNOWN_USER,
                                 f"user {job.spec.user} has no account on host {host_name}")
        worker_uid = self.host.euid()
        if account.uid == 0 and not self.allow_root_jobs:
            return None, _failed(job, USER_NOT_ALLOWED, f"host {host_name} runs no root jobs "
                                                        "(allow_root_jobs = false)")
        if worker_uid != 0 and account.uid != worker_uid:
            return None, _failed(job, USER_NOT_ALLOWED, f"the worker of host {host_name} is not root and "
                                                        f"cannot run jobs of {job.spec.user}")
        return account, None

    def _spawn(self, job: api.Job, account: Account, status_file: Path, task: api.LaunchTask | None = None,
               credential: str = "", gpus: list[int] | None = None) -> int:
        cwd = job.spec.cwd or account.home or "/"
        out = self._output(cwd, job.spec.stdout_path, job, account, "out")
        err = self._output(cwd, job.spec.stderr_path, job, account, "err")
        ids = {"XCE_JOB_ID": str(job.id), "XCE_JOB_ATTEMPT": str(job.attempt), "XCE_SPOOL": str(self.spool)}
        if task is not None:  # its own, so a restarted worker never takes it for the job's command
            ids["XCE_TASK_ID"] = task.task_id
            cwd = task.cwd or cwd
        env = {"HOME": account.home, "USER": account.name, "LOGNAME": account.name, "SHELL": account.shell,
               "PATH": DEFAULT_PATH, **job.spec.env, **(dict(task.env) if task is not None else {}),
               **self.job_env,
               **self._hosts_env(job, account, credential or (task.credential if task is not None else "")),
               **ids, "XCE_JOB_READABLE_ID": job.readable_id}
        if self.gpus:  # the indices it holds, no others (none for a job that reserved none)
            env["CUDA_VISIBLE_DEVICES"] = env["XCE_GPUS"] = ",".join(map(str, gpus or []))
        if job.array_id:  # an array's element: its index, also under LSF's name
            env.update(XCE_ARRAY_ID=str(job.array_id), XCE_ARRAY_INDEX=str(job.array_index),
                       LSB_JOBINDEX=str(job.array_index))
        switch = ["--user", account.name] if self.host.euid() == 0 else []
        # -I: the interpreter that stays root reads no PYTHON* variable, no user site, not the cwd;
        # -S: no site at all (half of its start-up). The shim is run as a file (it needs only the
        # standard library's built-in modules), installed or not.
        command = list(task.command) if task is not None else list(job.spec.command)
        # A working directory the job named is its own: if the owner cannot enter it, the job fails
        # (xce/start_failures.py). The owner's home is not the job's choice: a user without one runs
        # in /tmp, and is told so, as LSF does.
        home = not job.spec.cwd and not (task is not None and task.cwd)
        fallback = ["--cwd-fallback", HOME_FALLBACK] if home and cwd != HOME_FALLBACK else []
        # The default output files are the worker's choice, in its spool: failing to open them is the host's.
        spooled = ",".join(fd for fd, path in (("1", job.spec.stdout_path), ("2", job.spec.stderr_path))
                           if not path)
        spool = ["--spool-outputs", spooled] if spooled else []
        shim = [sys.executable, "-I", "-S", SHIM, str(status_file), *switch, "--cwd", cwd, *fallback,
                "--stdout", out, "--stderr", err, *spool, "--", *command]
        return self.host.spawn(shim, {"PATH": SHIM_PATH, **ids}, env_bytes(env), self.spool / "shims.log")

    def _hosts_env(self, job: api.Job, account: Account, credential: str) -> dict[str, str]:
        """Where the job runs, as LSF and PBS tell it: XCE_HOSTS/LSB_HOSTS (a host per slot),
        LSB_MCPU_HOSTS (host and slots), a host file (XCE_HOSTFILE, LSB_DJOB_HOSTFILE, a host per
        slot, like PBS_NODEFILE), and the credential `xce launch` presents."""
        parts = feasibility.allocation_of(job) or [feasibility.Part(self.name, job.spec.slots, {})]
        per_slot = [part.host for part in parts for _ in range(part.slots)]
        env = {"XCE_HOSTS": " ".join(per_slot), "LSB_HOSTS": " ".join(per_slot),
               "LSB_MCPU_HOSTS": " ".join(f"{part.host} {part.slots}" for part in parts),
               "LSB_DJOB_NUMPROC": str(len(per_slot))}
        if credential:
            env["XCE_JOB_CREDENTIAL"] = credential
        # In a directory only the worker writes (never the owner's: a link planted there would have
        # the worker write where it points), readable by everyone through the 0711 spool.
        hostfile = self.hostfile((job.id, job.attempt))
        try:
            hostfile.parent.mkdir(mode=0o755, exist_ok=True)
            fd = os.open(hostfile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
            with os.fdopen(fd, "w") as out:
                out.write("".join(f"{host}\n" for host in per_slot))
            env["XCE_HOSTFILE"] = env["LSB_DJOB_HOSTFILE"] = str(hostfile)
        except OSError as exc:
            log.warning("job %d.%d: no host file %s: %s", job.id, job.attempt, hostfile, exc)
        return env

    def _take_gpus(self, key: Key, job: api.Job, host: str) -> list[int] | None:
        """The GPU indices the job's part on `host` reserved (rusage[gpu=N]), the lowest free ones,
        held until its processes here have all ended; None if not so many are free."""
        wanted = next((int(p.resources.get("gpu", 0)) for p in feasibility.allocation_of(job)
                       if p.host == host), 0)
        with self._lock:
            if key in self._gpus:
                return self._gpus[key]
            if not wanted or not self.gpus:
                return []
            held = {index for indices in self._gpus.values() for index in indices}
            free = [index for index in range(self.gpus) if index not in held]
            if len(free) < wanted:
                return None
            self._gpus[key] = free[:wanted]
            return self._gpus[key]

    # -------------------------------------------------------------- while it runs: memory and usage (M6)

    def monitor(self, report_usage: bool) -> None:
        """One look at every job's processes here (one read of /proc): a job's part past its
        memory limit (-M, else its rusage[mem=] here) is killed and ends with exit reason MEMLIMIT;
        with `report_usage`, each job's usage on its first host is reported (at a bounded rate:
        the caller's). RSS is the sum over its processes now, CPU what they used so far."""
        with self._lock:
            mains, parts = dict(self._running), set(self._parts)
            limits, run_limits = dict(self._limits), dict(self._run_limits)
        if not mains and not parts:
            return  # nothing runs here: no need to read every process of the host
        now = self.clock.now_ms()
        ended: set[Key] = set()
        for key, run_limit in sorted(run_limits.items()):
            if key in mains and self._ran_ms(key, now) > run_limit:
                self._runlimit(key, mains[key], run_limit)
                ended.add(key)
        sessions = self.host.sessions_usage()
        for key in sorted(set(mains) | parts):
            pids = ([mains[key]] if key in mains else []) + self.tasks.pids(key)
            rss = sum(sessions.get(pid, (0, 0.0))[0] for pid in pids)
            cpu = sum(sessions.get(pid, (0, 0.0))[1] for pid in pids)
            limit = limits.get(key, 0) if key not in ended else 0  # (killed for its run limit just now)
            with self._lock:
                over = bool(limit) and rss > limit and key not in self._memlimited
                if over:
                    self._memlimited.add(key)
            if over:
                self._memlimit(key, mains.get(key), rss, limit)
            if report_usage and key in mains:
                record = self.journal.get(key) or {}
                wall = max(0.0, (now - int(record.get("started_ms", now))) / 1000)
                self._report(api.JobReport(job_id=key[0], attempt=key[1], usage_now=api.UsageNow(
                    usage=api.Usage(user_cpu_s=cpu, max_rss_kb=rss, wall_s=wall), time_ms=now)))

    def _ran_ms(self, key: Key, now: int) -> int:
        """How long the instance has run: since its start, less the time it was stopped (journaled)."""
        record = self.journal.get(key) or {}
        stopped = sum(int(end or now) - int(begin) for begin, end in record.get("stops", ()))
        return now - int(record.get("started_ms", now)) - stopped

    def _runlimit(self, key: Key, pid: int, limit_ms: int) -> None:
        log.warning("job %d.%d ran past its run limit of %d s: killed (RUNLIMIT)", *key, limit_ms // 1000)
        with self._lock:  # journaled first: its end says why, even after a restart
            self._run_limits.pop(key, None)  # once
            record = self.journal.get(key)
            if record is not None and record.get("state") == "running":
                record["runlimit"] = True
                self.journal.put(key, record)
        self._terminate(key, pid, self.kill_grace_s)
        self.tasks.over(key, 0.0 if self._given_away(key) else None)

    def _memlimit(self, key: Key, pid: int | None, rss: int, limit: int) -> None:
        log.warning("job %d.%d uses %d KB, past its memory limit of %d KB: killed (MEMLIMIT)", *key, rss,
                    limit)
        if pid is not None:
            with self._lock:  # journaled first: its end says why, even after a restart
                record = self.journal.get(key)
                if record is not None and record.get("state") == "running":
                    record["memlimit"] = True
                    self.journal.put(key, record)
            self._terminate(key, pid, min(self.kill_grace_s, 1.0))
        self.tasks.over(key, 0.0 if self._given_away(key) else min(self.kill_grace_s, 1.0))

    def release_gpus(self, key: Key, locked: bool = False) -> None:
        """`locked`: the caller holds the executor's lock already."""
        if locked:
            self._gpus.pop(key, None)
            return
        with self._lock:
            self._gpus.pop(key, None)

    def _held_gpus(self) -> str:
        with self._lock:
            held = sorted(self._gpus.items())
        return ", ".join(f"{j}.{a}: {indices}" for (j, a), indices in held) or "none"

    def hostfile(self, key: Key) -> Path:
        return self.spool / "hosts" / f"{key[0]}.{key[1]}"

    def forget_hostfile(self, key: Key) -> None:
        try:
            self.hostfile(key).unlink()
        except OSError:
            pass

    def read_status(self, path: str) -> dict[str, Any]:
        """A shim's status file, or {} if it left none."""
        try:
            status = json.loads(Path(path).read_text())
        except (OSError, ValueError):
            return {}
        return status if isinstance(status, dict) else {}

    def output_tail(self, job: api.Job, stderr: bool, tail: int) -> api.OutputAnswer:
        """The end of an instance's stdout or stderr file, for the leader (GetJobOutput): where
        `_spawn` put it. Read as the job's owner, through no symbolic link, a regular file of the
        owner's only (worker/output_reader.py): the owner chose the path."""
        account, refused = self._check(job, draining_too=False)  # whose jobs this host runs at all
        if account is None:
            reason = refused.dispatch_failed.reason if refused is not None else "no account"
            return api.OutputAnswer(error=reason)
        suffix, chosen = ("err", job.spec.stderr_path) if stderr else ("out", job.spec.stdout_path)
        cwd = job.spec.cwd or account.home or "/"
        # (the spool resolved: its own path may hold a link, which output reads never pass through)
        path = str(Path(cwd) / output_path(chosen, job)) if chosen else \
            str(self.spool.resolve() / "users" / account.name / f"{job.id}.{job.attempt}.{suffix}")
        try:
            data, size = self.host.read_output(account, path, tail, self.spool / "shims.log")
        except OutputUnreadable as exc:
            return api.OutputAnswer(path=path, error=str(exc))
        return api.OutputAnswer(path=path, data=data, size=size)

    def _output(self, cwd: str, path: str, job: api.Job, account: Account, suffix: str) -> str:
        """A path the owner chose (relative to the cwd), or the owner's own directory in the spool."""
        if path:
            return str(Path(cwd) / output_path(path, job))
        return str(self.host.owner_dir(self.spool / "users" / account.name, account) /
                   f"{job.id}.{job.attempt}.{suffix}")

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
            code = status.get("code", START_FAILED)
            report.dispatch_failed.code = code if isinstance(code, int) and code in CODES else START_FAILED
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
        # The fence marks the journal's record (this one may be the copy the watch started with).
        journaled = self._journaled(key)
        finished.fenced = bool(record.get("fenced") or journaled.get("fenced"))
        if record.get("memlimit") or journaled.get("memlimit"):
            finished.exit_reason = "MEMLIMIT"
        elif record.get("runlimit") or journaled.get("runlimit"):
            finished.exit_reason = "RUNLIMIT"
        return report

    def _journaled(self, key: Key) -> dict[str, Any]:
        """The instance's journal record ({} once the executor closed: a watch may end after it)."""
        with self._lock:
            return {} if self._closed else (self.journal.get(key) or {})

    def _end(self, key: Key, record: dict[str, Any], report: api.JobReport) -> None:
        record.update(state="ended", final=report.SerializeToString().hex())
        record.pop("job", None)  # only tasks of a running job need it
        with self._lock:
            if self._closed:
                return
            latest = self.journal.get(key) or {}  # `record` may be the watch's first copy
            given_away = _stopped_for_preemption(latest)
            if latest.get("stops"):
                record["stops"] = latest["stops"]
            self.journal.put(key, record)
            self._running.pop(key, None)
            self._limits.pop(key, None)
            self._run_limits.pop(key, None)
            self._memlimited.discard(key)
        if report.HasField("finished"):
            f = report.finished
            log.info("job %d.%d ended: exit %d signal %d%s", *key, f.exit_code, f.term_signal,
                     " (status unknown)" if f.status_unknown else "")
        self._report(report)
        # The job's command ended: its tasks here end too (after its end is told); at once if it was
        # stopped for a preemption.
        self.tasks.over(key, 0.0 if given_away else None)

    def _started(self, key: Key, record: dict[str, Any]) -> api.JobReport:
        return api.JobReport(job_id=key[0], attempt=key[1], started=api.JobStarted(
            pid=int(record.get("pid", 0)), time_ms=int(record.get("started_ms", 0))))

    def _kill_hard(self, key: Key, pid: int) -> None:
        with self._lock:
            still = self._running.get(key) == pid
        if still:
            self._killed_hard.add(key)
            self.host.killpg(pid, signal.SIGKILL)


def _stopped_for_preemption(record: dict[str, Any]) -> bool:
    return bool(record.get("stopped") and record.get("preempted"))


def _mem_limit_kb(job: api.Job, host: str) -> int:
    """The memory limit of the job's part on `host`, in KB: its -M, else its rusage[mem=] there; 0: none."""
    if job.spec.mem_limit_mb > 0:
        return job.spec.mem_limit_mb * 1024
    part = next((p for p in feasibility.allocation_of(job) if p.host == host), None)
    return int(part.resources.get("mem", 0)) * 1024 if part is not None else 0


def _failed(job: api.Job, code: int, reason: str) -> api.JobReport:
    return api.JobReport(job_id=job.id, attempt=job.attempt,
                         dispatch_failed=api.DispatchFailed(code=code, reason=reason))


def _report_from(hex_bytes: str) -> api.JobReport:
    return api.JobReport.FromString(bytes.fromhex(hex_bytes))


def output_path(path: str, job: api.Job) -> str:
    """bsub's -o/-e patterns: %J the job's id (an element's: its array's), %I the array index (0 for a
    job that is not an element), %% a percent sign."""
    values = {"J": str(job.array_id or job.id), "I": str(job.array_index if job.array_id else 0), "%": "%"}
    out, i = [], 0
    while i < len(path):
        if path[i] == "%" and i + 1 < len(path) and path[i + 1] in values:
            out.append(values[path[i + 1]])
            i += 2
        else:
            out.append(path[i])
            i += 1
    return "".join(out)


def env_bytes(env: dict[str, str]) -> bytes:
    """The job's environment as the shim reads it: NAME=VALUE items, NUL-separated (a NUL inside a
    name or value cannot reach exec anyway; the controller refuses none, so it is dropped here)."""
    return b"\0".join(f"{k}={v}".replace("\0", "").encode() for k, v in env.items())


