"""A job's tasks and parts on a worker (worker/tasks.py, worker/executor.py) over a simulated process
host: at most once, ended with the job (also across a worker restart and a race with the job's end),
fenced, and the part's usage reported once."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

from worker.executor import Executor
from worker.journal import MemoryJournal
from worker.process_host import Account
from xce.clock import Clock
from xce.v1 import api_pb2 as api


class Processes:
    """Processes that live until SIGKILL or until the test ends them; TERM is ignored (a rank that
    traps it, or is slow to die)."""

    def __init__(self) -> None:
        self.alive: dict[int, int] = {}  # pid -> start ticks
        self.next = 100
        self.signals: list[tuple[int, int]] = []


class Host:
    def __init__(self, processes: Processes) -> None:
        self.processes = processes
        self.watchers: dict[int, Callable[[int], None]] = {}
        self.timers: list[Callable[[], None]] = []
        self.on_spawn: Callable[[int], None] | None = None

    def spawn(self, argv: list[str], env: dict[str, str], stdin: bytes, log: Path) -> int:
        self.processes.next += 1
        pid = self.processes.next
        self.processes.alive[pid] = pid
        if self.on_spawn is not None:
            self.on_spawn(pid)
        return pid

    def host_name(self) -> str:
        return "here"

    def account(self, user: str) -> Account | None:
        return Account(user, 1000, 1000, "/", "/bin/sh")

    def euid(self) -> int:
        return 1000

    def owner_dir(self, path: Path, account: Account) -> Path:
        path.mkdir(parents=True, exist_ok=True)
        return path

    def watch(self, pid: int, started_here: bool, start_ticks: int | None,
              on_end: Callable[[int], None]) -> None:
        self.watchers[pid] = on_end

    def killpg(self, pid: int, sig: int) -> None:
        self.processes.signals.append((pid, sig))
        if sig == signal.SIGKILL and pid in self.processes.alive:
            self.end(pid, signal.SIGKILL)

    def end(self, pid: int, sig: int = 0) -> None:
        self.processes.alive.pop(pid, None)
        on_end = self.watchers.pop(pid, None)
        if on_end is not None:
            on_end(sig)

    def start_ticks(self, pid: int) -> int | None:
        return self.processes.alive.get(pid)

    def find_by_env(self, key: tuple[int, int], spool: Path) -> int:
        return 0

    def find_served(self, status_file: Path) -> int:
        return 0

    def group_stopped(self, pgid: int) -> bool:
        return True

    def sessions_usage(self) -> dict[int, tuple[int, float]]:
        return {}

    def call_later(self, delay_s: float, function: Callable[[], None]) -> None:
        self.timers.append(function)

    def fire(self) -> None:
        timers, self.timers = self.timers, []
        for function in timers:
            function()

    def close(self) -> None:
        pass


def _job(first: str = "h1") -> api.Job:
    job = api.Job(id=5, attempt=0, host=first, readable_id="r5", state=api.RUN,
                  spec=api.JobSpec(user="alice", slots=4, command=["rank0"]))
    for host in ("h1", "h2"):
        job.allocation.add(host=host, slots=2)
    return job


class Worker:
    def __init__(self, name: str, tmp: Path, processes: Processes,
                 journal: MemoryJournal | None = None) -> None:
        self.reports: list[api.JobReport] = []
        self.told: list[api.TaskState] = []
        self.journal = journal or MemoryJournal()
        self.host = Host(processes)
        self.x = Executor(tmp / name, 1.0, self.reports.append, host=self.host,  # type: ignore[arg-type]
                          journal=self.journal, name=name, tell=self.told.append)

    def launch(self, task_id: str = "t1", credential: str = "C") -> api.TaskState:
        return self.x.tasks.launch(api.LaunchTask(job_id=5, attempt=0, task_id=task_id, host=self.x.name,
                                                  command=["rank"], credential=credential, origin="h1"))

    def part_ends(self) -> list[api.JobReport]:
        return [r for r in self.reports if r.HasField("part_ended")]


def test_a_task_runs_once_per_id_and_only_with_the_credential(tmp_path: Path) -> None:
    processes = Processes()
    worker = Worker("h2", tmp_path, processes)
    assert worker.launch().phase == api.TASK_REFUSED  # no RunJob here yet: nothing to launch into
    worker.x.run(_job(), "C")
    assert not processes.alive  # a part: no process of its own
    assert worker.launch(credential="forged").reason == "the job credential does not match"
    started = worker.launch()
    assert started.phase == api.TASK_STARTED and len(processes.alive) == 1
    again = worker.launch()  # the same id, asked again (a lost answer): its state, no second process
    assert (again.phase, again.pid, len(processes.alive)) == (api.TASK_STARTED, started.pid, 1)
    worker.host.end(started.pid)
    assert worker.launch().phase == api.TASK_ENDED and not processes.alive


def test_the_job_s_end_ends_its_tasks_and_the_part_reports_its_usage_once(tmp_path: Path) -> None:
    processes = Processes()
    worker = Worker("h2", tmp_path, processes)
    worker.x.run(_job(), "C")
    first, second = worker.launch("a").pid, worker.launch("b").pid
    worker.x.signal((5, 0), api.SIGNAL_STOP)
    assert {(first, signal.SIGSTOP), (second, signal.SIGSTOP)} <= set(processes.signals)
    worker.x.signal((5, 0), api.SIGNAL_KILL)  # the leader: the job is over
    assert worker.launch("c").phase == api.TASK_REFUSED  # no new task once it is over
    assert worker.part_ends() == []  # not before every task ended
    worker.host.fire()  # the grace is over: KILL
    assert not processes.alive and len(worker.part_ends()) == 1
    assert worker.part_ends()[0].part_ended.tasks == 2
    worker.x.acknowledged((5, 0), "part_ended")
    assert list(worker.journal.notes("task/")) == [] and list(worker.journal.notes("part/")) == []


def test_a_task_that_starts_as_the_job_ends_on_the_first_host_is_ended_too(tmp_path: Path) -> None:
    processes = Processes()
    worker = Worker("h1", tmp_path, processes)
    worker.x.run(_job(), "C")
    command = max(processes.alive)
    # The command ends (its watch thread) while the task's process is being started.
    worker.host.on_spawn = lambda pid: worker.host.end(command) if pid != command else None
    task = worker.launch()
    worker.host.on_spawn = None
    worker.host.fire()
    assert task.pid not in processes.alive, processes.signals
    assert [r.WhichOneof("body") for r in worker.reports if r.WhichOneof("body") != "started"] == \
        ["finished", "part_ended"]  # the command's end first


def test_a_restarted_worker_ends_the_tasks_of_a_job_whose_command_ended_meanwhile(tmp_path: Path) -> None:
    processes = Processes()
    journal = MemoryJournal()
    worker = Worker("h1", tmp_path, processes, journal)
    worker.x.run(_job(), "C")
    command = min(processes.alive)
    task = worker.launch().pid
    processes.alive.pop(command)  # the command ends while no worker watches
    again = Worker("h1", tmp_path, processes, journal)
    again.x.recover()
    again.host.fire()
    assert task not in processes.alive
    assert [r.WhichOneof("body") for r in again.reports] == ["finished", "part_ended"]


def test_the_fence_ends_a_part_s_tasks(tmp_path: Path) -> None:
    processes = Processes()
    worker = Worker("h2", tmp_path, processes)
    worker.x.run(_job(), "C")
    task = worker.launch().pid
    assert worker.x.fence(0.0) == [(5, 0)]
    worker.host.fire()
    assert task not in processes.alive and len(worker.part_ends()) == 1


def test_a_job_past_its_memory_limit_is_killed_and_ends_memlimit(tmp_path: Path) -> None:
    processes = Processes()
    worker = Worker("h1", tmp_path, processes)
    job = _job()
    job.spec.mem_limit_mb = 100
    worker.x.run(job, "C")
    command = max(processes.alive)
    task = worker.launch().pid
    usage = {command: (60 * 1024, 1.0), task: (30 * 1024, 0.5)}  # 90 MB together: under
    worker.host.sessions_usage = lambda: usage  # type: ignore[method-assign]
    worker.x.monitor(report_usage=True)
    sample = [r for r in worker.reports if r.HasField("usage_now")]
    assert [(r.usage_now.usage.max_rss_kb, r.usage_now.usage.user_cpu_s) for r in sample] == \
        [(90 * 1024, 1.5)]
    assert command in processes.alive
    usage[task] = (50 * 1024, 0.5)  # 110 MB: past it
    worker.x.monitor(report_usage=False)
    worker.host.fire()
    assert command not in processes.alive and task not in processes.alive
    ends = [r.finished for r in worker.reports if r.HasField("finished")]
    assert [(e.term_signal, e.exit_reason) for e in ends] == [(signal.SIGKILL, "MEMLIMIT")]


def _one_host_job(state: api.JobState.ValueType = api.RUN) -> api.Job:
    job = api.Job(id=7, attempt=0, host="h1", readable_id="r7", state=state,
                  spec=api.JobSpec(user="alice", slots=1, command=["work"], rerunnable=True))
    job.allocation.add(host="h1", slots=1)
    return job


def test_a_job_stopped_for_a_preemption_is_killed_at_once_never_continued(tmp_path: Path) -> None:
    """Its slots are its preemptor's: continued for a TERM handler, it would run beside it."""
    processes = Processes()
    worker = Worker("h1", tmp_path, processes)
    worker.x.run(_one_host_job(), "C")
    pid = max(processes.alive)
    worker.x.signal((7, 0), api.SIGNAL_STOP, preempted=True)
    assert [r for r in worker.reports if r.HasField("suspended")]
    del processes.signals[:]
    worker.x.signal((7, 0), api.SIGNAL_KILL)
    assert processes.signals == [(pid, signal.SIGKILL)] and pid not in processes.alive
    ends = [r.finished for r in worker.reports if r.HasField("finished")]
    assert [e.term_signal for e in ends] == [signal.SIGKILL]


