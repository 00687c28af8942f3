"""Golden tests: XCE's Slurm commands against a real Slurm 22.05.8's output for the same jobs.

tests/golden/slurm22/ holds what a real Slurm 22.05.8 printed (cli/) and what its slurmrestd said of
each job (rest/: states, times, nodes), for the jobs INDEX.md lists. Each test here builds XCE's
records of the same jobs, hosts and partition (api.Job, api.Host, api.Queue, with the captured epoch
times, in UTC as the peer's), runs the command's own code on them (its `run` over a client that
answers with those records, or the pure printer it calls), and compares every byte with Slurm's:
lines, keys, columns, widths and words. No process, no cluster.

What cannot be the same is rewritten in Slurm's text before the comparison, each rewrite with its
reason (`expected`, NORMALISED), and listed in docs/SLURM.md ("Where it departs from Slurm"); what
XCE's commands still print otherwise, and what must change outside these printers for them to match
(sbatch's messages), is an xfail(strict) test saying exactly what Slurm prints.

sacct: the peer runs without accounting (`sacct` there says "Slurm accounting storage is disabled"),
so its tests compare with Slurm 22.05's documented format instead: sacct's field table (src/sacct/
sacct.c: JobID %-12, JobName 10, Partition 10, Account 10, AllocCPUS 10, State 10, ExitCode 8, each
cell followed by a space, dashes under the header), and `-P`'s `|` between fields, no padding.
"""

from __future__ import annotations

import io
import json
import os
import re
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from cli import session
from cli.lsf import script
from cli.slurm import entry, formats, job_table, json_out, sbatch, scancel, scontrol, sinfo
from client.channel import XceError
from xce.v1 import api_pb2 as api

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "slurm22"
WORK = "/tmp/xce-slurm-nvw09ls2/jobs"  # the peer's jobs directory, every job's working directory
T0 = 1796535810  # rest-timeout's submit time (2026-12-06T05:43:30 UTC): the jobs' times are T0 + n
OWNERS = {"root": (0, 0, "root"), "nobody": (65534, 65534, "nogroup")}  # the peer's passwd and group

pytestmark = pytest.mark.skipif(not (GOLDEN / "INDEX.md").exists(), reason="no goldens of a real Slurm")


def golden(name: str) -> str:
    return (GOLDEN / "cli" / name).read_text()


def rest_job(name: str) -> dict[str, Any]:
    record: dict[str, Any] = json.loads((GOLDEN / "rest" / name).read_text())["jobs"][0]
    return record


def at(offset: int) -> int:
    """T0 + offset seconds, in XCE's milliseconds."""
    return (T0 + offset) * 1000


