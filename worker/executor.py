"""Running job instances on this host as process groups, surviving worker restarts.

Theory of operation. `run(job)` starts at most one instance per (job id,
attempt), ever: the journal (journal.py) records the instance before its
process starts, and a repeat only repeats its reports. Each instance is its
own session and process group, led by the shim (shim.py), which runs the
command with its working directory, environment and stdout/stderr files
(default: the owner's directory in the spool, `users/<owner>/<job>.<attempt>.out|.err`,
like LSF's -o/-e, with %J and %I; relative paths are relative to the working directory) and
writes how the command ended, with its usage, to a status file. The
command line and the environment are spawn.py's.

Jobs run as their owner, the user the controller authenticated, never as
the worker's user: an owner with no account here, a root owner without
`allow_root_jobs`, or (on a worker that is not root) any other user than the
worker's is a failed dispatch that says why (instances.py, `check`). Each
failed start has a code that says whose fault it is (xce/start_failures.py:
the job's own command, working directory or output file; its owner's on this
host; this host's), which decides what the controller makes of it. A job
that names no working directory runs in its owner's home, or in /tmp if the
owner has none.

A started instance is watched by the process host (process_host.py): wait4
on the shim when this worker started it, otherwise (re-adopted after a worker
restart: same pid and same process start time, recovery.py) polling /proc
until it is gone. Either way the outcome is read from the status file;
without one (the shim was killed with the job) the report says which signal
ended it if known, or "exit status unknown". An instance that ended while
the worker was down is reported the same way when the worker comes back (H4).
While it runs, its limits are watched (monitor.py) and it holds its GPUs
(gpus.py).

Reports go to `report`; the daemon sends them until acknowledged and calls
`acknowledged` then. Nothing here knows about gRPC; processes, files, time and
the journal are injected (a ProcessHost, a Files, a Clock, a journal), so the
protocol simulation runs this very code on a simulated host.
"""

from __future__ import annotations

import errno
import logging
import os
import select
import signal
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from worker import mail, output_tail, recovery
from worker.instances import Files, Instances, RealFiles, failed
from worker.journal import KEEP_ACKED, Journal, JournalStore
from worker.monitor import Monitor, warning_of
from worker.process_host import ProcessHost, RealProcessHost, start_ticks
from worker.tasks import Tasks
from xce.clock import REAL_CLOCK, Clock
from xce.rules import feasibility, warning_signal
from xce.start_failures import CODES, START_FAILED
from xce.start_held import holds_start
from xce.v1 import api_pb2 as api

log = logging.getLogger("xce.worker")

Key = tuple[int, int]

PRUNE_EVERY_ACKS = 100
CONFIRM_EVERY_S, CONFIRM_TRIES = 0.05, 600  # a stopped group is looked for in /proc for up to 30 s


STOPPED = (api.USUSP, api.SSUSP)


