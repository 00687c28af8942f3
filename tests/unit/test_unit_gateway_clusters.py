"""The gateway's other clusters, their pure parts: Slurm's job records (as the real slurmrestd 22.05
served them: tests/golden/slurm22/rest) and LSF 10.1's bjobs -json (its documented form:
tests/golden/lsf101) in XCE's words; the clusters file; the ids each backend takes."""

from __future__ import annotations

import asyncio
import json
import pickle
import time
from pathlib import Path

import pytest

from client.credentials import Credentials
from gateway.clusters import lsf_commands, lsf_words, registry, relay, slurm_rest, slurm_words
from gateway.clusters.backend import Caller, ForeignJob, Health, Native, spec_fields
from gateway.problems import Problem
from xce.v1 import api_pb2 as api

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def slurm_job(name: str) -> api.Job:
    record = json.loads((GOLDEN / "slurm22" / "rest" / f"{name}.json").read_text())["jobs"][0]
    return slurm_words.job_of(record, "hpc")


def test_slurm_s_finished_jobs_in_xce_s_words() -> None:
    failed, done, cancelled = (
        slurm_job("job_failed_exit3"),
        slurm_job("job_completed"),
        slurm_job("job_cancelled"),
    )
    assert (failed.state, failed.exit_code, failed.term_signal, failed.exit_reason) == (api.EXIT, 3, 0, "")
    assert failed.spec.user == "nobody" and failed.spec.queue == "normal" and failed.host == "n2"
    assert failed.readable_id == f"hpc:{failed.id}" and failed.end_time_ms >= failed.start_time_ms > 0
    assert (done.state, done.exit_code, done.spec.run_limit_s) == (api.DONE, 0, 525600 * 60)
    # scancel of a running job: SIGTERM (its raw status 15), CANCELLED -> EXIT by its owner
    assert (cancelled.state, cancelled.term_signal, cancelled.exit_reason) == (api.EXIT, 15, "OWNER")


def test_slurm_s_waiting_jobs_say_why_and_carry_no_estimated_times() -> None:
    pending, resources, held, running = (
        slurm_job(n) for n in ("job_pending", "job_pending_resources", "job_held", "job_running")
    )
    assert (pending.state, pending.pending_reason, pending.pending_code) == (
        api.PEND,
        "Priority",
        api.PEND_RESERVATION,
    )
    assert pending.start_time_ms == 0 and pending.end_time_ms == 0  # Slurm's are estimates
    assert (resources.pending_code, resources.spec.slots) == (api.PEND_NO_FREE_SLOTS, 2)
    assert (held.state, held.pending_code, held.pending_reason) == (
        api.PSUSP,
        api.PEND_JOB_HELD,
        "JobHeldUser",
    )
    assert (running.state, running.host, running.end_time_ms) == (api.RUN, "n1", 0)


def test_every_slurm_state_has_a_word_and_an_unknown_one_is_not_taken_for_running() -> None:
    for state, (xce_state, _) in slurm_words.STATES.items():
        job = slurm_words.job_of(
            {"job_id": 5, "job_state": state, "state_reason": "None", "exit_code": 9}, "c"
        )
        assert job.state == xce_state
    lost = slurm_words.job_of({"job_id": 5, "job_state": "NODE_FAIL", "exit_code": 0}, "c")
    assert lost.exit_status_unknown and lost.state == api.EXIT
    odd = slurm_words.job_of({"job_id": 5, "job_state": "SOMETHING_NEW"}, "c")
    assert odd.state == api.EXIT
    element = slurm_words.job_of(
        {"job_id": 9, "array_job_id": 7, "array_task_id": 2, "job_state": "RUNNING"}, "c"
    )
    assert (element.array_id, element.array_index, element.readable_id) == (7, 2, "c:7_2")


def test_slurm_s_nodes_and_partitions() -> None:
    nodes = json.loads((GOLDEN / "slurm22" / "rest" / "nodes.json").read_text())["nodes"]
    hosts = [slurm_words.host_of(n) for n in nodes]
    assert [(h.spec.name, h.spec.slots, h.status) for h in hosts][:2] == [
        ("n1", 2, api.HOST_OK),
        ("n2", 2, api.HOST_OK),
    ]
    drained = slurm_words.host_of({"name": "n3", "state": "idle", "state_flags": ["DRAIN"], "cpus": 4})
    down = slurm_words.host_of({"name": "n4", "state": "down", "cpus": 4})
    assert drained.closed and drained.status == api.HOST_OK and down.status == api.HOST_UNAVAIL
    parts = json.loads((GOLDEN / "slurm22" / "rest" / "partitions.json").read_text())["partitions"]
    normal = slurm_words.queue_of(parts[0])
    assert (normal.name, normal.closed, normal.inactive, normal.description) == (
        "normal",
        False,
        False,
        "default",
    )
    assert slurm_words.queue_of({"name": "x", "state": "INACTIVE"}).closed