def test_the_fence_kills_a_preempted_job_at_once_and_a_user_stopped_one_with_term(tmp_path: Path) -> None:
    processes = Processes()
    worker = Worker("h1", tmp_path, processes)
    worker.x.run(_one_host_job(api.SSUSP), "C")  # restated after a restart: stopped for a preemption
    preempted = max(processes.alive)
    user_stopped = _one_host_job(api.USUSP)
    user_stopped.id = 8
    worker.x.run(user_stopped, "C")
    stopped = max(processes.alive)
    del processes.signals[:]
    assert sorted(worker.x.fence(5.0)) == [(7, 0), (8, 0)]
    assert (preempted, signal.SIGKILL) in processes.signals
    assert not [s for p, s in processes.signals if p == preempted and s in (signal.SIGTERM, signal.SIGCONT)]
    assert [s for p, s in processes.signals if p == stopped] == [signal.SIGTERM, signal.SIGCONT]


def test_a_resumed_victim_is_killed_with_term_again(tmp_path: Path) -> None:
    processes = Processes()
    worker = Worker("h1", tmp_path, processes)
    worker.x.run(_one_host_job(), "C")
    pid = max(processes.alive)
    worker.x.signal((7, 0), api.SIGNAL_STOP, preempted=True)
    worker.x.signal((7, 0), api.SIGNAL_CONT)
    del processes.signals[:]
    worker.x.signal((7, 0), api.SIGNAL_KILL)
    assert processes.signals == [(pid, signal.SIGTERM), (pid, signal.SIGCONT)]