class Executor:
    def __init__(self, spool: Path, kill_grace_s: float, report: Callable[[api.JobReport], None],
                 draining: Callable[[], bool] = lambda: False, keep_acked: int = KEEP_ACKED,
                 host: ProcessHost | None = None, clock: Clock = REAL_CLOCK,
                 journal: JournalStore | None = None, allow_root_jobs: bool = False, name: str = "",
                 tell: Callable[[api.TaskState], None] = lambda state: None,
                 job_env: dict[str, str] | None = None, gpus: int = 0, files: Files | None = None,
                 mail_command: Sequence[str] = mail.DEFAULT_COMMAND) -> None:
        files = files or RealFiles()
        files.make_spool(Path(spool))
        self.journal: JournalStore = journal or Journal(Path(spool) / "journal", keep_acked)
        self.host = host or RealProcessHost()
        self.instances = self._i = Instances(spool, self.host, self.journal, clock, files, name, job_env,
                                             gpus, allow_root_jobs, draining, kill_grace_s)
        self.spool, self.clock, self.name, self.kill_grace_s = self._i.spool, clock, name, kill_grace_s
        self._report = report
        self.mail_command = tuple(mail_command)
        self._killed_hard: set[Key] = set()  # SIGKILLed by us: the end is known even without a status
        self._acks = 0
        self.tasks = Tasks(self._i, report, tell)
        self.monitoring = Monitor(self._i, self.tasks, self._terminate, self._given_away, report,
                                  self._signal_command)

    def report(self, report: api.JobReport) -> None:
        self._report(report)

    def recover(self) -> None:
        """After a restart: re-adopt live instances and tasks, report the ended ones (recovery.py)."""
        recovery.recover(self)

    def monitor(self, report_usage: bool) -> None:
        """One look at every job's processes here: limits, and (`report_usage`) usage (monitor.py)."""
        self.monitoring.look(report_usage)

    def output_tail(self, job: api.Job, stderr: bool, tail: int) -> api.OutputAnswer:
        """The end of an instance's stdout or stderr file, for the leader (output_tail.py)."""
        return output_tail.output_tail(self._i, job, stderr, tail)

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
            # A start the RunJob already holds as this host has it is not said again (a new
            # leader restates every running instance: thousands of reports that change nothing).
            if not (known.get("state") == "running" and holds_start(job, self._started(key, known).started)):
                self.rereport(key, acknowledged_too=True)
            self._hold(key, job)  # a RunJob states whether the job should be stopped
            return  # (a record of another cluster's job with the same numbers is replaced below)
        if job.state == api.UNKWN:  # the leader asks after an instance this host never had
            record: dict[str, Any] = {"state": "starting", "status_file": "", "readable_id": job.readable_id}
            self.end(key, record, failed(job, START_FAILED, "this host has no record of the job"))
            return
        if job.kill_requested:  # killed before it reached this host: never start it
            record = {"state": "starting", "status_file": "", "readable_id": job.readable_id}
            self.end(key, record, api.JobReport(job_id=job.id, attempt=job.attempt, finished=api.JobFinished(
                term_signal=signal.SIGKILL, time_ms=self.clock.now_ms())))
            return
        account, failure = self._i.check(job)
        status_file = self._i.status_file(key)
        record = self._starting(job, credential, str(status_file))
        if failure is None:
            gpus = self._i.gpus.take(key, job, job.host or self.name)
            if gpus is None:
                failure = failed(job, START_FAILED, f"no free GPU index on host {self.name} "
                                                     f"(held: {self._i.gpus.held_text()})")
            else:
                record["gpus"] = gpus
        if failure is not None:
            log.warning("job %d.%d not started: %s", job.id, job.attempt, failure.dispatch_failed.reason)
            self.end(key, record, failure)
            return
        self.journal.put(key, record)
        try:
            assert account is not None
            pid = self._i.spawn(job, account, status_file, credential=credential, gpus=record.get("gpus"))
        except Exception as exc:  # noqa: BLE001 - one bad job must not take the worker down
            self.end(key, record, failed(job, START_FAILED, f"start failed: {exc}"))
            return
        record.update(state="running", pid=pid, pid_start=self.host.start_ticks(pid),
                      started_ms=self.clock.now_ms(), started_mono_ms=self._mono_ms())
        if record.get("warning_to") == api.WARNING_TO_SHELL:
            record["uid"] = account.uid  # whom its batch shell must still run as, to be sent its warning
        self.journal.put(key, record)
        with self._i.lock:
            self._i.running[key] = pid
            self.monitoring.track(key, int(record.get("mem_limit_kb", 0)), int(record.get("run_limit_ms", 0)),
                                  int(record.get("term_time_ms", 0)), warning_of(record))
        log.info("job %d.%d started, pid %d", job.id, job.attempt, pid)
        self._report(self._started(key, record))
        if job.spec.mail_begin and mail.recipient(job):  # bsub -B
            mail.send(self.mail_command, mail.recipient(job),
                      mail.start_message(job, self.name, int(record["started_ms"])))
        if job.state in STOPPED:  # stopped before it reached this host
            self._hold(key, job)
        self.watch(key, record, started_here=True)

    def _starting(self, job: api.Job, credential: str, status_file: str) -> dict[str, Any]:
        """The journal's record of an instance about to start (journaled before the start)."""
        record: dict[str, Any] = {"state": "starting", "status_file": status_file,
                                  "readable_id": job.readable_id, "rerunnable": job.spec.rerunnable,
                                  "slots": _slots_here(job), "credential": credential}
        if credential:  # what a task launched into it needs (tasks.py); dropped at its end
            record["job"] = job.SerializeToString().hex()
        if job.spec.mail_end and mail.recipient(job):  # bsub -N: the report's words need the job
            record["mail_job"] = job.SerializeToString().hex()
        limit = _mem_limit_kb(job, job.host or self.name)
        if limit:
            record["mem_limit_kb"] = limit
        if job.spec.run_limit_s > 0:
            record["run_limit_ms"] = job.spec.run_limit_s * 1000
            wrong = warning_signal.problem(job.spec)
            if wrong:  # (stored unchecked by a leader older than entry format 26: never acted on)
                log.warning("job %d.%d: its warning signal is not kept: %s", job.id, job.attempt, wrong)
            elif job.spec.warning_signal > 0:  # (without a run limit it is never due)
                record.update(warning_signal=job.spec.warning_signal, warning_to=int(job.spec.warning_to),
                              warning_ms=max(0, job.spec.run_limit_s - job.spec.warning_time_s) * 1000)
        if job.spec.term_time_ms > 0:
            record["term_time_ms"] = job.spec.term_time_ms
        return record

    def _part(self, key: Key, job: api.Job, credential: str) -> None:
        """The job's part on this host of its allocation (its first host is another): a record for
        the tasks `xce launch` may start here; no process of its own."""
        known = self.journal.get(key)
        if known is None or known.get("readable_id") != job.readable_id:
            if job.state == api.UNKWN or job.kill_requested:
                return
            known = {"state": "part", "readable_id": job.readable_id, "credential": credential,
                     "job": job.SerializeToString().hex(), "slots": _slots_here(job, self.name),
                     "part_ms": self.clock.now_ms(),  # when this host learned of its part (the soak reads it)
                     "part_mono_ms": self._mono_ms()}
            limit = _mem_limit_kb(job, self.name)
            if limit:
                known["mem_limit_kb"] = limit
                with self._i.lock:
                    self.monitoring.track(key, limit)
            gpus = self._i.gpus.take(key, job, self.name)
            if gpus is None:  # the barrier counted them free: a record from before says otherwise
                log.error("job %d.%d: no free GPU index for its part here (held: %s)", *key,
                          self._i.gpus.held_text())
            else:
                known["gpus"] = gpus
            self.journal.put(key, known)
            with self._i.lock:
                self._i.parts.add(key)
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
        with self._i.lock:
            pid = self._i.running.get(key)
            part = key in self._i.parts
        if part and kind == api.SIGNAL_KILL:
            with self._i.lock:
                self._i.parts.discard(key)
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
        with self._i.lock:
            pid = self._i.running.get(key)
            record = self.journal.get(key) or {}
            if pid is None or int(record.get("checkpointed", 0)) >= number:
                return
            record["checkpointed"] = number
            self.journal.put(key, record)
        self.host.killpg(pid, sig)

    def _signal_command(self, key: Key, shim: int, sig: int) -> None:
        """The job's command alone, not its group: the batch shell (sbatch --signal=B:), the child of the
        shim that leads the group, if it still runs as the job's owner. A simulated host's one process
        stands for both."""
        if not isinstance(self.host, RealProcessHost):
            self.host.killpg(shim, sig)
            return
        record = self.journal.get(key) or {}
        if record.get("uid") is None or record.get("pid_start") is None:
            log.warning("job %d.%d: its warning not sent: its owner or its shim's start is not known", *key)
            return
        why = _signal_children(shim, int(record["pid_start"]), int(record["uid"]), sig)
        if why:
            log.warning("job %d.%d: its warning to its batch shell not sent: %s", *key, why)

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

    def launch(self, request: api.LaunchTask) -> api.TaskState:
        """A task of a job here, asked for by `xce launch` on one of its hosts (tasks.py)."""
        return self.tasks.launch(request)

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
        with self._i.lock:
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
                stops_mono = record.setdefault("stops_mono", [])  # the same, on the monotonic clock
                if stopped:
                    stops.append([self.clock.now_ms(), 0])
                    stops_mono.append([self._mono_ms(), 0])
                elif stops:
                    stops[-1][1] = self.clock.now_ms()
                    if stops_mono:
                        stops_mono[-1][1] = self._mono_ms()
                self.journal.put(key, record)

    def _confirm_stopped(self, key: Key, pid: int, tries: int = 0) -> None:
        """Report `suspended` once every process of the instance's group is stopped (T in /proc): what
        lets the leader give a preempted job's slots to its preemptor (controller/fsm/preempt.py)."""
        with self._i.lock:
            record = self.journal.get(key)
            current = self._i.running.get(key) == pid and record is not None and record.get("stopped")
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
            with self._i.lock:
                part = key in self._i.parts
            if part:  # a part's tasks: the job is over once the leader gives this host up
                with self._i.lock:
                    self._i.parts.discard(key)
                self.tasks.over(key, 0.0 if self._given_away(key) else grace_s)
                fenced.append(key)
                continue
            with self._i.lock:  # not while its end is being journaled (_end): that record is the last word
                pid = self._i.running.get(key)
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
            self._report(self._started(key, record, again=True))
        elif record.get("state") == "ended" and (acknowledged_too or not record.get("acked")):
            if record.get("pid"):
                self._report(self._started(key, record, again=True))
            self._report(_report_from(record["final"]))

    def acknowledged(self, key: Key, kind: str) -> None:
        if kind == "part_ended":
            self.tasks.acknowledged(key)
            return
        record = self.journal.get(key)
        if record is not None and record.get("state") == "ended" and kind != "started":
            record["acked"] = True
            self.journal.put_lazily(key, record)  # lost to a crash, the end is reported again
            self._acks += 1
            if self._acks % PRUNE_EVERY_ACKS == 0:  # a full scan of the journal: not on every ack
                self.journal.prune_acked()

    def running(self, parts: bool = True) -> list[Key]:
        """The instances that run here: the jobs' commands, and (`parts`) the parts of parallel jobs
        whose first host is another (a join lists only the commands: recovery.py knows those)."""
        with self._i.lock:
            return list(self._i.running) + (sorted(self._i.parts - self._i.running.keys()) if parts else [])

    def close(self) -> None:
        self.host.close()  # first: an end heard meanwhile is still journaled
        with self._i.lock:  # an end heard later is left to the next executor's recovery (its status file)
            self._i.closed = True
            self.journal.close()

    # -------------------------------------------------------------- ending

    def watch(self, key: Key, record: dict[str, Any], started_here: bool) -> None:
        def ended(shim_signal: int) -> None:
            self.end(key, record, self.finished(key, record, shim_signal))

        self.host.watch(record["pid"], started_here, record.get("pid_start"), ended)

    def _mono_ms(self) -> int:
        """The host's monotonic clock (shared by its processes, moved by no wall-clock jump): the soak's
        evidence of when an instance ran beside the wall-clock times (docs/FAULTS.md)."""
        return int(self.clock.monotonic_s() * 1000)

    def finished(self, key: Key, record: dict[str, Any], shim_signal: int | None) -> api.JobReport:
        report = api.JobReport(job_id=key[0], attempt=key[1])
        status = self._i.read_status(record["status_file"])
        if "start_error" in status:
            code = status.get("code", START_FAILED)
            report.dispatch_failed.code = code if isinstance(code, int) and code in CODES else START_FAILED
            report.dispatch_failed.reason = str(status["start_error"])[:500]
            return report
        finished = report.finished
        finished.time_ms = int(status.get("time_ms") or self.clock.now_ms())
        record["ended_mono_ms"] = int(status.get("mono_ms") or self._mono_ms())
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
        journaled = self._i.journaled(key)
        finished.fenced = bool(record.get("fenced") or journaled.get("fenced"))
        if record.get("memlimit") or journaled.get("memlimit"):
            finished.exit_reason = "MEMLIMIT"
        elif record.get("runlimit") or journaled.get("runlimit"):
            finished.exit_reason = "RUNLIMIT"
        elif record.get("deadline") or journaled.get("deadline"):
            finished.exit_reason = "DEADLINE"
        return report

    def end(self, key: Key, record: dict[str, Any], report: api.JobReport) -> None:
        record.update(state="ended", final=report.SerializeToString().hex())
        record.pop("job", None)  # only tasks of a running job need it
        mailed = record.pop("mail_job", None)  # bsub -N: its report, once its end is journaled
        with self._i.lock:
            if self._i.closed:
                return
            latest = self.journal.get(key) or {}  # `record` may be the watch's first copy
            given_away = _stopped_for_preemption(latest)
            if latest.get("stops"):
                record["stops"] = latest["stops"]
                record["stops_mono"] = latest.get("stops_mono", [])
            self.journal.put(key, record)
            self._i.running.pop(key, None)
            self.monitoring.forget(key)
        if mailed is not None:
            self._mail_end(api.Job.FromString(bytes.fromhex(mailed)), record, report)
        if report.HasField("finished"):
            f = report.finished
            log.info("job %d.%d ended: exit %d signal %d%s", *key, f.exit_code, f.term_signal,
                     " (status unknown)" if f.status_unknown else "")
        self._report(report)
        # The job's command ended: its tasks here end too (after its end is told); at once if it was
        # stopped for a preemption.
        self.tasks.over(key, 0.0 if given_away else None)

    def _mail_end(self, job: api.Job, record: dict[str, Any], report: api.JobReport) -> None:
        """bsub -N: the job report, when its command ended here (not a part on another host of it),
        or could not start. Sent once: the journaled record no longer holds the job to mail."""
        if job.spec.mail_end and mail.recipient(job) and (
                report.HasField("finished") or report.HasField("dispatch_failed")):
            mail.send(self.mail_command, mail.recipient(job),
                      mail.end_message(job, self.name, report, int(record.get("started_ms", 0))))

    def _started(self, key: Key, record: dict[str, Any], again: bool = False) -> api.JobReport:
        return api.JobReport(job_id=key[0], attempt=key[1], started=api.JobStarted(
            pid=int(record.get("pid", 0)), time_ms=int(record.get("started_ms", 0)), again=again))

    def _kill_hard(self, key: Key, pid: int) -> None:
        with self._i.lock:
            still = self._i.running.get(key) == pid
        if still:
            self._killed_hard.add(key)
            self.host.killpg(pid, signal.SIGKILL)


