"""Jobs run by real workers after a committed DISPATCH (force-run, like brun)."""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from client.channel import Client, XceError
from ops.local_cluster import LocalCluster, LocalWorkers
from tests.conftest import FAST_HOSTS
from xce.v1 import api_pb2 as api

pytestmark = pytest.mark.cluster



@pytest.fixture
def setup(fleet: tuple[LocalCluster, LocalWorkers]) -> tuple[LocalCluster, LocalWorkers]:
    return fleet


def _wait_hosts(cluster: LocalCluster, names: set[str], timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with cluster.client() as client:
            ok = {h.spec.name for h in client.list_hosts().hosts if h.status == api.HOST_OK}
        if names <= ok:
            return
        time.sleep(0.05)
    raise AssertionError(f"hosts {names} did not join")


def _wait_jobs(cluster: LocalCluster, check: Callable[[list[api.Job]], bool],
               timeout_s: float = 30.0) -> list[api.Job]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with cluster.client() as client:
            jobs = client.list_jobs()
        if check(jobs):
            return jobs
        time.sleep(0.1)
    raise AssertionError(f"jobs did not get there: {[(j.id, api.JobState.Name(j.state)) for j in jobs]}")


def _ledger_job(ledger: Path, seconds: float, cwd: Path) -> api.JobSpec:
    # Each instance appends one line "job.attempt" when it starts: the ledger
    # shows how many instances of each job ran, whoever reports what.
    script = f'echo "$XCE_JOB_ID.$XCE_JOB_ATTEMPT" >> {ledger}; sleep {seconds}'
    return api.JobSpec(command=["sh", "-c", script], cwd=str(cwd), name="ledger")


def test_24_jobs_on_3_workers_survive_a_leader_kill_each_run_once(
        setup: tuple[LocalCluster, LocalWorkers], tmp_path: Path) -> None:
    cluster, workers = setup
    for name in ("w1", "w2", "w3"):
        workers.start(name, 8)
    _wait_hosts(cluster, {"w1", "w2", "w3"})
    ledger = tmp_path / "ledger"
    with cluster.client() as client:
        jobs = client.submit([_ledger_job(ledger, 2, tmp_path) for _ in range(24)]).jobs
        for i, job in enumerate(jobs):
            assert client.run(job.id, f"w{i % 3 + 1}").state == api.RUN
        hosts = {h.spec.name: h for h in client.list_hosts().hosts}
        assert {n: h.slots_used for n, h in hosts.items()} == {"w1": 8, "w2": 8, "w3": 8}
    time.sleep(0.5)
    old = cluster.leader()
    cluster.kill(old)
    done = _wait_jobs(cluster, lambda js: all(j.state == api.DONE for j in js), timeout_s=40)
    assert len(done) == 24 and all(j.attempt == 0 and j.exit_code == 0 for j in done)
    assert Counter(j.host for j in done) == {"w1": 8, "w2": 8, "w3": 8}
    instances = Counter(ledger.read_text().split())
    assert instances == {f"{j.id}.0": 1 for j in done}  # each exactly once, none lost
    with cluster.client() as client:
        assert all(h.slots_used == 0 and h.running_jobs == 0 for h in client.list_hosts().hosts)


def test_a_refused_dispatch_requeues_if_the_host_refused_and_ends_the_job_if_the_job_did(
        setup: tuple[LocalCluster, LocalWorkers], tmp_path: Path) -> None:
    cluster, workers = setup
    workers.start("w1", 2)
    workers.start("drain", 2, "draining = true\n")
    _wait_hosts(cluster, {"w1", "drain"})
    with cluster.client() as client:
        lost = client.submit([api.JobSpec(command=["true"], cwd=str(tmp_path / "gone"))]).jobs[0]
        drained = client.submit([api.JobSpec(command=["true"], cwd=str(tmp_path))]).jobs[0]
        missing = client.submit([api.JobSpec(command=["no-such-command-xce"], cwd=str(tmp_path))]).jobs[0]
        client.run(lost.id, "w1")
        client.run(drained.id, "drain")
        client.run(missing.id, "w1")
    jobs = {j.id: j for j in _wait_jobs(cluster, lambda js: all(
        j.state == api.EXIT or (j.state == api.PEND and j.attempt == 1) for j in js))}
    # The host's refusal (draining): pending again, with the reason. The job's own (its working directory,
    # its command): it ends, as a shell would (xce/start_failures.py).
    assert (jobs[drained.id].state, jobs[drained.id].pending_code) == (api.PEND, api.PEND_DISPATCH_REFUSED)
    assert "draining" in jobs[drained.id].pending_reason
    lost_job = jobs[lost.id]
    assert (lost_job.state, lost_job.exit_code, lost_job.exit_reason) == (api.EXIT, 2, "CWD_MISSING")
    assert "working directory" in jobs[lost.id].start_error and "missing" in jobs[lost.id].start_error
    assert (jobs[missing.id].exit_code, jobs[missing.id].exit_reason) == (127, "COMMAND_NOT_FOUND")
    assert "command not found" in jobs[missing.id].start_error
    with cluster.client() as client:
        assert all(h.slots_used == 0 for h in client.list_hosts().hosts)
        assert client.run(drained.id, "w1").attempt == 1  # and it can be dispatched again
    _wait_jobs(cluster, lambda js: any(j.id == drained.id and j.state == api.DONE for j in js))


def _proc_state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _gone(pid: int) -> bool:
    try:
        return _proc_state(pid) == "Z"
    except (FileNotFoundError, ProcessLookupError):  # reaped, or being reaped as we read (ESRCH)
        return True


def _wait(predicate: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert predicate()


def test_stop_resume_kill_and_usage(setup: tuple[LocalCluster, LocalWorkers], tmp_path: Path) -> None:
    cluster, workers = setup
    workers.start("w1", 4, "kill_grace_s = 1\n")
    _wait_hosts(cluster, {"w1"})
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.5: pass\n"
    stubborn = "trap '' TERM; while true; do sleep 0.1; done"
    with cluster.client() as client:
        sleeper, burner, ignorer = client.submit([
            api.JobSpec(command=["sleep", "30"], cwd=str(tmp_path)),
            api.JobSpec(command=["python3", "-c", burn], cwd=str(tmp_path)),
            api.JobSpec(command=["sh", "-c", stubborn], cwd=str(tmp_path))]).jobs
        for job in (sleeper, burner, ignorer):
            client.run(job.id, "w1")
        _wait(lambda: client.get_job(sleeper.id).pid > 0)
        pid = client.get_job(sleeper.id).pid
        assert client.control(sleeper.id, api.STOP).state == api.USUSP
        _wait(lambda: _proc_state(pid) == "T")
        assert client.control(sleeper.id, api.RESUME).state == api.RUN
        _wait(lambda: _proc_state(pid) != "T")
        client.control(sleeper.id, api.KILL)
        _wait(lambda: client.get_job(sleeper.id).state == api.EXIT)
        killed = client.get_job(sleeper.id)
        assert killed.term_signal == 15 and killed.exit_code == 128 + 15
        _wait(lambda: client.get_job(ignorer.id).pid > 0)
        started = time.monotonic()
        client.control(ignorer.id, api.KILL)
        _wait(lambda: client.get_job(ignorer.id).state == api.EXIT)
        assert client.get_job(ignorer.id).term_signal == 9  # TERM ignored: KILL after the grace
        assert time.monotonic() - started >= 0.9
        _wait(lambda: client.get_job(burner.id).state == api.DONE)
        usage = client.get_job(burner.id).usage
        assert usage.user_cpu_s + usage.system_cpu_s >= 0.4 and usage.wall_s >= 0.4 and usage.max_rss_kb > 0


def _revision(cluster: LocalCluster) -> int:
    with Client([cluster.address(cluster.leader())], cluster.credentials) as client:
        return client.status(local_only=True).replicas[0].revision


@pytest.mark.parametrize(("host", "slots", "state_first", "code", "needle"), [
    ("nohost", 1, None, grpc.StatusCode.NOT_FOUND, "no host"),
    ("w1", 3, None, grpc.StatusCode.FAILED_PRECONDITION, "host w1 has 2 slots; the job needs 3"),
    ("w1", 1, api.HOLD, grpc.StatusCode.FAILED_PRECONDITION, "not pending"),
])
def test_bad_force_run_is_refused_and_changes_nothing(
        setup: tuple[LocalCluster, LocalWorkers], host: str, slots: int, state_first: int | None,
        code: grpc.StatusCode, needle: str) -> None:
    cluster, workers = setup
    workers.start("w1", 2)
    _wait_hosts(cluster, {"w1"})
    with cluster.client() as client:
        job = client.submit([api.JobSpec(command=["true"], slots=slots)]).jobs[0]
        if state_first is not None:
            client.control(job.id, state_first)
    before = _revision(cluster)
    with cluster.client() as client, pytest.raises(XceError) as caught:
        client.run(job.id, host)
    assert caught.value.code == code and needle in caught.value.message
    assert _revision(cluster) == before


def test_concurrent_force_runs_never_overcommit_a_host(setup: tuple[LocalCluster, LocalWorkers]) -> None:
    cluster, workers = setup
    workers.start("w1", 3)
    _wait_hosts(cluster, {"w1"})
    with cluster.client() as client:
        jobs = client.submit([api.JobSpec(command=["sleep", "5"]) for _ in range(8)]).jobs
    accepted: list[int] = []

    def force(job_id: int) -> None:
        with cluster.client() as client:
            try:
                client.run(job_id, "w1")
                accepted.append(job_id)
            except XceError as exc:
                assert exc.code == grpc.StatusCode.FAILED_PRECONDITION

    threads = [threading.Thread(target=force, args=(j.id,)) for j in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(accepted) == 3
    # The leader: a follower may trail by a commit.
    with Client([cluster.address(cluster.leader())], cluster.credentials) as client:
        assert client.list_hosts().hosts[0].slots_used == 3


def test_worker_killed_and_restarted_adopts_and_reports_nothing_runs_twice(
        setup: tuple[LocalCluster, LocalWorkers], tmp_path: Path) -> None:
    cluster, workers = setup
    workers.start("w1", 4)
    _wait_hosts(cluster, {"w1"})
    ledger = tmp_path / "ledger"
    with cluster.client() as client:
        long, short, failing = client.submit([
            _ledger_job(ledger, 4, tmp_path), _ledger_job(ledger, 0.3, tmp_path),
            api.JobSpec(command=["sh", "-c", f'echo "$XCE_JOB_ID.$XCE_JOB_ATTEMPT" >> {ledger}; '
                                             "sleep 0.3; exit 3"], cwd=str(tmp_path))]).jobs
        for job in (long, short, failing):
            client.run(job.id, "w1")
        _wait(lambda: all(client.get_job(j.id).pid > 0 for j in (long, short, failing)))
    workers.kill("w1")  # kill -9: its jobs keep running in their own sessions
    time.sleep(1.0)  # the short ones end while no worker watches
    workers.start("w1", 4)
    jobs = _wait_jobs(cluster, lambda js: all(j.state in (api.DONE, api.EXIT) for j in js), timeout_s=30)
    by_id = {j.id: j for j in jobs}
    assert by_id[long.id].state == api.DONE and by_id[long.id].usage.wall_s >= 3.5  # adopted, ran out
    assert by_id[short.id].state == api.DONE  # ended while the worker was down, reported after
    assert (by_id[failing.id].state, by_id[failing.id].exit_code) == (api.EXIT, 3)
    assert Counter(ledger.read_text().split()) == {f"{j.id}.0": 1 for j in jobs}  # nothing twice
    log_text = (cluster.data / "worker-w1.log").read_text()
    assert f"job {long.id}.0 re-adopted" in log_text


@pytest.mark.parametrize("comes_back", [False, True])
def test_host_lost_unknown_then_requeue_or_exit_unless_it_returns(
        make_fleet, tmp_path: Path, comes_back: bool) -> None:  # type: ignore[no-untyped-def]
    # No worker-side fence: this is the leader's side of a lost host (test_worker_fence.py: the worker's).
    hosts = "\n[hosts]\nheartbeat_s = 0.2\nheartbeat_timeout_s = 1.0\nunknown_timeout_s = 2.5\nfence_s = 0\n"
    cluster, workers = make_fleet(hosts)
    workers.start("w1", 4)
    _wait_hosts(cluster, {"w1"})
    with cluster.client() as client:
        rerun, plain = client.submit([
            api.JobSpec(command=["sleep", "3"], cwd=str(tmp_path), rerunnable=True),
            api.JobSpec(command=["sleep", "3"], cwd=str(tmp_path))]).jobs
        for job in (rerun, plain):
            client.run(job.id, "w1")
        _wait(lambda: all(client.get_job(j.id).pid > 0 for j in (rerun, plain)))
    workers.kill("w1")
    _wait_jobs(cluster, lambda js: all(j.state == api.UNKWN for j in js), timeout_s=10)
    if comes_back:
        workers.start("w1", 4)
        jobs = _wait_jobs(cluster, lambda js: all(j.state == api.DONE for j in js), timeout_s=20)
        assert all(j.attempt == 0 for j in jobs)  # the same instances ran out
        return
    jobs = _wait_jobs(cluster, lambda js: all(j.state in (api.PEND, api.EXIT) for j in js), timeout_s=20)
    by_id = {j.id: j for j in jobs}
    assert (by_id[rerun.id].state, by_id[rerun.id].attempt) == (api.PEND, 1)
    assert "requeued" in by_id[rerun.id].pending_reason
    assert (by_id[plain.id].state, by_id[plain.id].exit_status_unknown) == (api.EXIT, True)


def test_a_stalled_worker_rejoins_and_its_job_runs_out(make_fleet, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # Its stream survives the stall, but the leader marked the host UNAVAIL:
    # the leader must end that stream so the worker re-joins and re-reports.
    hosts = "\n[hosts]\nheartbeat_s = 0.2\nheartbeat_timeout_s = 1.0\nunknown_timeout_s = 6\nfence_s = 0\n"
    cluster, workers = make_fleet(hosts)
    workers.start("w1", 2)
    _wait_hosts(cluster, {"w1"})
    with cluster.client() as client:
        job = client.submit([api.JobSpec(command=["sleep", "4"], cwd=str(tmp_path))]).jobs[0]
        client.run(job.id, "w1")
        _wait(lambda: client.get_job(job.id).pid > 0)
        workers.procs["w1"].send_signal(signal.SIGSTOP)
        _wait(lambda: client.get_job(job.id).state == api.UNKWN)
        workers.procs["w1"].send_signal(signal.SIGCONT)
        _wait(lambda: client.get_job(job.id).state == api.RUN)
        _wait(lambda: client.get_job(job.id).state == api.DONE, timeout_s=15)
        assert client.get_job(job.id).attempt == 0
        assert client.list_hosts().hosts[0].status == api.HOST_OK


def test_resume_while_the_worker_is_down_reaches_the_job(
        setup: tuple[LocalCluster, LocalWorkers], tmp_path: Path) -> None:
    cluster, workers = setup
    workers.start("w1", 2)
    _wait_hosts(cluster, {"w1"})
    with cluster.client() as client:
        job = client.submit([api.JobSpec(command=["sleep", "2"], cwd=str(tmp_path))]).jobs[0]
        client.run(job.id, "w1")
        _wait(lambda: client.get_job(job.id).pid > 0)
        pid = client.get_job(job.id).pid
        client.control(job.id, api.STOP)
        _wait(lambda: _proc_state(pid) == "T")
        workers.kill("w1")
        client.control(job.id, api.RESUME)
        workers.start("w1", 2)
        _wait(lambda: client.get_job(job.id).state == api.DONE, timeout_s=15)


def test_requeue_of_a_running_job_kills_its_instance_and_the_next_attempt_runs(
        make_fleet: Callable[[str], tuple[LocalCluster, LocalWorkers]], tmp_path: Path) -> None:
    # The requeue kills the running instance at once, and the job is pending
    # again only once that instance has ended: never two at a time. The leader's
    # periodic full look (which would kill it too) is put out of the test's reach.
    cluster, workers = make_fleet(FAST_HOSTS + "resend_s = 600\n")
    workers.start("w1", 2)
    _wait_hosts(cluster, {"w1"})
    with cluster.client() as client:
        job = client.submit([api.JobSpec(command=["sleep", "60"], cwd=str(tmp_path))]).jobs[0]
        client.run(job.id, "w1")
        _wait(lambda: client.get_job(job.id).pid > 0)
        pid = client.get_job(job.id).pid
        requeued = client.control(job.id, api.REQUEUE)
        assert requeued.state == api.RUN and requeued.requeue_requested
        # Killed on the requeue's commit, not by the leader's periodic full look (600 s here).
        _wait(lambda: _gone(pid), timeout_s=60.0)
        assert _gone(pid), "the old attempt still runs"
        _wait(lambda: client.get_job(job.id).state == api.PEND)
        client.run(job.id, "w1")
        _wait(lambda: client.get_job(job.id).pid not in (0, pid))
        assert client.get_job(job.id).attempt == 1
        client.control(job.id, api.KILL)
        _wait(lambda: client.get_job(job.id).state == api.EXIT)