def lsf_records() -> list[dict[str, str]]:
    records: list[dict[str, str]] = json.loads((GOLDEN / "lsf101" / "bjobs_json.json").read_text())["RECORDS"]
    return records


def test_lsf_s_jobs_in_xce_s_words() -> None:
    now = time.mktime((2026, 11, 21, 12, 0, 0, 0, 0, -1))
    (done, done_id), (killed, _), (element, element_id), (pending, _), (held, _) = (
        lsf_words.job_of(r, "lsf", now) for r in lsf_records()[:5]
    )
    assert (done.state, done.host, done.spec.slots, done_id) == (api.DONE, "hostA", 4, "1024")
    assert (
        done.spec.mem_limit_mb == 2048
        and done.spec.run_limit_s == 3600
        and done.spec.command[-1] == "./sim -n 4"
    )
    assert done.submit_time_ms == int(time.mktime((2026, 11, 20, 10, 36, 0, 0, 0, -1)) * 1000)
    assert done.end_time_ms == int(
        time.mktime((2026, 11, 20, 11, 2, 0, 0, 0, -1)) * 1000
    )  # the " L" read past
    assert (killed.state, killed.exit_reason, killed.term_signal, killed.exit_code) == (
        api.EXIT,
        "MEMLIMIT",
        9,
        0,
    )
    assert (element.array_id, element.array_index, element_id, element.exit_code) == (1026, 3, "1026[3]", 3)
    assert element.readable_id == "lsf:1026[3]"
    assert (pending.state, pending.start_time_ms, pending.spec.slots) == (api.PEND, 0, 64)
    assert pending.pending_reason.startswith("Not enough processors")
    assert (held.state, held.pending_code) == (api.PSUSP, api.PEND_JOB_HELD)


def test_lsf_s_times_take_this_year_or_the_last() -> None:
    january = time.mktime((2027, 1, 2, 0, 0, 0, 0, 0, -1))
    assert time.localtime(lsf_words.table_time_ms("Dec 30 23:59", january) / 1000).tm_year == 2026
    assert time.localtime(lsf_words.table_time_ms("Jan  1 08:00", january) / 1000).tm_year == 2027
    assert time.localtime(lsf_words.table_time_ms("Mar  3 10:00 2024", january) / 1000).tm_year == 2024
    assert lsf_words.table_time_ms("-", january) == 0 and lsf_words.table_time_ms("Foo 1 1:00", january) == 0


@pytest.mark.parametrize(
    "check, good, bad",
    [
        (lsf_commands.check_id, ["12", "12[3]"], ["", "-u", "12[", "12 13", "1[2][3]", "x"]),
        (slurm_rest.check_id, ["17", "16_3"], ["", "../ping", "17_", "17_x", "-1", "17 18"]),
    ],
)
def test_a_job_id_is_the_cluster_s_form_and_nothing_else(
    check: object, good: list[str], bad: list[str]
) -> None:
    for text in good:
        assert check(text) == text  # type: ignore[operator]
    for text in bad:
        with pytest.raises(Problem) as refused:
            check(text)  # type: ignore[operator]
        assert refused.value.status == 400


def test_a_spec_asking_what_a_backend_cannot_submit_is_refused_whole() -> None:
    spec = api.JobSpec(command=["true"], depend="done(3)", exclusive=True)
    with pytest.raises(Problem) as refused:
        spec_fields(spec, lsf_commands.TAKEN, "lsf", "lsf")
    assert refused.value.status == 400 and "depend, exclusive" in refused.value.detail
    spec_fields(api.JobSpec(command=["true"], slots=2, queue="short"), lsf_commands.TAKEN, "lsf", "lsf")


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "clusters.toml"
    path.write_text(text)
    return path