def _signal_children(parent: int, parent_ticks: int, uid: int, sig: int) -> str:
    """`sig` to each child of `parent` in its group (a shim's: the job's command) that runs as `uid`
    alone; "" or why none was sent. The worker runs as root, so each process is pinned before it is
    trusted: the shim by a pidfd and the start time journaled with it (its number, reused, is another
    job's shim), each child by a pidfd, then looked at again, while the shim is seen still running. A
    child that became another user (sudo, a setuid program) is not signalled by root for the job's
    owner. This machine's processes only: the executor calls it for a RealProcessHost alone."""
    try:
        shim = os.pidfd_open(parent)
    except OSError as exc:
        return f"its shim {parent} cannot be pinned ({errno.errorcode.get(exc.errno or 0, exc.errno)})"
    try:
        if start_ticks(parent) != parent_ticks:
            return f"its shim {parent} ended"
        with os.scandir("/proc") as entries:
            children = [int(e.name) for e in entries if e.name.isascii() and e.name.isdigit()
                        and _parent_and_group(int(e.name)) == (parent, parent)]
        sent = sum(_signal_child(pid, parent, shim, uid, sig) for pid in children)
        return "" if sent else "no process of the job's owner's is its shim's child"
    finally:
        os.close(shim)


def _signal_child(pid: int, parent: int, shim: int, uid: int, sig: int) -> bool:
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return False  # it ended meanwhile
    try:
        # The process opened is the one looked at, it runs as the owner, and its parent is the shim.
        if _parent_and_group(pid) != (parent, parent) or _uids(pid) != {uid} or _ended(shim):
            return False
        signal.pidfd_send_signal(fd, sig)
        return True
    except OSError:
        return False  # it ended meanwhile
    finally:
        os.close(fd)


