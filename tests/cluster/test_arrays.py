"""Job arrays on real processes: elements run once each, within the running limit, through a bulk kill
and a leader kill; bad array specs and --file lines are refused and create nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from client.channel import Client
from ops.local_cluster import LocalCluster, LocalWorkers
from tests.conftest import wait_until, xce_cli
from worker.journal import Journal
from xce.v1 import api_pb2 as api

pytestmark = pytest.mark.cluster

MAX_ARRAY = "\n[auth]\nmax_array_size = 5000\n"
# A worker starting 40 elements at once on a starved machine went 1.5 s (the fast hosts' timeout) without a
# heartbeat: its host was UNAVAIL, and the elements dispatched to it that it never got ended EXIT with
# an unknown status when it came back (a lost dispatch of a job that is not rerunnable, as in LSF). The
# host timeouts' own tests are elsewhere; here a host is given time to answer.
PATIENT_HOSTS = "\n[hosts]\nheartbeat_s = 0.5\nheartbeat_timeout_s = 15.0\n"


@pytest.fixture
def htc(make_scheduled) -> tuple[LocalCluster, LocalWorkers]:  # type: ignore[no-untyped-def]
    return make_scheduled(PATIENT_HOSTS + MAX_ARRAY)  # type: ignore[no-any-return]


def _cli(cluster: LocalCluster, cwd: Path, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XCE_DATA": str(cluster.data)}
    env.pop("XCE_CONTROLLERS", None)
    done = subprocess.run([sys.executable, "-m", "cli", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=120)
    if ok:
        assert done.returncode == 0, done.stderr
    return done


def _array_id(out: str) -> int:
    return int(out.split("<", 1)[1].split(">", 1)[0])


def _elements(client: Client, array_id: int) -> dict[int, api.Job]:
    return {j.array_index: j for j in client.list_jobs([f"array:eq:{array_id}"], page_size=5000)}


def _instances(workers: LocalWorkers, names: list[str]) -> list[tuple[int, int, int, int]]:
    """Every instance the workers' journals hold: (job id, attempt, started ms, ended ms)."""
    workers.stop()  # the journals are read once nothing writes them
    found = []
    for name in names:
        journal = Journal(workers.spool(name) / "journal")
        try:
            for (job_id, attempt), record in journal.items():
                final = api.JobReport.FromString(bytes.fromhex(record["final"])) if record.get("final") \
                    else None
                ended = final.finished.time_ms if final is not None and final.HasField("finished") else 0
                found.append((job_id, attempt, int(record.get("started_ms", 0)), ended))
        finally:
            journal.close()
    return found


def _most_at_once(instances: list[tuple[int, int, int, int]]) -> int:
    edges = sorted([(start, 1) for _, _, start, _ in instances] + [(end, -1) for *_, end in instances])
    most = now = 0
    for _, step in edges:  # at a tie the end counts first: -1 sorts before +1
        now += step
        most = max(most, now)
    return most


def test_an_array_of_1000_runs_each_element_once_and_never_more_than_its_limit(
        htc: tuple[LocalCluster, LocalWorkers], tmp_path: Path) -> None:
    cluster, workers = htc
    for name in ("w1", "w2"):
        workers.start(name, 40)  # 80 slots: the limit of 50 is what binds
    out = _cli(cluster, tmp_path, "submit", "-J", "sim[1-1000%50]", "-o", "out.%I", "--",
               "sh", "-c", "echo $XCE_ARRAY_INDEX $LSB_JOBID $LSB_JOBINDEX $LSB_BATCH_JID $LSB_JOBNAME; "
               "sleep 0.05").stdout
    assert "Job array <" in out and "1000 elements" in out, out
    array_id = _array_id(out)
    with cluster.client() as client:
        wait_until(lambda: client.get_job(str(array_id)).state == api.DONE, "the array to finish", 600)
        record = client.get_job(str(array_id))
        assert record.array.counts[api.DONE] == 1000
        elements = _elements(client, array_id)
    assert sorted(elements) == list(range(1, 1001))
    for index in range(1, 1001):  # XCE's variables and LSF's: the array's id, the element's index
        assert (tmp_path / f"out.{index}").read_text().split() == \
            [str(index), str(array_id), str(index), f"{array_id}[{index}]", f"sim[{index}]"]
    summary = _cli(cluster, tmp_path, "jobs").stdout
    assert "sim[1-1000%50]" in summary and " 1000" in summary and "sim[7]" not in summary
    assert "sim[7]" in _cli(cluster, tmp_path, "jobs", "-A").stdout
    assert f"Job <{array_id}[42]>" in _cli(cluster, tmp_path, "job", f"{array_id}[42]").stdout
    instances = _instances(workers, ["w1", "w2"])
    ids = sorted(job_id for job_id, *_ in instances)
    assert ids == sorted(j.id for j in elements.values())  # each element once, by the journals
    assert _most_at_once(instances) <= 50


