"""Tasks of a job on the hosts of its allocation (`xce launch`, LSF's blaunch), and each host's part.

Theory of operation. A job's allocation may span hosts; its first host runs
the command (the executor's instance), every other host holds the job's
*part* there: a record made when that host's RunJob arrives, with no
process until a task is launched into it. A task is asked for by `xce
launch` inside the job (launch_socket.py), relayed by the leader, and run
here as the job's owner, in its own process group under a shim, like a job,
with the job's environment and the launcher's on top, its output appended
to the job's. At most one task per (job, attempt, task id) ever starts: the
task is journaled (a note `task/J.A/ID`) before its process starts, and a
repeated launch answers with the task's state.

Tasks are part of the job: a stop or resume of the job reaches every task
on every host; when the job is over (the first host's command ended, or the
leader kills the part because the job ended) the remaining tasks are killed
(TERM, KILL after the grace), and once all have ended the host reports
`part_ended` with their usage, which the leader adds to the job's (M6).

Nothing here knows about sockets or gRPC; states go to `tell` (the daemon
sends them to the leader), reports to `report` (the executor's channel).
What it shares with the executor (the journal, the lock, the spawn) is the
instances' (instances.py).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import signal
from collections.abc import Callable
from typing import Any

from worker.instances import Instances
from xce.v1 import api_pb2 as api

log = logging.getLogger("xce.worker")

Key = tuple[int, int]
MAX_TASKS = 10_000  # ever, per job and host: each is a journal note until the part's end is acknowledged
MIN_RUNNING = 16  # at once, per job and host: at least this, else 4 per slot it holds here


def task_note(key: Key, task_id: str) -> str:
    return f"task/{key[0]}.{key[1]}/{task_id}"


def part_note(key: Key) -> str:
    return f"part/{key[0]}.{key[1]}"


class Tasks:
    def __init__(self, instances: Instances, report: Callable[[api.JobReport], None],
                 tell: Callable[[api.TaskState], None]) -> None:
        self._i = instances
        self._report = report
        self.tell = tell
        self._running: dict[Key, dict[str, int]] = {}  # instance -> task id -> shim pid
        self._over: set[Key] = set()  # instances whose job is over here: no new task, end the rest

    # -------------------------------------------------------------- launching

    def launch(self, request: api.LaunchTask) -> api.TaskState:
        """Start the task (or say what became of it, for a repeat); the state to send back now."""
        key = (request.job_id, request.attempt)
        inst = self._i
        state = api.TaskState(job_id=request.job_id, attempt=request.attempt, task_id=request.task_id,
                              host=inst.name, origin=request.origin)
        known = inst.journal.get_note(task_note(key, request.task_id))
        if known is not None:
            return _state_of(state, known)
        record = inst.journal.get(key)
        job = _job_of(record)
        if record is None or job is None or record.get("state") not in ("running", "part"):
            # Its RunJob may not have reached this host yet (it joins again, say): ask again.
            return _refused(state, f"job {key[0]} at attempt {key[1]} does not run on host {inst.name}",
                            retry=record is None)
        if record.get("credential") != request.credential or not request.credential:
            return _refused(state, "the job credential does not match")
        most = max(MIN_RUNNING, 4 * int(record.get("slots", 1)))
        with inst.lock:
            if key in self._over:
                return _refused(state, "the job is over on this host")
            running = self._running.setdefault(key, {})
            if len(running) >= most:
                return _refused(state, f"at most {most} tasks run at once for a job on this host")
            if sum(1 for _ in inst.journal.notes(f"task/{key[0]}.{key[1]}/")) >= MAX_TASKS:
                return _refused(state, f"at most {MAX_TASKS} tasks for a job on this host")
            running[request.task_id] = 0  # reserved: the part's end waits for it
        account, failure = inst.check(job, draining_too=False)
        if failure is not None:
            self._unreserve(key, request.task_id)
            return _refused(state, failure.dispatch_failed.reason)
        assert account is not None
        status_file = inst.status_file(key, f".task-{_file_id(request.task_id)}")
        note: dict[str, Any] = {"state": "starting", "status_file": str(status_file),
                                "origin": request.origin}
        inst.journal.put_note(task_note(key, request.task_id), note)  # before the start: at most once
        try:
            pid = inst.spawn(job, account, status_file, task=request, gpus=record.get("gpus"))
        except Exception as exc:  # noqa: BLE001 - a bad task must not take the worker down
            note.update(state="ended", final={"start_error": f"start failed: {exc}"})
            inst.journal.put_note(task_note(key, request.task_id), note)
            self._unreserve(key, request.task_id)
            return _state_of(state, note)
        note.update(state="running", pid=pid, pid_start=inst.host.start_ticks(pid))
        inst.journal.put_note(task_note(key, request.task_id), note)
        with inst.lock:
            self._running.setdefault(key, {})[request.task_id] = pid
            stopped = (inst.journal.get(key) or {}).get("stopped", False)
            over = key in self._over  # the job ended while it started: it ends too
        log.info("job %d.%d task %s started, pid %d", *key, request.task_id, pid)
        if over:
            self._stop_task(key, request.task_id, pid, inst.kill_grace_s)
        elif stopped:
            inst.host.killpg(pid, signal.SIGSTOP)
        self._watch(key, request.task_id, note, started_here=True)
        return _state_of(state, note)

    def _unreserve(self, key: Key, task_id: str) -> None:
        with self._i.lock:
            if self._running.get(key, {}).get(task_id) == 0:
                del self._running[key][task_id]
        self._maybe_part_ended(key)

    def _watch(self, key: Key, task_id: str, note: dict[str, Any], started_here: bool) -> None:
        def ended(shim_signal: int) -> None:
            self._ended(key, task_id, note, shim_signal)

        self._i.host.watch(note["pid"], started_here, note.get("pid_start"), ended)

    def _ended(self, key: Key, task_id: str, note: dict[str, Any], shim_signal: int) -> None:
        inst = self._i
        status = inst.read_status(note["status_file"])
        final: dict[str, Any] = {k: status[k] for k in ("exit_code", "term_signal", "user_cpu_s",
                                                        "system_cpu_s", "max_rss_kb") if k in status}
        if "start_error" in status:
            final["start_error"] = str(status["start_error"])[:500]
        elif "exit_code" not in final:
            final["term_signal"] = shim_signal or signal.SIGKILL
        note.update(state="ended", final=final)
        with inst.lock:
            inst.journal.put_note(task_note(key, task_id), note)
            self._running.get(key, {}).pop(task_id, None)
        log.info("job %d.%d task %s ended: %s", *key, task_id, final)
        self.tell(_state_of(api.TaskState(job_id=key[0], attempt=key[1], task_id=task_id, host=inst.name,
                                          origin=note.get("origin", "")), note))
        self._maybe_part_ended(key)

    # -------------------------------------------------------------- the job's signals and end

    def signal(self, key: Key, sig: int) -> None:
        with self._i.lock:
            pids = [pid for pid in self._running.get(key, {}).values() if pid]
        for pid in pids:
            self._i.host.killpg(pid, sig)
            if sig == signal.SIGTERM:
                self._i.host.killpg(pid, signal.SIGCONT)  # a stopped task must see the TERM

    def over(self, key: Key, grace_s: float | None = None) -> None:
        """The job is over on this host (its command ended here, the leader killed its part, or
        the fence): no new task; the running ones get TERM, then KILL after the grace (the
        worker's, unless given); once none runs, the part's end is reported."""
        inst = self._i
        with inst.lock:
            self._over.add(key)
            pids = [(task_id, pid) for task_id, pid in self._running.get(key, {}).items() if pid]
        for task_id, pid in pids:
            self._stop_task(key, task_id, pid, inst.kill_grace_s if grace_s is None else grace_s)
        self._maybe_part_ended(key)

    def _stop_task(self, key: Key, task_id: str, pid: int, grace_s: float) -> None:
        """TERM (continued to see it), KILL after the grace; no grace: KILL at once, never continued (a
        job stopped for a preemption: its slots are another job's)."""
        inst = self._i
        if grace_s <= 0:
            self._kill_hard(key, task_id, pid)
            return
        inst.host.killpg(pid, signal.SIGTERM)
        inst.host.killpg(pid, signal.SIGCONT)
        inst.host.call_later(grace_s, functools.partial(self._kill_hard, key, task_id, pid))

    def pids(self, key: Key) -> list[int]:
        """The running tasks' shims (each leads its session) of an instance."""
        with self._i.lock:
            return [pid for pid in self._running.get(key, {}).values() if pid]

    def with_tasks(self) -> list[Key]:
        """The instances with tasks running here."""
        with self._i.lock:
            return [key for key, tasks in self._running.items() if tasks]

    def _kill_hard(self, key: Key, task_id: str, pid: int) -> None:
        with self._i.lock:
            still = self._running.get(key, {}).get(task_id) == pid
        if still:
            self._i.host.killpg(pid, signal.SIGKILL)

    def _maybe_part_ended(self, key: Key) -> None:
        """Over and no task left: the part's end, with its tasks' usage (once)."""
        inst = self._i
        with inst.lock:
            if inst.closed or key not in self._over or self._running.get(key):
                return
            self._running.pop(key, None)
            inst.forget_hostfile(key)
            inst.gpus.release(key)  # no process of the job is left here
            done = inst.journal.get_note(part_note(key))
            if done is not None:
                return
            notes = [n for _, n in inst.journal.notes(f"task/{key[0]}.{key[1]}/")]
            record = inst.journal.get(key)
            if not notes and (record or {}).get("state") != "part":
                self._over.discard(key)  # its record, ended, refuses late launches from now on
                return  # the first host without tasks: its finished report says it all
            usage = api.Usage()
            for note in notes:  # (an ended, reported task's note is kept until the leader has the sum)
                final = note.get("final", {})
                usage.user_cpu_s += float(final.get("user_cpu_s", 0.0))
                usage.system_cpu_s += float(final.get("system_cpu_s", 0.0))
                usage.max_rss_kb = max(usage.max_rss_kb, int(final.get("max_rss_kb", 0)))
            report = api.JobReport(job_id=key[0], attempt=key[1], part_ended=api.PartEnded(
                usage=usage, tasks=len(notes), time_ms=inst.clock.now_ms()))
            inst.journal.put_note(part_note(key), {"final": report.SerializeToString().hex(), "acked": False})
        log.info("job %d.%d: its part here ended (%d tasks)", *key, len(notes))
        self._report(report)

    def acknowledged(self, key: Key) -> None:
        """The leader has the part's end: forget the part and its tasks."""
        inst = self._i
        with inst.lock:
            for name, _ in list(inst.journal.notes(f"task/{key[0]}.{key[1]}/")):
                inst.journal.delete_note(name)
            inst.journal.delete_note(part_note(key))
            self._over.discard(key)
            record = inst.journal.get(key)
            if record is not None and record.get("state") == "part":
                record.update(state="ended", acked=True)
                inst.journal.put(key, record)

    # -------------------------------------------------------------- restarts

    def recover(self) -> None:
        """After a worker restart: re-adopt running tasks, finish the ended ones, re-send unacknowledged
        part ends; the parts whose job was over are over again."""
        inst = self._i
        for name, note in list(inst.journal.notes("task/")):
            job_attempt, _, task_id = name.removeprefix("task/").partition("/")
            job, _, attempt = job_attempt.partition(".")
            key = (int(job), int(attempt))
            if note.get("state") == "ended":
                continue
            pid = int(note.get("pid") or 0)
            alive = bool(pid) and inst.host.start_ticks(pid) == note.get("pid_start")
            if not pid:  # the worker died between the start and journaling the pid: its pid file says
                pid = inst.host.find_served(note["status_file"])
                alive = bool(pid)
                if alive:
                    note.update(state="running", pid=pid, pid_start=inst.host.start_ticks(pid))
                    inst.journal.put_note(name, note)
            if alive:
                with inst.lock:
                    self._running.setdefault(key, {})[task_id] = pid
                self._watch(key, task_id, note, started_here=False)
            else:
                self._ended(key, task_id, note, 0)
        for _, note in list(inst.journal.notes("part/")):
            if not note.get("acked"):
                self._report(api.JobReport.FromString(bytes.fromhex(note["final"])))

    def running(self, key: Key) -> bool:
        with self._i.lock:
            return bool(self._running.get(key))


def _job_of(record: dict[str, Any] | None) -> api.Job | None:
    if record is None or not record.get("job"):
        return None
    return api.Job.FromString(bytes.fromhex(record["job"]))


def _file_id(task_id: str) -> str:
    """A file name part for any task id (distinct ids, distinct names)."""
    return hashlib.sha256(task_id.encode()).hexdigest()[:24]


def _refused(state: api.TaskState, reason: str, retry: bool = False) -> api.TaskState:
    state.phase = api.TASK_REFUSED
    state.reason = reason[:500]
    state.retry = retry
    return state


def _state_of(state: api.TaskState, note: dict[str, Any]) -> api.TaskState:
    if note.get("state") != "ended":
        state.phase = api.TASK_STARTED
        state.pid = int(note.get("pid", 0))
        return state
    final = note.get("final", {})
    if "start_error" in final:
        return _refused(state, str(final["start_error"]))
    state.phase = api.TASK_ENDED
    state.pid = int(note.get("pid", 0))
    state.exit_code = int(final.get("exit_code", 0))
    state.term_signal = int(final.get("term_signal", 0))
    return state
