"""A job's warning signal before its run limit, on real processes (sbatch --signal, bsub -wa/-wt): three
jobs with a 5 s run limit (10 s for the one whose task must start first) and SIGUSR1 3 s before it, each
a batch shell that traps USR1 and a child that traps it too, as a plain child or as a task (`xce
launch`). The signal comes once the job has run its limit less 3 s, before the limit's kill, which
ends the job as before (RUNLIMIT): to the job's process group (LSF's -wa) the shell and its child get
it; to the batch shell alone (Slurm's B:) only the shell; to the tasks alone (Slurm's steps) only the
task. One cluster for the module, the three jobs side by side."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import FAST_HOSTS, wait_until

from ops.local_cluster import LocalCluster, LocalScheduler, LocalWorkers
from xce.v1 import api_pb2 as api

pytestmark = pytest.mark.cluster

RUN_LIMIT_S, WARNING_TIME_S = 5, 3  # (3 s: the worker's look may come late on a busy machine)
TASK_START_S = 5  # more run limit for the task's job: `xce launch` may take seconds to start it there
# The shell traps USR1, starts its child (a plain one, or a task through `xce launch`), and waits; each
# process writes a line with the time (ms) when USR1 reaches it. Bounded: an orphan would end in 30 s.
JOB = r"""#!/bin/bash
out=$1
trap 'echo "shell $(date +%s%3N)" >> "$out"' USR1
if [ "$2" = task ]; then
    "$XCE_TEST_PYTHON" -m cli launch "$XCE_TEST_HOST" -- "$XCE_TEST_DIR/child.sh" task "$out" &
else
    "$XCE_TEST_DIR/child.sh" child "$out" &
fi
end=$((SECONDS + 30))
while [ $SECONDS -lt $end ]; do sleep 0.05; done
"""
CHILD = r"""#!/bin/bash
trap 'echo "$1 $(date +%s%3N)" >> "$2"' USR1
echo "$1 ready" >> "$2"
end=$((SECONDS + 30))
while [ $SECONDS -lt $end ]; do sleep 0.05; done
"""


@dataclass
class Ended:
    job: api.Job
    lines: dict[str, str]  # who got USR1 (shell, child, task) -> when (ms), and `ready` lines

    def after_start_ms(self, who: str) -> int:
        return int(self.lines[who]) - self.job.start_time_ms


class Jobs:
    def __init__(self, cluster: LocalCluster, home: Path) -> None:
        self.cluster = cluster
        self.home = home
        self.ids: dict[api.WarningTarget, int] = {}

    def submit(self, to: api.WarningTarget, child: str, run_limit_s: int) -> None:
        env = {"PATH": os.environ["PATH"], "XCE_TEST_PYTHON": sys.executable, "XCE_TEST_HOST": "w1",
               "XCE_TEST_DIR": str(self.home)}
        spec = api.JobSpec(command=[str(self.home / "job.sh"), str(self.out(to)), child], cwd=str(self.home),
                           env=env, run_limit_s=run_limit_s, warning_signal=10, warning_time_s=WARNING_TIME_S,
                           warning_to=to, stdout_path=f"{to}.out", stderr_path=f"{to}.err")
        with self.cluster.client() as client:
            self.ids[to] = client.submit([spec]).jobs[0].id

    def out(self, to: api.WarningTarget) -> Path:
        return self.home / f"usr1-{to}.txt"

    def ended(self, to: api.WarningTarget) -> Ended:
        with self.cluster.client() as client:
            job = wait_until(lambda: (j := client.get_job(self.ids[to])).state in (api.DONE, api.EXIT) and j,
                             f"job {self.ids[to]} (warning to {to}) ended", timeout_s=60)
        path = self.out(to)
        lines = {}
        for line in (path.read_text() if path.exists() else "").splitlines():
            who, _, value = line.partition(" ")
            lines[f"{who} ready" if value == "ready" else who] = value
        return Ended(job, lines)


@pytest.fixture(scope="module")
def jobs() -> Iterator[Jobs]:
    home = Path(tempfile.mkdtemp(prefix="xce-warning-", dir="/tmp"))
    (home / "job.sh").write_text(JOB)
    (home / "child.sh").write_text(CHILD)
    for script in ("job.sh", "child.sh"):
        (home / script).chmod(0o755)
    cluster = LocalCluster(home / "cluster", extra_config=FAST_HOSTS)
    workers = LocalWorkers(cluster)
    scheduler = LocalScheduler(cluster)
    try:
        cluster.start()
        cluster.leader()
        workers.start("w1", 4, "memory_poll_s = 0.2\nkill_grace_s = 2.0\n")
        scheduler.start()
        with cluster.client() as client:
            wait_until(lambda: any(h.status == api.HOST_OK for h in client.list_hosts().hosts), "w1 joined")
        submitted = Jobs(cluster, home)
        submitted.submit(api.WARNING_TO_JOB, "child", RUN_LIMIT_S)
        submitted.submit(api.WARNING_TO_SHELL, "child", RUN_LIMIT_S)
        submitted.submit(api.WARNING_TO_TASKS, "task", RUN_LIMIT_S + TASK_START_S)
        yield submitted
    finally:
        scheduler.kill()
        workers.stop()
        cluster.stop()
        shutil.rmtree(home, ignore_errors=True)


def check_ended_at_its_limit(ended: Ended, run_limit_s: int = RUN_LIMIT_S) -> None:
    job = ended.job
    assert (job.state, job.exit_reason) == (api.EXIT, "RUNLIMIT"), job
    assert job.end_time_ms - job.start_time_ms >= run_limit_s * 1000


def check_warned_before_the_limit(ended: Ended, who: str, run_limit_s: int = RUN_LIMIT_S) -> None:
    """USR1 reached `who` once the job had run its limit less the warning time, before the limit."""
    after = ended.after_start_ms(who)
    print(f"{who}: USR1 {after} ms after the job's start (due at {(run_limit_s - WARNING_TIME_S) * 1000})")
    assert (run_limit_s - WARNING_TIME_S) * 1000 <= after < run_limit_s * 1000, ended.lines
    assert int(ended.lines[who]) < ended.job.end_time_ms


def test_warning_to_the_job_reaches_the_shell_and_its_child_then_the_run_limit_ends_it(jobs: Jobs) -> None:
    ended = jobs.ended(api.WARNING_TO_JOB)
    check_warned_before_the_limit(ended, "shell")
    check_warned_before_the_limit(ended, "child")
    check_ended_at_its_limit(ended)


def test_warning_to_the_batch_shell_alone_leaves_its_child_untouched(jobs: Jobs) -> None:
    ended = jobs.ended(api.WARNING_TO_SHELL)
    check_warned_before_the_limit(ended, "shell")
    assert "child ready" in ended.lines and "child" not in ended.lines, ended.lines  # it ran, never got it
    check_ended_at_its_limit(ended)


def test_warning_to_the_tasks_alone_reaches_the_task_not_the_batch_shell(jobs: Jobs) -> None:
    ended = jobs.ended(api.WARNING_TO_TASKS)
    check_warned_before_the_limit(ended, "task", RUN_LIMIT_S + TASK_START_S)
    assert "task ready" in ended.lines and "shell" not in ended.lines, ended.lines
    check_ended_at_its_limit(ended, RUN_LIMIT_S + TASK_START_S)