def _uids(pid: int) -> set[int]:
    """Its real, effective, saved and file-system uids (/proc/PID/status), or none if it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Uid:"):
                    return {int(n) for n in line.split()[1:]}
    except (OSError, ValueError):
        pass
    return set()


def _ended(pidfd: int) -> bool:
    """Whether the pinned process ended (its pidfd is readable then)."""
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    return bool(poller.poll(0))


def _parent_and_group(pid: int) -> tuple[int, int] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[1]), int(fields[2])
    except (OSError, IndexError, ValueError):
        return None


def _stopped_for_preemption(record: dict[str, Any]) -> bool:
    return bool(record.get("stopped") and record.get("preempted"))


def _mem_limit_kb(job: api.Job, host: str) -> int:
    """The memory limit of the job's part on `host`, in KB: its -M, else its rusage[mem=] there; 0: none."""
    if job.spec.mem_limit_mb > 0:
        return job.spec.mem_limit_mb * 1024
    part = next((p for p in feasibility.allocation_of(job) if p.host == host), None)
    return int(part.resources.get("mem", 0)) * 1024 if part is not None else 0


def _slots_here(job: api.Job, host: str = "") -> int:
    """The job's part of its allocation on `host` (default: its first, which runs the command;
    all its slots unless it spans hosts)."""
    parts = feasibility.allocation_of(job)
    mine = [p for p in parts if p.host == host] if host else parts[:1]
    return mine[0].slots if mine else job.spec.slots


def _report_from(hex_bytes: str) -> api.JobReport:
    return api.JobReport.FromString(bytes.fromhex(hex_bytes))