@pytest.fixture(autouse=True)
def peer_s_world(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The peer's time zone (UTC: its times print as the captures do) and its users' ids."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    monkeypatch.setattr(json_out, "_owner", lambda user: OWNERS.get(user, (None, None, "")))
    formats.use_time_format(None)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = before
        time.tzset()


def clock(monkeypatch: pytest.MonkeyPatch, offset: int) -> None:
    """The commands' now: T0 + offset seconds (when Slurm's command ran)."""
    monkeypatch.setattr(formats, "now_ms", lambda: at(offset))


# ------------------------------------------------------------------ XCE's records of the peer's jobs

def sbatch_spec(words: list[str], user: str = "root") -> api.JobSpec:
    """The job XCE's sbatch makes of the command line the capture ran (as root, on host `localhost`, in
    the jobs directory); the queue the controller fills in (the default, normal)."""
    _, args = entry.parse("sbatch", words)
    spec = sbatch.build(args, {"USER": user, "PATH": "/usr/bin:/bin"}, "localhost")
    spec.cwd, spec.user, spec.queue = WORK, user, "normal"
    spec.env["SLURM_SUBMIT_DIR"] = WORK
    return spec


def rest_spec(name: str, text: str, output: str = "", limit_s: int = 0, hold: bool = False) -> api.JobSpec:
    """A job slurmrestd took for nobody, as XCE's sbatch takes the same script on stdin (Slurm keeps no
    script name then, as for the REST's): from 127.0.0.1 (slurmrestd's address, the job's AllocNode)."""
    return api.JobSpec(command=script.command(text, "sbatch"), name=name, queue="normal", slots=1, cwd=WORK,
                       user="nobody", rerunnable=True, stdout_path=output or "slurm-%j.out",
                       stderr_path=output or "slurm-%j.out", run_limit_s=limit_s, hold=hold,
                       env={"SLURM_SUBMIT_HOST": "127.0.0.1", "SLURM_NTASKS": "1"})


def ran(job: api.Job, host: str, start: int) -> api.Job:
    job.host, job.start_time_ms = host, at(start)
    return job


def ended(job: api.Job, state: api.JobState, end: int, exit_code: int = 0, signal: int = 0,
          reason: str = "") -> api.Job:
    job.state, job.end_time_ms, job.exit_code, job.term_signal, job.exit_reason = (
        state, at(end), exit_code or (128 + signal if signal else 0), signal, reason)
    return job


def peer_jobs(now: int) -> dict[str, api.Job]:
    """The jobs as they were at T0 + now (2: squeue.out's time; 5: squeue_all_states.out's, when all but
    rest-timeout had ended), each with the times rest/*.json and cli/scontrol_*.out give it."""
    sleep = rest_spec("rest-timeout", "#!/bin/sh\nsleep 300\n", limit_s=60)
    trap = rest_spec("rest-running", "#!/bin/sh\ntrap 'echo got USR1' USR1\nwhile :; do sleep 1; done\n",
                     output=f"{WORK}/rest-running-%j.out")
    jobs = {
        "rest-timeout": ran(api.Job(id=1, state=api.RUN, submit_time_ms=at(0), spec=sleep), "n1", 1),
        "rest-running": ran(api.Job(id=2, state=api.RUN, submit_time_ms=at(0), spec=trap), "n1", 1),
        "cli-wide": ran(api.Job(id=3, state=api.RUN, submit_time_ms=at(1), spec=sbatch_spec(
            ["-J", "cli-wide", "-N", "1", "-n", "2", "--wrap", "sleep 300"])), "n2", 2),
        "cli-pending": api.Job(id=4, state=api.PEND, submit_time_ms=at(1),
                               pending_code=api.PEND_NO_FREE_SLOTS,
                               spec=sbatch_spec(["--parsable", "-J", "cli-pending", "-n", "2", "--wrap",
                                                 "sleep 1"])),
        # (behind cli-pending in its queue: XCE's code for that, Slurm's Priority)
        "rest-pending": api.Job(id=5, state=api.PEND, submit_time_ms=at(1), pending_code=api.PEND_RESERVATION,
                                spec=rest_spec("rest-pending", "#!/bin/sh\nsleep 1\n")),
        "rest-held": api.Job(id=6, state=api.PSUSP, submit_time_ms=at(1), pending_code=api.PEND_JOB_HELD,
                             spec=rest_spec("rest-held", "#!/bin/sh\nsleep 1\n", hold=True)),
    }
    if now < 3:
        return jobs
    ended(jobs["rest-running"], api.EXIT, 2, signal=15).kill_requested = True  # DELETE: TERM
    ended(jobs["cli-wide"], api.EXIT, 2, signal=15).kill_requested = True  # scancel: TERM
    for name in ("cli-pending", "rest-pending", "rest-held"):  # scancel 4 5 6, before they ran
        ended(jobs[name], api.EXIT, 2).pending_code = api.PENDING_REASON_UNSPECIFIED
    jobs["rest-done"] = ended(ran(api.Job(id=7, submit_time_ms=at(2), spec=rest_spec(
        "rest-done", "#!/bin/sh\necho hello\n", output=f"{WORK}/rest-done-%j.out")), "n1", 3), api.DONE, 3)
    jobs["rest-exit3"] = ended(ran(api.Job(id=8, submit_time_ms=at(2), spec=rest_spec(
        "rest-exit3", "#!/bin/sh\necho failing >&2\nexit 3\n")), "n2", 3), api.EXIT, 3, exit_code=3)
    jobs["cli-done"] = ended(ran(api.Job(id=9, submit_time_ms=at(2), spec=sbatch_spec(
        ["--parsable", "-J", "cli-done", "--wrap", "echo done"])), "n2", 3), api.DONE, 3)
    jobs["cli-exit3"] = ended(ran(api.Job(id=10, submit_time_ms=at(2), spec=sbatch_spec(
        ["--parsable", "-J", "cli-exit3", "--wrap", "exit 3"])), "n1", 4), api.EXIT, 4, exit_code=3)
    array = rest_spec("rest-array", "#!/bin/sh\necho element $SLURM_ARRAY_TASK_ID\n")
    array.array.CopyFrom(api.ArraySpec(ranges=[api.IndexRange(start=0, end=2)]))
    jobs["rest-array"] = api.Job(id=11, state=api.DONE, submit_time_ms=at(4), spec=array,  # the record
                                 array=api.ArrayState(size=3, materialized=3))
    array.stdout_path = array.stderr_path = "slurm-%A_%a.out"  # (sbatch's default for an array)
    for index, (job_id, host) in enumerate(((12, "n1"), (13, "n2"), (14, "n2"))):
        element = api.JobSpec()
        element.CopyFrom(array)  # (as controller/fsm/arrays.py's element_spec makes it)
        element.ClearField("array")
        element.name = f"rest-array[{index}]"
        jobs[f"rest-array[{index}]"] = ended(ran(api.Job(id=job_id, array_id=11, array_index=index,
                                                         submit_time_ms=at(4), spec=element), host, 5),
                                             api.DONE, 5)
    if now >= 89:  # rest-timeout reached its limit (1 min), killed by TERM as Slurm's
        ended(jobs["rest-timeout"], api.EXIT, 89, signal=15, reason="RUNLIMIT")
    return jobs


def peer_hosts(busy: bool = True) -> list[api.Host]:
    """n1 and n2, 2 CPUs and 1000 MB each, both allocated; n1's load and free memory, and when its worker
    joined, those scontrol_show_node_n1.out shows."""
    return [api.Host(spec=api.HostSpec(name=name, slots=2, memory_mb=1000), status=api.HOST_OK,
                     slots_used=2 if busy else 0, status_time_ms=at(-1),
                     load={"r1m": 0.72, "mem": 21997} if name == "n1" else {})
            for name in ("n1", "n2")]


PEER_QUEUE = api.Queue(name="normal", priority=1)  # Default=YES, PriorityTier=1, MaxTime=INFINITE


class Peer:
    """A client that answers as XCE's controller would, from the records above."""

    def __init__(self, jobs: Sequence[api.Job] = (), hosts: Sequence[api.Host] = (),
                 refuse: dict[str, XceError] | None = None, submitted: int = 0) -> None:
        self.jobs, self.hosts, self.refuse, self.submitted = list(jobs), list(hosts), refuse or {}, submitted

    def list_jobs(self, filters: Sequence[str] = ()) -> list[api.Job]:
        return list(self.jobs)

    def get_job(self, ref: str | int) -> api.Job:
        found = next((j for j in self.jobs if str(j.id) == str(ref)), None)
        if found is None:
            raise XceError("NOT_FOUND", f"job {ref} not found")
        return found

    def control(self, ref: str | int, action: api.ControlAction) -> api.Job:
        if str(ref) in self.refuse:
            raise self.refuse[str(ref)]
        return self.get_job(ref)

    def submit(self, specs: Sequence[api.JobSpec]) -> api.SubmitJobsResponse:
        if "submit" in self.refuse:
            raise self.refuse["submit"]
        return api.SubmitJobsResponse(jobs=[api.Job(id=self.submitted, spec=specs[0])])

    def list_hosts(self) -> api.ListHostsResponse:
        return api.ListHostsResponse(hosts=self.hosts)

    def list_queues(self) -> api.ListQueuesResponse:
        return api.ListQueuesResponse(queues=[PEER_QUEUE], default_queue="normal")

    def who_am_i(self) -> api.WhoAmIResponse:
        return api.WhoAmIResponse(name="root")

    def history(self, request: api.HistoryRequest) -> list[api.Job]:
        return []


def command(name: str, words: list[str], peer: Peer,
            capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """The command as its script runs it (entry.run: parsing, refusals, exit status), `peer` for the
    cluster it would connect to: (rc, stdout, stderr)."""
    def connected(args: Any, run: Callable[[Any, Any], int], words: Sequence[str] = (), writes: bool = False,
                  refused: Callable[[XceError], int] | None = None) -> int:
        try:
            return run(peer, args)
        except XceError as exc:  # (what session.connected does with a refusal)
            assert refused is not None
            return refused(exc)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(session, "connected", connected)
        rc = entry.run(name, words)
    out = capsys.readouterr()
    return rc, out.out, out.err


# ------------------------------------------------------------------ normalisations

# Each: what Slurm printed that XCE cannot print the same, rewritten to what XCE prints, and why.
NORMALISED: list[tuple[str, str, str]] = [
    (r"Priority=\d+", "Priority=0",
     "Slurm's priority/basic numbers jobs down from 2^32 by submit order; XCE's priority is the job's "
     "own (0 unless given, higher first; a held job's is 0 in both)"),
    (r"AllocNode:Sid=(\S+):\d+", r"AllocNode:Sid=\1:0",
     "the submitting shell's session id, which XCE's sbatch does not record (slurmrestd's is 0 too)"),
    (r"Scheduler=Backfill", "Scheduler=Main",
     "which of Slurm's two schedulers started the job (the peer's backfill pass, every second, started "
     "them all); XCE has one"),
    (r"(TRES=cpu=\d+),mem=1000M", r"\1",
     "a pending job's requested memory: Slurm's DefMemPerNode=UNLIMITED asks a node's RealMemory for "
     "a job without --mem; XCE's job without --mem asks for none"),
]
PENDING_ESTIMATES: list[tuple[str, str, str]] = [
    (r"StartTime=2027-12-06T05:43:32", "StartTime=Unknown",
     "a pending job's expected start, the backfill scheduler's estimate (when cli-wide's year ends); "
     "XCE keeps no estimate in the job"),
    (r"LastSchedEval=2026-12-06T05:43:32", "LastSchedEval=2026-12-06T05:43:31",
     "when a scheduler last looked at a pending job: XCE does not record it, and says its submit time"),
]
NODE_FACTS: list[tuple[str, str, str]] = [
    (r"Arch=x86_64 ", "", "the node's architecture: XCE's worker does not report it (Slurm leaves Arch= "
     "out for a node that did not say)"),
    (r"\n   OS=[^\n]*", "", "the node's uname: not reported either (Slurm leaves the OS line out then)"),
    (r"NodeAddr=127.0.0.1 NodeHostName=localhost", "NodeAddr=n1 NodeHostName=n1",
     "the peer's slurm.conf gives NodeAddr/NodeHostName; an XCE host has its name alone (Slurm's "
     "default for both)"),
    (r"BootTime=\S+", "BootTime=None", "the machine's boot time: not reported"),
    (r"LastBusyTime=\S+", "LastBusyTime=Unknown", "when the node was last busy: not recorded"),
]


def expected(text: str, *rules: list[tuple[str, str, str]]) -> str:
    for rule in rules:
        for pattern, replacement, _why in rule:
            text = re.sub(pattern, replacement, text)
    return text


# ------------------------------------------------------------------ sbatch

def test_sbatch_says_the_job_s_id_as_slurm_does(capsys: pytest.CaptureFixture[str]) -> None:
    assert command("sbatch", ["-J", "cli-wide", "-N", "1", "-n", "2", "--wrap", "sleep 300"],
                   Peer(submitted=3), capsys) == (0, golden("sbatch.out"), "")
    for words, job, name in ((["-J", "cli-pending", "-n", "2", "--wrap", "sleep 1"], 4,
                              "sbatch_parsable.out"),
                             (["-J", "cli-done", "--wrap", "echo done"], 9, "sbatch_done.out"),
                             (["-J", "cli-exit3", "--wrap", "exit 3"], 10, "sbatch_exit3.out")):
        assert command("sbatch", ["--parsable", *words], Peer(submitted=job), capsys) == (0, golden(name), "")


def test_sbatch_s_unrecognized_option(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = command("sbatch", ["--bogus-option", "--wrap", "true"], Peer(), capsys)
    assert (rc, out, err) == (255, golden("sbatch_bad_option.out"), golden("sbatch_bad_option.err"))


def test_sbatch_refuses_a_script_without_interpreter_in_slurm_s_words(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    stdin = io.TextIOWrapper(io.BytesIO(b"echo no interpreter line\n"))
    monkeypatch.setattr("sys.stdin", stdin)
    assert command("sbatch", [], Peer(), capsys) == (1, golden("sbatch_no_shebang.out"),
                                                     golden("sbatch_no_shebang.err"))


def test_sbatch_s_unknown_partition_in_slurm_s_words(capsys: pytest.CaptureFixture[str]) -> None:
    refused = Peer(refuse={"submit": XceError("INVALID_ARGUMENT", "unknown queue 'nope' (queues: normal)")})
    assert command("sbatch", ["-p", "nope", "--wrap", "true"], refused, capsys) == (
        1, golden("sbatch_unknown_partition.out"), golden("sbatch_unknown_partition.err"))


# ------------------------------------------------------------------ squeue

def test_squeue_s_default_table_in_slurm_s_order(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    clock(monkeypatch, 2)
    jobs = list(peer_jobs(2).values())
    for words, name in (([], "squeue.out"),
                        (["-o", "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"], "squeue_format.out")):
        assert command("squeue", words, Peer(jobs[::-1]), capsys) == (0, golden(name), "")


def test_squeue_of_every_state_and_after(monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    clock(monkeypatch, 5)
    jobs = list(peer_jobs(5).values())
    assert command("squeue", ["-t", "all"], Peer(jobs), capsys) == (0, golden("squeue_all_states.out"), "")
    assert command("squeue", [], Peer(jobs), capsys) == (0, golden("squeue_after.out"), "")


def test_squeue_of_an_unknown_job(capsys: pytest.CaptureFixture[str]) -> None:
    assert command("squeue", ["-j", "999999"], Peer(), capsys) == (
        1, golden("squeue_bad_id.out"), golden("squeue_bad_id.err"))


SQUEUE_JSON: list[tuple[str, Any, str]] = [
    ("cluster", "xce", "the cluster's name: the peer's is xcepeer, XCE's jobs say xce (SLURM_CLUSTER_NAME)"),
    ("priority", 0, NORMALISED[0][2]),
    ("tres_req_str", "cpu=1,node=1,billing=1", NORMALISED[3][2]),
]


def test_squeue_json_as_a_real_slurm_s(monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    clock(monkeypatch, 2)
    real = json.loads(golden("squeue_json.out"))  # (its jobs cut to the first: rest-timeout, running)
    rc, out, _ = command("squeue", ["--json"], Peer([peer_jobs(2)["rest-timeout"]]), capsys)
    ours = json.loads(out)
    for key, value, _why in SQUEUE_JSON:
        real["jobs"][0][key] = value
    assert rc == 0 and json.dumps(ours, indent=2) == json.dumps(real, indent=2)  # names, order, types, values


@pytest.mark.parametrize("name, rest", [("rest-pending", "job_pending.json"), ("rest-held", "job_held.json"),
                                        ("cli-pending", "job_pending_resources.json")])
def test_squeue_json_of_pending_jobs_has_slurm_s_names_and_nulls(name: str, rest: str) -> None:
    """A pending job's record in slurmrestd's (the same openapi v0.0.38 code as squeue --json): no
    job_resources, null time_limit and billable_tres; its reason, eligible and accrue times."""
    real, ours = rest_job(rest), json_out.squeue_job(peer_jobs(2)[name])
    assert list(ours) == list(real)
    assert {k: type(v) for k, v in ours.items()} == {k: type(v) for k, v in real.items()}
    same = ("job_state", "state_reason", "time_limit", "billable_tres", "eligible_time", "accrue_time",
            "submit_time", "nodes", "batch_host", "tres_alloc_str", "cpus", "tasks", "node_count", "name",
            "user_name", "user_id", "group_name", "flags", "standard_output", "standard_error", "command")
    assert {k: ours[k] for k in same} == {k: real[k] for k in same}


@pytest.mark.parametrize("name, rest, now", [("rest-running", "job_running.json", 2),
                                             ("rest-done", "job_completed.json", 5),
                                             ("rest-exit3", "job_failed_exit3.json", 5),
                                             ("rest-running", "job_cancelled.json", 5),
                                             ("rest-timeout", "job_timeout.json", 89)])
def test_squeue_json_of_jobs_that_ran(name: str, rest: str, now: int) -> None:
    real, ours = rest_job(rest), json_out.squeue_job(peer_jobs(now)[name])
    assert list(ours) == list(real)
    same = ("job_state", "state_reason", "exit_code", "derived_exit_code", "start_time", "end_time",
            "last_sched_evaluation", "nodes", "batch_host", "tres_alloc_str", "flags", "billable_tres",
            "standard_output", "standard_error", "requeue", "restart_cnt")
    assert {k: ours[k] for k in same} == {k: real[k] for k in same}
    # (time_limit: a started job's without -t is Slurm's year, 525600 minutes; rest-timeout's its 1)
    assert ours["time_limit"] == real["time_limit"]


# ------------------------------------------------------------------ scancel

ENDED = XceError("FAILED_PRECONDITION", "cannot kill job 9 in state DONE")


@pytest.mark.parametrize("words, refuse, rc, name", [
    (["3"], {}, 0, "scancel"),  # silent when it succeeds
    (["4", "5", "6"], {}, 0, "scancel_pending"),
    (["999999"], {}, 0, "scancel_bad_id"),  # 22.05: an unknown id is said with -v or a signal alone
    (["-v", "999999"], {}, 0, "scancel_v_bad_id"),
    (["9"], {"9": ENDED}, 0, "scancel_ended_job"),
    (["-v", "9"], {"9": ENDED}, 0, "scancel_v_ended_job"),
    (["abc"], {}, 1, "scancel_not_an_id"),
    # Slurm's capture is --signal=USR1, which XCE refuses (it sends KILL, TERM, INT, STOP, CONT): TERM
    # goes Slurm's same way, a signal other than KILL, whose failure is said (rc 1).
    (["--signal=TERM", "999999"], {}, 1, "scancel_signal_bad_id"),
])
def test_scancel_as_slurm_22_05(words: list[str], refuse: dict[str, XceError], rc: int, name: str,
                                capsys: pytest.CaptureFixture[str]) -> None:
    jobs = [api.Job(id=n) for n in (3, 4, 5, 6, 9)]
    err = (GOLDEN / "cli" / f"{name}.err")
    assert command("scancel", words, Peer(jobs, refuse=refuse), capsys) == (
        rc, golden(f"{name}.out"), err.read_text() if err.exists() else "")


def test_scancel_refuses_usr1_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    """(Departure: XCE's worker sends no other signal to a job, so scancel refuses it before connecting.)"""
    rc, _, err = command("scancel", ["--signal=USR1", "999999"], Peer(), capsys)
    assert rc == 1 and err.startswith("scancel: error: Invalid signal name: USR1")
    assert scancel.words_of(XceError("FAILED_PRECONDITION", "cannot stop job 4 in state PEND")) == \
        "Job is pending execution"


# ------------------------------------------------------------------ sinfo

def test_sinfo_and_sinfo_n(capsys: pytest.CaptureFixture[str]) -> None:
    peer = Peer(hosts=peer_hosts())
    assert command("sinfo", [], peer, capsys) == (0, golden("sinfo.out"), "")
    assert command("sinfo", ["-N"], peer, capsys) == (0, golden("sinfo_N.out"), "")


def test_sinfo_s_partition_availability_in_slurm_s_states() -> None:
    """XCE's closed queue takes no submits and runs its jobs (Slurm's drain), an inactive one takes them
    and runs none (down), both is inact."""
    states = [sinfo.SINFO["a"](api.Queue(name="q", closed=c, inactive=i), [], "") for c, i in
              ((False, False), (True, False), (False, True), (True, True))]
    assert states == ["up", "drain", "down", "inact"]


# ------------------------------------------------------------------ scontrol

@pytest.mark.parametrize("name, job, now", [
    ("scontrol_show_job_pending.out", "cli-pending", 2),
    ("scontrol_show_job_running.out", "cli-wide", 2),
    ("scontrol_show_job_held.out", "rest-held", 2),
    ("scontrol_show_job_cancelled.out", "cli-wide", 5),
    ("scontrol_show_job_completed.out", "cli-done", 5),
    ("scontrol_show_job_failed.out", "cli-exit3", 5),
    ("scontrol_show_job_timeout.out", "rest-timeout", 89),
])
def test_scontrol_show_job(name: str, job: str, now: int, monkeypatch: pytest.MonkeyPatch,
                           capsys: pytest.CaptureFixture[str]) -> None:
    clock(monkeypatch, now)
    record = peer_jobs(now)[job]
    rc, out, err = command("scontrol", ["show", "job", str(record.id)], Peer([record]), capsys)
    assert (rc, err) == (0, "")
    assert out == expected(golden(name), NORMALISED, PENDING_ESTIMATES if "pending" in name else [])


def test_scontrol_show_job_one_line_and_an_array_s_element(monkeypatch: pytest.MonkeyPatch) -> None:
    clock(monkeypatch, 5)
    done = peer_jobs(5)["cli-done"]
    one = scontrol.text(scontrol.job_lines(done, at(5)), oneliner=True, trailing=True)
    lines = expected(golden("scontrol_show_job_completed.out"), NORMALISED).rstrip("\n").split("\n   ")
    assert one == " ".join(lines) + "\n"  # (Slurm's -o: the same keys, a space between)
    element = scontrol.job_lines(peer_jobs(5)["rest-array[1]"], at(5))
    assert element[0] == "JobId=13 ArrayJobId=11 ArrayTaskId=1 JobName=rest-array"  # (Slurm's order)
    assert element[-2:] == ["StdOut=/tmp/xce-slurm-nvw09ls2/jobs/slurm-11_1.out", "Power="]


def test_scontrol_show_node(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = command("scontrol", ["show", "node", "n1"], Peer(hosts=peer_hosts()), capsys)
    assert (rc, err) == (0, "")
    assert out == expected(golden("scontrol_show_node_n1.out"), NODE_FACTS)


def test_scontrol_show_partition(capsys: pytest.CaptureFixture[str]) -> None:
    assert command("scontrol", ["show", "partition"], Peer(hosts=peer_hosts()), capsys) == (
        0, golden("scontrol_show_partition.out"), "")


def test_scontrol_s_states_of_a_closed_host_and_queue() -> None:
    closed = peer_hosts(busy=False)[0]
    closed.closed, closed.closed_reason, closed.closed_by, closed.closed_time_ms = True, "disk", "root", at(3)
    lines = scontrol.node_lines(closed, ["normal"])
    assert lines[7].startswith("State=IDLE+DRAIN ") and lines[-1] == "Reason=disk [root@2026-12-06T05:43:33]"
    queue = scontrol.partition_lines(api.Queue(name="q", inactive=True, preemptable=True), "normal", [])
    assert "State=DOWN TotalCPUs=0 TotalNodes=0 SelectTypeParameters=NONE" in queue
    assert "OverTimeLimit=NONE PreemptMode=SUSPEND" in queue and "Nodes=(null)" in queue


def test_scontrol_s_dependency_in_slurm_s_words() -> None:
    job = api.Job(spec=api.JobSpec(depend="done(17) || exit(18[3])"), depend_state=api.DEPEND_PENDING)
    assert formats.dependency(job) == "afterok:17(unfulfilled)?afternotok:18_3(unfulfilled)"
    assert scontrol.job_lines(job, 0, lambda user: (0, 0, "root"))[3].endswith(
        " Dependency=afterok:17(unfulfilled)?afternotok:18_3(unfulfilled)")
    job.depend_state = api.DEPEND_SATISFIED
    assert formats.dependency(job) == "" and json_out.squeue_job(job)["dependency"] == ""


# ------------------------------------------------------------------ sacct (documented format)

def test_sacct_parsable_and_default_table_as_slurm_22_05_documents_them(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Not from the peer (no accounting there: sacct.err says "Slurm accounting storage is disabled"),
    but from Slurm 22.05's sacct field table and print_fields: -P is fields joined by `|`, no padding."""
    clock(monkeypatch, 5)
    jobs = peer_jobs(5)
    peer = Peer([jobs["cli-wide"], jobs["cli-done"], jobs["cli-exit3"]])
    assert command("sacct", ["-P", "-o", "JobID,State,ExitCode", "-j", "9,10"], peer, capsys) == (
        0, "JobID|State|ExitCode\n9|COMPLETED|0:0\n10|FAILED|3:0\n", "")
    rc, out, _ = command("sacct", ["-j", "9,10"], peer, capsys)
    assert rc == 0 and out.splitlines() == [
        "JobID           JobName  Partition    Account  AllocCPUS      State ExitCode ",
        "------------ ---------- ---------- ---------- ---------- ---------- -------- ",
        "9              cli-done     normal                     1  COMPLETED      0:0 ",
        "10            cli-exit3     normal                     1     FAILED      3:0 "]
    assert job_table.SACCT_DEFAULT == "JobID,JobName,Partition,Account,AllocCPUS,State,ExitCode"


def test_scontrol_show_job_of_an_unknown_job(capsys: pytest.CaptureFixture[str]) -> None:
    """(As squeue's: slurm_load_jobs' error, the same call in Slurm's scontrol.)"""
    assert command("scontrol", ["show", "job", "999999"], Peer(), capsys) == (
        1, "", golden("squeue_bad_id.err"))
