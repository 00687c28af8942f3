"""Jobs their owner's own files make impossible end, on their own, without stalling anyone else's.

Real processes: three replicas, a scheduler, two workers of a root cluster,
and a local user (uid 65534, `nobody`) who submits with the `xce` command.
Before entry format 19 every refusal of a worker sent the job back to PEND
and cooled the refusing host for everyone: twenty such jobs of nobody's were
dispatched and refused about once a second forever, and kept root's `true`
pending for minutes (controller/fsm/refusals.py, xce/start_failures.py).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import FAST_HOSTS, NOBODY, nobody_cli_env, wait_until, xce_as_nobody

from client.channel import Client
from ops.local_cluster import LocalCluster, LocalScheduler, LocalWorkers
from xce import start_failures
from xce.v1 import api_pb2 as api

pytestmark = [pytest.mark.cluster,
              pytest.mark.skipif(os.geteuid() != 0, reason="jobs of another uid need a root cluster")]

IMPOSSIBLE = 20  # jobs of nobody's: half with an output file, half with a working directory it cannot use
SLOTS = 4  # on each of two hosts: fewer than the impossible jobs, so that they would fill them


class Setup:
    def __init__(self, cluster: LocalCluster, workers: LocalWorkers, shared: Path, forbidden: Path) -> None:
        self.cluster = cluster
        self.workers = workers
        self.shared = shared  # nobody's working directory, and where its CLI's files are
        self.forbidden = forbidden  # root's, 0700: nobody can neither enter it nor create in it
        self.env = nobody_cli_env(cluster, shared) | {"XCE_TOKEN": cluster.new_token("nobody")}

    def as_nobody(self, *args: str) -> str:
        done = xce_as_nobody(list(args), self.env, self.shared)
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        return done.stdout

    def submit_as_nobody(self, *args: str) -> list[int]:
        answer = json.loads(self.as_nobody("submit", "--json", *args))
        return [int(job["id"]) for job in answer.get("jobs", [answer])]

    def job(self, job_id: int) -> api.Job:
        with self.cluster.client() as client:
            return client.get_job(job_id)

    def jobs(self, ids: list[int]) -> list[api.Job]:
        with self.cluster.client() as client:
            return [client.get_job(job_id) for job_id in ids]

    def wait_job(self, job_id: int, done: Callable[[api.Job], bool], what: str) -> api.Job:
        found: list[api.Job] = []

        def probe() -> bool:
            found[:] = [self.job(job_id)]
            return done(found[0])

        wait_until(probe, what)
        return found[0]

    def wait_ended(self, ids: list[int]) -> list[api.Job]:
        found: list[api.Job] = []

        def probe() -> bool:
            found[:] = self.jobs(ids)
            return all(job.state in (api.DONE, api.EXIT) for job in found)

        wait_until(probe, "every impossible job ended")
        return found

    def roots_true(self) -> float:
        """Seconds from root's submit of `true` to its DONE."""
        with self.cluster.client() as client:
            began = time.monotonic()
            job_id = client.submit([api.JobSpec(command=["true"], cwd=str(self.shared))]).jobs[0].id
            wait_until(lambda: client.get_job(job_id).state == api.DONE, f"root's true ({job_id}) done",
                       timeout_s=60, every_s=0.02)
            return time.monotonic() - began


@pytest.fixture(scope="module")
def setup(reachable_by_nobody: None) -> Iterator[Setup]:
    # The workers' spools hold owners' default output: the cluster lives where others may pass (0711).
    home = Path(tempfile.mkdtemp(prefix="xce-jobfail-", dir="/tmp"))
    home.chmod(0o711)
    shared, forbidden = home / "shared", home / "forbidden"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    forbidden.mkdir(mode=0o700)
    cluster = LocalCluster(home / "cluster", extra_config=FAST_HOSTS)
    workers = LocalWorkers(cluster)
    scheduler = LocalScheduler(cluster)
    try:
        cluster.start()
        cluster.leader()
        for name in ("w1", "w2"):
            workers.start(name, SLOTS)
        scheduler.start()
        with cluster.client() as client:
            wait_until(lambda: {h.spec.name for h in client.list_hosts().hosts if h.status == api.HOST_OK}
                       >= {"w1", "w2"}, "both workers joined")
        yield Setup(cluster, workers, shared, forbidden)
    finally:
        scheduler.kill()
        workers.stop()
        cluster.stop()
        shutil.rmtree(home, ignore_errors=True)


