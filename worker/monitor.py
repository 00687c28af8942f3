"""While jobs run: their memory and run limits, and their usage for the leader.

Theory of operation. `look` is one look at every instance here (one read
of the host's processes, ProcessHost.sessions_usage): a job's command that
has run its run limit less its warning time (sbatch --signal, bsub -wa/-wt;
stopped time not counted) is sent its warning signal, once: to its process
group and its tasks here, to its batch shell alone (--signal=B:), or to its
tasks alone (--signal without B:, Slurm's steps); a job's command past
its run limit (-W, less the time it was stopped) is killed with exit
reason RUNLIMIT; a job's part past its memory limit (-M, else its
rusage[mem=] on this host) is killed with MEMLIMIT, its command and its
tasks here. Why it was killed, and that its warning was sent, is journaled
before the kill or the signal, so its end says so, and the warning is not
sent again, even after a worker restart. With `report_usage`, each job's usage
on its first host is reported (at the caller's bounded rate): RSS the sum
over its processes now, CPU what they used so far. The limits are kept
under the instances' lock; the killing is the executor's (`terminate`).
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from worker.instances import Instances
from xce.v1 import api_pb2 as api

if TYPE_CHECKING:
    from worker.tasks import Tasks

log = logging.getLogger("xce.worker")

Key = tuple[int, int]
MEMLIMIT_GRACE_S = 1.0  # at most this long from TERM to KILL for a job past its memory limit
DEADLINE_GRACE_S = 600.0  # bsub -t: from SIGUSR2 at the termination time to the kill, as LSF's ten minutes


@dataclass(frozen=True)
class WarningSignal:
    """A job's warning before its run limit (sbatch --signal, bsub -wa/-wt), as journaled with it."""
    due_ms: int  # the run time (stopped time not counted) from which it is sent
    signal: int
    to: int  # api.WarningTarget


def warning_of(record: dict[str, Any]) -> WarningSignal | None:
    """The warning journaled with an instance (executor.py), unless it was sent (`warned`)."""
    if not record.get("warning_signal") or record.get("warned"):
        return None
    return WarningSignal(int(record.get("warning_ms", 0)), int(record["warning_signal"]),
                         int(record.get("warning_to", api.WARNING_TO_JOB)))