def _running_with_a_run_limit_of_60_s(tmp_path: Path, clock: Clock) -> tuple[
        Processes, Host, list[api.JobReport], Executor, int]:
    """A one-host job with a run limit of 60 s started on an executor with `clock`; its pid."""
    processes = Processes()
    reports: list[api.JobReport] = []
    host = Host(processes)
    x = Executor(tmp_path / "h1", 1.0, reports.append, host=host, journal=MemoryJournal(),  # type: ignore[arg-type]
                 name="h1", clock=clock)
    job = _one_host_job()
    job.spec.run_limit_s = 60
    x.run(job, "C")
    return processes, host, reports, x, max(processes.alive)


def test_a_job_past_its_run_limit_is_killed_with_runlimit_stopped_time_not_counted(tmp_path: Path) -> None:
    from xce.clock import ManualClock

    clock = ManualClock(1_000_000)
    processes, host, reports, x, pid = _running_with_a_run_limit_of_60_s(tmp_path, clock)
    clock.advance(40_000)
    x.signal((7, 0), api.SIGNAL_STOP)  # stopped 30 s: not run time
    clock.advance(30_000)
    x.signal((7, 0), api.SIGNAL_CONT)
    clock.advance(15_000)  # 55 s run, 85 s since the start
    x.monitor(report_usage=False)
    assert pid in processes.alive
    clock.advance(10_000)  # 65 s run
    x.monitor(report_usage=False)
    assert (pid, signal.SIGTERM) in processes.signals
    x.monitor(report_usage=False)
    assert processes.signals.count((pid, signal.SIGTERM)) == 1  # killed once
    host.fire()  # the grace passed: SIGKILL
    ends = [r.finished for r in reports if r.HasField("finished")]
    assert [(e.term_signal, e.exit_reason) for e in ends] == [(signal.SIGKILL, "RUNLIMIT")]


def test_a_wall_clock_step_neither_ends_a_job_for_its_run_limit_nor_stretches_it(tmp_path: Path) -> None:
    from xce.clock import ManualClock

    class SteppedClock(ManualClock):  # the wall clock stepped by `offset_ms`; the monotonic one not
        offset_ms = 0

        def now_ms(self) -> int:
            return super().now_ms() + self.offset_ms

    clock = SteppedClock(1_000_000)
    processes, _, _, x, pid = _running_with_a_run_limit_of_60_s(tmp_path, clock)
    clock.advance(20_000)
    x.signal((7, 0), api.SIGNAL_STOP)
    clock.offset_ms = 600_000  # ten minutes ahead, while it is stopped
    clock.advance(10_000)
    x.signal((7, 0), api.SIGNAL_CONT)
    clock.advance(30_000)  # 50 s run, 60 s since the start, 660 s by the wall clock
    x.monitor(report_usage=False)
    assert pid in processes.alive and (pid, signal.SIGTERM) not in processes.signals
    clock.offset_ms = -600_000  # and ten minutes behind: its run time does not shrink
    clock.advance(15_000)  # 65 s run
    x.monitor(report_usage=False)
    assert (pid, signal.SIGTERM) in processes.signals


def test_the_tasks_of_a_job_stopped_for_a_preemption_are_killed_at_once_too(tmp_path: Path) -> None:
    processes = Processes()
    worker = Worker("h1", tmp_path, processes)
    worker.x.run(_job(), "C")
    task = worker.launch().pid
    worker.x.signal((5, 0), api.SIGNAL_STOP, preempted=True)
    del processes.signals[:]
    worker.x.signal((5, 0), api.SIGNAL_KILL)
    assert (task, signal.SIGKILL) in processes.signals and task not in processes.alive
    assert not [s for p, s in processes.signals if p == task and s in (signal.SIGTERM, signal.SIGCONT)]