def test_the_clusters_file(tmp_path: Path) -> None:
    token = tmp_path / "jwt"
    token.write_text("eyJ.token\n")
    found = registry.load(
        write(
            tmp_path,
            f"""
[clusters.hpc]
backend = "slurm"
url = "http://127.0.0.1:6820"
token_file = "{token}"
shared_fs = true
[clusters.lsf-1]
backend = "lsf"
bin = "/opt/lsf/bin"
env = {{ LSF_ENVDIR = "/opt/lsf/conf" }}
run_as_caller = true
""",
        ),
        local="demo",
    )
    hpc, lsf = found["hpc"], found["lsf-1"]
    assert isinstance(hpc, slurm_rest.SlurmRest) and hpc.token == "eyJ.token" and "output" in hpc.supports
    assert "control.requeue" not in hpc.supports  # no commands configured: slurmrestd has no requeue
    assert isinstance(lsf, lsf_commands.LsfCommands) and lsf.commands.run_as_caller
    assert "output" not in lsf.supports and lsf.describe()["cannot"] == ["output", "events"]


@pytest.mark.parametrize(
    "text, words",
    [
        ('[clusters.k8s]\nbackend = "kubernetes"\n', "kubernetes is not supported"),
        ('[clusters.x]\nbackend = "lsf"\nrun_as = true\n', "unknown keys run_as"),
        ('[clusters."a b"]\nbackend = "lsf"\n', "a name is 1 to 64"),
        ('[clusters.demo]\nbackend = "lsf"\n', "this XCE cluster's own name"),
        ('[clusters.x]\nbackend = "slurm"\nurl = "ftp://h"\n', "url is slurmrestd's"),
        (
            '[clusters.x]\nbackend = "slurm"\nurl = "http://h"\ntoken_file = "/nonexistent/jwt"\n',
            "token_file",
        ),
        ('[clusters.x]\nbackend = "lsf"\ntimeout_s = 0\n', "timeout_s"),
        ('[clusters.x]\nbackend = "lsf"\nenv = { A = 1 }\n', "env is a table of strings"),
        ("[other]\n", "unknown tables other"),
        ("[clusters.x\n", "clusters.toml"),
    ],
)
def test_a_bad_clusters_file_is_refused_naming_what_is_wrong(tmp_path: Path, text: str, words: str) -> None:
    with pytest.raises(registry.ClustersFileError) as refused:
        registry.load(write(tmp_path, text), local="demo")
    assert words in str(refused.value)


def test_unicode_digits_are_no_job_id() -> None:
    for check, text in (
        (lsf_commands.check_id, "١٢"),
        (slurm_rest.check_id, "²"),
        (slurm_rest.check_id, "1_²"),
    ):
        with pytest.raises(Problem):
            check(text)


def test_an_lsf_command_that_bsub_would_take_for_its_option_is_refused() -> None:
    backend = lsf_commands.LsfCommands("lsf")
    with pytest.raises(Problem) as refused:
        backend.check(api.JobSpec(command=["-qprio", "x"]))
    assert refused.value.status == 400 and "may not start with '-'" in refused.value.detail


class Hostile(lsf_commands.LsfCommands):
    """A cluster whose answers are not what its commands document."""

    def __init__(self, records: object) -> None:
        super().__init__("bad")
        self.records = records

    def jobs(self, caller: Caller) -> list[ForeignJob]:
        return [self._found(r) for r in self.records]  # type: ignore[attr-defined]

    def _found(self, record: dict[str, str]) -> ForeignJob:
        job, native_id = lsf_words.job_of(record, self.name, 0.0)
        return ForeignJob(job, Native(native_id, record["STAT"]))

    def health(self) -> Health:
        raise ValueError("garbage")


@pytest.mark.parametrize(
    "records",
    [
        ["x"],
        [{"JOBID": "abc", "STAT": "RUN"}],
        [{"JOBID": str(2**70), "STAT": "RUN"}],
        None,
    ],
)
def test_what_another_cluster_answers_that_cannot_be_read_is_a_502_not_a_500(records: object) -> None:
    who = relay.Who("ann", "user", frozenset({"jobs.read"}), True, None)

    async def local(work: object) -> None:
        raise AssertionError("no local call")

    async def fresh() -> relay.Who:
        return who

    async def listing() -> object:
        return await relay.Relay(Hostile(records), who, local, fresh).jobs([], 0)

    with pytest.raises(Problem) as refused:
        asyncio.run(listing())
    assert refused.value.status == 502 and "cannot read" in refused.value.detail


def test_credentials_keep_munged_s_socket_through_a_pickle() -> None:
    made = Credentials(insecure=True, munge=True, munge_socket="/run/site/munge.socket")
    again = pickle.loads(pickle.dumps(made))
    assert again.munge_socket == "/run/site/munge.socket" and again == made
    assert again != Credentials(insecure=True, munge=True)