def test_twenty_impossible_jobs_end_after_bounded_attempts_beside_roots_prompt_one(setup: Setup) -> None:
    idle = setup.roots_true()
    lines = [f"-o {setup.forbidden}/%J.out -- true" if i % 2 else f"--cwd {setup.forbidden} -- true"
             for i in range(IMPOSSIBLE)]
    (setup.shared / "impossible").write_text("\n".join(lines) + "\n")
    ids = setup.submit_as_nobody("--file", str(setup.shared / "impossible"))
    assert len(ids) == IMPOSSIBLE
    # Root's job goes in while they are being refused (the first refusals are in: before format 19 the same
    # first ones, back at the head of the queue, were dispatched again and again, and no other ever was).
    wait_until(lambda: sum(j.attempt > 0 or j.state == api.EXIT for j in setup.jobs(ids)) >= SLOTS,
               "the impossible jobs refused")
    beside = setup.roots_true()
    assert beside <= idle + 2.0, f"root's true took {beside:.2f} s beside them, {idle:.2f} s when idle"
    began = time.monotonic()
    ended = setup.wait_ended(ids)
    print(f"root's true: {idle:.2f} s idle, {beside:.2f} s beside {IMPOSSIBLE} impossible jobs, all ended "
          f"{time.monotonic() - began:.1f} s later")
    assert all(job.state == api.EXIT for job in ended)
    by_reason = {reason: [j for j in ended if j.exit_reason == reason] for reason in ("CWD_MISSING",
                                                                                      "OUTPUT_FILE")}
    assert {r: len(js) for r, js in by_reason.items()} == {"CWD_MISSING": 10, "OUTPUT_FILE": 10}
    for job in by_reason["CWD_MISSING"]:  # ended at its first refusal: exit 2, LSB_EXIT_IF_CWD_NOTEXIST=Y
        assert (job.exit_code, job.attempt, job.spec.user) == (2, 0, "nobody")
        assert f"working directory {setup.forbidden} missing or not accessible" in job.start_error
    # No host was cooled for them: the scheduler logs each cool-down it starts.
    log = (setup.cluster.data / "sched-1.log").read_text()
    assert [line for line in log.splitlines() if " refused job " in line] == []
    for job in by_reason["OUTPUT_FILE"]:  # tried MAX_TRIES times in all, with a backoff between
        assert (job.exit_code, job.attempt, job.start_failures) == (1, start_failures.MAX_TRIES - 1,
                                                                     start_failures.MAX_TRIES)
        assert f"output file {setup.forbidden}/" in job.start_error and "Permission denied" in job.start_error
    # Its owner reads why, with the same command.
    shown = setup.as_nobody("job", str(by_reason["OUTPUT_FILE"][0].id))
    assert "OUTPUT_FILE" in shown and "Permission denied" in shown and "failed 4 times: output file" in shown
    assert "CWD_MISSING" in setup.as_nobody("job", str(by_reason["CWD_MISSING"][0].id))


def test_a_missing_command_a_missing_home_and_a_missing_account(setup: Setup) -> None:
    # An owner without an account: each host refuses it once (per generation), and it waits, saying so.
    ghost = setup.cluster.new_user("ghost-xce-jobfail")
    with Client(setup.cluster.addresses, ghost) as client:
        stranger = client.submit([api.JobSpec(command=["true"], cwd="/")]).jobs[0].id
    missing, = setup.submit_as_nobody("--", "no-such-command-xce")
    homeless, = setup.submit_as_nobody("--cwd", "", "--", "sh", "-c", "pwd")
    failed = setup.wait_job(missing, lambda j: j.state == api.EXIT, "the missing command ended")
    assert (failed.exit_code, failed.exit_reason, failed.attempt) == (127, "COMMAND_NOT_FOUND", 0)
    assert "command not found: no-such-command-xce" in failed.start_error
    assert "COMMAND_NOT_FOUND" in setup.as_nobody("job", str(missing))
    # nobody's home (/nonexistent) is missing: the job runs in /tmp, as LSF's would, and says so.
    assert not os.path.isdir(NOBODY.pw_dir)
    ran = setup.wait_job(homeless, lambda j: j.state in (api.DONE, api.EXIT), "the homeless job ended")
    assert (ran.state, ran.attempt) == (api.DONE, 0)
    outputs = setup.workers.spool(ran.host) / "users" / "nobody"
    assert (outputs / f"{homeless}.0.out").read_text() == "/tmp\n"
    assert (outputs / f"{homeless}.0.err").read_text() == f"xce: home directory {NOBODY.pw_dir} not " \
        "accessible (No such file or directory): the job runs in /tmp\n"
    waiting = setup.wait_job(stranger, lambda j: j.pending_code == api.PEND_OWNER_REFUSED and
                             set(j.refused_owner) == {"w1", "w2"}, "both hosts refused the stranger")
    assert (waiting.state, waiting.attempt) == (api.PEND, 2) and "refused its owner" in waiting.pending_reason
    setup.roots_true()  # passes go on; the stranger is not dispatched again
    assert setup.job(stranger).attempt == 2