class Monitor:
    def __init__(self, instances: Instances, tasks: Tasks, terminate: Callable[[Key, int, float], None],
                 given_away: Callable[[Key], bool], report: Callable[[api.JobReport], None],
                 signal_command: Callable[[Key, int, int], None]) -> None:
        """`signal_command(key, pid, sig)`: the signal to the command alone of the instance `key`, whose
        shim is pid."""
        self._i = instances
        self._tasks = tasks
        self._terminate = terminate
        self._given_away = given_away
        self._report = report
        self._signal_command = signal_command
        self._limits: dict[Key, int] = {}  # memory limits (KB) of the instances and parts running here
        self._memlimited: set[Key] = set()  # killed for passing theirs
        self._run_limits: dict[Key, int] = {}  # run limits (-W, ms) of the instances running here
        self._deadlines: dict[Key, int] = {}  # termination times (-t, this host's clock, ms)
        self._warnings: dict[Key, WarningSignal] = {}  # warnings not sent yet

    def track(self, key: Key, mem_limit_kb: int = 0, run_limit_ms: int = 0, term_time_ms: int = 0,
              warning: WarningSignal | None = None) -> None:
        """Watch the instance's limits (0: none) and its warning. Under the instances' lock."""
        if mem_limit_kb:
            self._limits[key] = mem_limit_kb
        if run_limit_ms:
            self._run_limits[key] = run_limit_ms
        if term_time_ms:
            self._deadlines[key] = term_time_ms
        if warning is not None:
            self._warnings[key] = warning

    def forget(self, key: Key) -> None:
        """The instance ended. Under the instances' lock."""
        self._limits.pop(key, None)
        self._run_limits.pop(key, None)
        self._deadlines.pop(key, None)
        self._warnings.pop(key, None)
        self._memlimited.discard(key)

    def look(self, report_usage: bool) -> None:
        with self._i.lock:
            mains, parts = dict(self._i.running), set(self._i.parts)
            limits, run_limits, deadlines = dict(self._limits), dict(self._run_limits), dict(self._deadlines)
            warnings = dict(self._warnings)
        if not mains and not parts:
            return  # nothing runs here: no need to read every process of the host
        now = self._i.clock.now_ms()
        for key in sorted(warnings):  # (before the run limits: a warning 0 s before it comes first)
            if key in mains and self._ran_ms(key, now) >= warnings[key].due_ms and not self._stopped(key):
                self._warn(key, mains[key], warnings[key])  # (a stopped job's waits until it continues)
        ended: set[Key] = set()
        for key, run_limit in sorted(run_limits.items()):
            if key in mains and self._ran_ms(key, now) > run_limit:
                self._runlimit(key, mains[key], run_limit)
                ended.add(key)
        for key, deadline in sorted(deadlines.items()):
            if key in mains and key not in ended and now >= deadline:
                self._deadline(key, mains[key])
                ended.add(key)
        sessions = self._i.host.sessions_usage()
        for key in sorted(set(mains) | parts):
            pids = ([mains[key]] if key in mains else []) + self._tasks.pids(key)
            rss = sum(sessions.get(pid, (0, 0.0))[0] for pid in pids)
            cpu = sum(sessions.get(pid, (0, 0.0))[1] for pid in pids)
            limit = limits.get(key, 0) if key not in ended else 0  # (killed for its run limit just now)
            with self._i.lock:
                over = bool(limit) and rss > limit and key not in self._memlimited
                if over:
                    self._memlimited.add(key)
            if over:
                self._memlimit(key, mains.get(key), rss, limit)
            if report_usage and key in mains:
                record = self._i.journal.get(key) or {}
                wall = max(0.0, self._since_start_ms(record, now) / 1000)
                self._report(api.JobReport(job_id=key[0], attempt=key[1], usage_now=api.UsageNow(
                    usage=api.Usage(user_cpu_s=cpu, max_rss_kb=rss, wall_s=wall), time_ms=now)))

    def _stopped(self, key: Key) -> bool:
        return bool((self._i.journal.get(key) or {}).get("stopped"))

    def _since_start_ms(self, record: dict[str, Any], now: int) -> int:
        """Since the instance started: by the monotonic clock where journaled, else by the wall clock."""
        if record.get("started_mono_ms") is not None:
            return int(self._i.clock.monotonic_s() * 1000) - int(record["started_mono_ms"])
        return now - int(record.get("started_ms", now))

    def _ran_ms(self, key: Key, now: int) -> int:
        """How long the instance has run: since its start, less the time it was stopped (journaled).
        By the monotonic clock, which no wall-clock step moves (a step ten minutes ahead would end a job
        for its run limit early), where the journal has it: a live instance started on this boot, whose
        monotonic readings compare; an instance journaled by older code, by the wall clock."""
        record = self._i.journal.get(key) or {}
        stops_mono = record.get("stops_mono", ())
        if record.get("started_mono_ms") is not None and len(stops_mono) == len(record.get("stops", ())):
            now, started, stops = int(self._i.clock.monotonic_s() * 1000), record["started_mono_ms"], \
                stops_mono
        else:
            started, stops = record.get("started_ms", now), record.get("stops", ())
        stopped = sum(int(end or now) - int(begin) for begin, end in stops)
        return now - int(started) - stopped

    def _warn(self, key: Key, pid: int, warning: WarningSignal) -> None:
        """The warning signal, once: journaled first, so a restarted worker does not send it again."""
        with self._i.lock:
            self._warnings.pop(key, None)  # once
            if not self._mark(key, "warned"):
                return  # it ended meanwhile
        tasks = self._tasks.pids(key) if warning.to != api.WARNING_TO_SHELL else []
        whom: dict[int, str] = {api.WARNING_TO_SHELL: "its batch shell",
                                api.WARNING_TO_TASKS: f"its tasks here ({len(tasks)})"}
        log.warning("job %d.%d has run %d s, its run limit less its warning time: signal %d to %s (warning)",
                    *key, warning.due_ms // 1000, warning.signal,
                    whom.get(warning.to, f"its process group and its tasks here ({len(tasks)})"))
        if warning.to == api.WARNING_TO_SHELL:
            self._signal_command(key, pid, warning.signal)
            return
        if warning.to == api.WARNING_TO_JOB:
            self._i.host.killpg(pid, warning.signal)
        for task in tasks:  # each task leads a group of its own, under its shim (tasks.py)
            self._i.host.killpg(task, warning.signal)

    def _runlimit(self, key: Key, pid: int, limit_ms: int) -> None:
        log.warning("job %d.%d ran past its run limit of %d s: killed (RUNLIMIT)", *key, limit_ms // 1000)
        with self._i.lock:
            self._run_limits.pop(key, None)  # once
            self._mark(key, "runlimit")
        self._terminate(key, pid, self._i.kill_grace_s)
        self._tasks.over(key, 0.0 if self._given_away(key) else None)

    def _deadline(self, key: Key, pid: int) -> None:
        """LSF's bsub -t: SIGUSR2 at the termination time (the job may save its work), killed if it
        still runs DEADLINE_GRACE_S later; its end says DEADLINE either way."""
        log.warning("job %d.%d still runs at its termination time: SIGUSR2, killed in %.0f s if it still "
                    "runs (DEADLINE)", *key, DEADLINE_GRACE_S)
        with self._i.lock:
            self._deadlines.pop(key, None)  # once
            self._mark(key, "deadline")
        self._i.host.killpg(pid, signal.SIGUSR2)

        def late() -> None:
            with self._i.lock:
                same = self._i.running.get(key) == pid  # (a number that ended may be another's by now)
            if same:
                self._terminate(key, pid, self._i.kill_grace_s)
                self._tasks.over(key, 0.0 if self._given_away(key) else None)

        self._i.host.call_later(DEADLINE_GRACE_S, late)

    def _memlimit(self, key: Key, pid: int | None, rss: int, limit: int) -> None:
        log.warning("job %d.%d uses %d KB, past its memory limit of %d KB: killed (MEMLIMIT)", *key, rss,
                    limit)
        grace_s = min(self._i.kill_grace_s, MEMLIMIT_GRACE_S)
        if pid is not None:
            with self._i.lock:
                self._mark(key, "memlimit")
            self._terminate(key, pid, grace_s)
        self._tasks.over(key, 0.0 if self._given_away(key) else grace_s)

    def _mark(self, key: Key, why: str) -> bool:
        """Journaled before the kill or the warning: its end says why, and a restart does not warn twice.
        Under the lock. Whether the instance still runs (else nothing is journaled)."""
        record = self._i.journal.get(key)
        if record is not None and record.get("state") == "running":
            record[why] = True
            self._i.journal.put(key, record)
            return True
        return False