def test_a_bulk_kill_ends_exactly_the_selected_elements(htc: tuple[LocalCluster, LocalWorkers],
                                                        tmp_path: Path) -> None:
    cluster, workers = htc
    workers.start("w1", 10)
    workers.start("w2", 10)
    # The first 20 elements run until the test says go (not for a fixed time, which a slow kill could
    # outlast): the kill finds 10-20 running and 21-300 waiting.
    go = tmp_path / "go"
    script = f'if [ "$XCE_ARRAY_INDEX" -le 20 ]; then while [ ! -e {go} ]; do sleep 0.05; done; fi'
    array_id = _array_id(_cli(cluster, tmp_path, "submit", "-J", "k[1-400]", "--", "sh", "-c", script).stdout)
    with cluster.client() as client:
        wait_until(lambda: client.get_job(str(array_id)).array.counts[api.RUN] == 20, "20 elements running")
        said = _cli(cluster, tmp_path, "kill", f"{array_id}[10-300]").stdout
        assert "kill: done" in said, said
        wait_until(lambda: client.get_job(str(array_id)).array.counts[api.RUN] == 9, "10-20 killed")
        go.touch()
        wait_until(lambda: client.get_job(str(array_id)).state in (api.DONE, api.EXIT), "the end", 300)
        elements = _elements(client, array_id)
        record = client.get_job(str(array_id))
        assert (record.array.counts[api.EXIT], record.array.counts[api.DONE]) == (291, 109)
        never_jobs = [i for i in range(21, 301) if i not in elements]
        assert never_jobs  # killed inside the record, before they became jobs
        assert client.get_job(f"{array_id}[{never_jobs[0]}]").state == api.EXIT
    for index, job in elements.items():
        assert job.state == (api.EXIT if 10 <= index <= 300 else api.DONE), (index, job.state)
    ran = {job_id for job_id, *_ in _instances(workers, ["w1", "w2"])}
    index_of = {job.id: index for index, job in elements.items()}
    assert sorted(index_of[j] for j in ran) == [*range(1, 21), *range(301, 401)]  # none of 21-300 ran


def test_a_leader_kill_in_the_middle_of_an_array_still_runs_each_element_once(
        htc: tuple[LocalCluster, LocalWorkers], tmp_path: Path) -> None:
    cluster, workers = htc
    workers.start("w1", 8)
    workers.start("w2", 8)
    array_id = _array_id(_cli(cluster, tmp_path, "submit", "-J", "f[1-300]", "--", "true").stdout)
    with cluster.client() as client:
        wait_until(lambda: client.get_job(str(array_id)).array.counts[api.DONE] >= 60, "60 elements done",
                   120)
    old = cluster.leader()
    cluster.kill(old)
    cluster.leader(exclude=old)
    with cluster.client() as client:
        wait_until(lambda: client.get_job(str(array_id)).state == api.DONE, "the array to finish", 600)
        elements = _elements(client, array_id)
    assert sorted(elements) == list(range(1, 301))
    instances = _instances(workers, ["w1", "w2"])
    assert sorted(job_id for job_id, *_ in instances) == sorted(j.id for j in elements.values())


@pytest.mark.parametrize(("name", "words"), [
    ("a[0-]", "is not start"), ("a[5-1]", "ends before it starts"), ("a[1-10:0]", "step"),
    ("a[1-10]%0", "positive"), ("a[1-5001]", "at most 5000"),
])
def test_bad_array_specs_are_refused_and_create_nothing(make_cluster, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                        name: str, words: str) -> None:
    cluster = make_cluster(extra_config=MAX_ARRAY)
    cluster.start()
    cluster.leader()
    done = _cli(cluster, tmp_path, "submit", "-J", name, "--", "true", ok=False)
    assert done.returncode != 0 and words in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    with cluster.client() as client:
        assert client.list_jobs() == []
        # The controller refuses what the CLI would not send, with the same words.
        spec = api.JobSpec(command=["true"], array=api.ArraySpec(ranges=[api.IndexRange(start=1, end=5001)]))
        with pytest.raises(Exception, match="at most 5000"):
            client.submit([spec])
        assert client.list_jobs() == []


def test_submit_file_gives_one_job_per_line_in_one_request_and_a_bad_line_is_named(
        cluster: LocalCluster, tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.txt"
    lines = ["# one per line"] + [f"-q idle -J line{i} echo {i}" if i % 2 else f"echo {i}"
                                  for i in range(1000)]
    jobs.write_text("\n".join(lines) + "\n")
    out = _cli(cluster, tmp_path, "submit", "--file", str(jobs)).stdout
    assert "1000 jobs" in out, out
    with cluster.client() as client:
        found = client.list_jobs(page_size=5000)
    assert len(found) == 1000 and len({j.request_id for j in found}) == 1  # one request
    by_command = {j.spec.command[1]: j for j in found}
    assert by_command["7"].spec.queue == "idle" and by_command["7"].spec.name == "line7"
    assert by_command["8"].spec.queue == "normal"
    jobs.write_text("echo fine\n-n notanumber echo bad\n")
    done = _cli(cluster, tmp_path, "submit", "--file", str(jobs), ok=False)
    assert done.returncode == 2 and "line 2" in done.stderr, done.stderr
    with cluster.client() as client:
        assert len(client.list_jobs(page_size=5000)) == 1000  # nothing of the bad file


def test_cli_arguments_it_cannot_take_are_one_line_errors(cluster: LocalCluster, tmp_path: Path) -> None:
    not_utf8 = b"\xff".decode("utf-8", "surrogateescape")
    for args in (["submit", "--priority", "99999999999", "--", "true"], ["submit", "--", "true", not_utf8]):
        done = _cli(cluster, tmp_path, *args, ok=False)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    xce_cli(cluster, "submit", "-J", "evil\x1bc", "--", "true")  # ESC c resets the terminal
    listing = xce_cli(cluster, "jobs")
    assert "\x1b" not in listing and "evil\\x1bc" in listing
