"""Slurm's commands (cli/slurm/): sbatch reads #SBATCH lines under its command line, maps each option
to XCE's job (slots, layout, memory, time, arrays with %, dependencies, output patterns, the
environment), refuses what XCE does not carry out and what Slurm would refuse; getopt's `-n4`;
squeue's and sacct's formats and Slurm's words for states, reasons and exit codes; compressed host
lists."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from cli.parser import UsageError
from cli.slurm import entry, formats, job_table, sbatch
from xce import hostlist
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

NOW = datetime.datetime(2026, 12, 6, 10, 0, 0)
SUBMITTER = {"USER": "alice", "PATH": "/opt/bin:/usr/bin", "HOME": "/home/alice", "SLURM_JOB_ID": "99"}


def built(tmp_path: Path, words: list[str], text: str | None = None) -> api.JobSpec:
    if text is not None:
        (tmp_path / "job.sh").write_text(text)
        words = [*words, str(tmp_path / "job.sh")]
    _, args = entry.parse("sbatch", words)
    return sbatch.build(args, SUBMITTER, "login1", NOW)


SCRIPT = """#!/bin/bash
#SBATCH --job-name=sim
#SBATCH -p normal
#SBATCH -A chem
#SBATCH -n 4 -c 2
#SBATCH --mem=8G
#SBATCH -t 1-02:30:00
#SBATCH -o logs/%x-%j.out
#SBATCH -e logs/%x-%j.err
#SBATCH --array=1-100:2%5
#SBATCH --dependency=afterok:17:18_3?afternotok:19
#SBATCH --begin=now+1hour
#SBATCH --hold
#SBATCH --gres=gpu:2
#SBATCH --mail-type=END,FAIL
#SBATCH --mail-user=alice@example.org
#SBATCH --export=NONE
# a comment still among the options
./simulate "$SLURM_ARRAY_TASK_ID"
#SBATCH -p ignored   (after the first command: not an option, as Slurm's rule)
"""


def test_fifteen_kinds_of_sbatch_line(tmp_path: Path) -> None:
    spec = built(tmp_path, [], SCRIPT)
    assert (spec.name, spec.queue, spec.project, spec.slots) == ("sim", "normal", "chem", 8)
    assert spec.mem_limit_mb == 8192
    assert spec.run_limit_s == 86_400 + 2 * 3600 + 30 * 60
    assert (spec.stdout_path, spec.stderr_path) == ("logs/%x-%j.out", "logs/%x-%j.err")  # the worker's
    assert [(r.start, r.end, r.step) for r in spec.array.ranges] == [(1, 100, 2)] and spec.array.limit == 5
    assert spec.depend == "done(17) || done(18[3]) || exit(19)"
    assert spec.begin_time_ms == int((NOW + datetime.timedelta(hours=1)).timestamp() * 1000)
    assert spec.hold and spec.resource_req == "span[ptile=2] rusage[gpu=2]"  # each task's 2 CPUs together
    assert (spec.mail_begin, spec.mail_end, spec.mail_user) == (False, True, "alice@example.org")
    assert set(spec.env) == {"SLURM_SUBMIT_DIR", "SLURM_SUBMIT_HOST", "SLURM_NTASKS", "SLURM_CPUS_PER_TASK"}
    assert spec.env["SLURM_NTASKS"] == "4" and spec.command[0] == "/bin/bash"


def test_the_command_line_wins_and_getopt_s_attached_values(tmp_path: Path) -> None:
    spec = built(tmp_path, ["-pdebug", "-n2", "--time=30", "--export=ALL,EXTRA=1", "-N", "1"], SCRIPT)
    assert (spec.queue, spec.slots, spec.run_limit_s, spec.resource_req) == (
        "debug", 4, 1800, "span[hosts=1] rusage[gpu=2]")
    assert spec.env["EXTRA"] == "1" and spec.env["PATH"] == "/opt/bin:/usr/bin"
    assert "SLURM_JOB_ID" not in spec.env  # the submitting job's: the new one gets its own


def test_wrap_and_defaults(tmp_path: Path) -> None:
    spec = built(tmp_path, ["--wrap", "echo hi; hostname"])
    assert spec.command[:2] == ["/bin/sh", "-c"] and "echo hi; hostname" in spec.command[2]
    assert (spec.slots, spec.stdout_path, spec.stderr_path) == (1, "slurm-%j.out", "slurm-%j.out")
    assert spec.resource_req == "span[hosts=1]"  # a task's CPUs on one host
    assert spec.env["PATH"] == "/opt/bin:/usr/bin"  # --export=ALL, Slurm's default
    array = built(tmp_path, ["--array=0-3", "--wrap", "true"])
    assert array.stdout_path == "slurm-%A_%a.out" and array.array.ranges[0].start == 0  # Slurm's from 0


@pytest.mark.parametrize("words, text, said", [
    (["--wrap", "true", "--qos", "high"], None, "--qos: this option"),
    (["--nta", "2", "--wrap", "true"], None, "unrecognized option '--nta'"),
    ([], "echo no interpreter\n", "line must start with #! followed by the path to an interpreter"),
    (["-t", "1:2:3:4", "--wrap", "x"], None, "Invalid time limit specification"),
    (["--dependency=afterwards:1", "--wrap", "x"], None, "--dependency"),
    (["--mem=lots", "--wrap", "x"], None, "invalid memory specification"),
    (["-o", "out-%N.txt", "--wrap", "x"], None, "%N is not carried out"),
    ([], "#!/bin/sh\n#SBATCH --bogus\ntrue\n", "#SBATCH: unrecognized option '--bogus'"),
])
def test_refusals(tmp_path: Path, capsys: pytest.CaptureFixture[str], words: list[str], text: str | None,
                  said: str) -> None:
    try:
        built(tmp_path, words, text)
    except UsageError as exc:
        message = str(exc)
    except SystemExit:
        message = capsys.readouterr().err
    else:
        raise AssertionError("not refused")
    assert said in message, message


def test_slurm_s_words_for_jobs() -> None:
    killed = api.Job(id=5, state=api.EXIT, kill_requested=True, start_time_ms=1)
    timeout = api.Job(id=6, state=api.EXIT, exit_reason="RUNLIMIT", term_signal=9, start_time_ms=1)
    failed = api.Job(id=7, state=api.EXIT, exit_code=3, start_time_ms=1)
    element = api.Job(id=9, array_id=8, array_index=4, state=api.PEND, pending_code=api.PEND_DEPENDENCY)
    assert [formats.state(j) for j in (killed, timeout, failed)] == ["CANCELLED", "TIMEOUT", "FAILED"]
    assert [formats.exit_code(j) for j in (timeout, failed)] == ["0:9", "3:0"]
    assert (formats.job_id(element), formats.reason(element), formats.short_state(element)) == (
        "8_4", "Dependency", "PD")
    assert formats.squeue_time(65) == "1:05" and formats.squeue_time(3725) == "1:02:05"
    assert formats.elapsed(90_061) == "1-01:01:01"


def test_compressed_host_lists() -> None:
    assert hostlist.compress(["w1"]) == "w1"
    assert hostlist.compress(["node01", "node02", "node03"]) == "node[01-03]"
    assert hostlist.compress([f"n{i}" for i in range(1, 41)]) == "n[1-40]"
    assert hostlist.compress(["gpu1", "cpu3", "cpu1", "cpu2", "cpu7", "login"]) == "gpu1,cpu[1-3,7],login"


def test_squeue_and_sacct_formats() -> None:
    run = api.Job(id=17, state=api.RUN, host="w1", start_time_ms=1, submit_time_ms=1,
                  spec=api.JobSpec(name="a-long-job-name", user="alice", queue="normal", slots=2))
    rows = job_table.squeue_rows([run], job_table.SQUEUE_DEFAULT, True)
    assert rows[0] == "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)"
    assert rows[1].split()[:5] == ["17", "normal", "a-long-j", "alice", "R"] and rows[1].endswith(" w1")
    assert job_table.squeue_rows([run], "%i|%T", False) == ["17|RUNNING"]
    with pytest.raises(UsageError, match="Invalid job format specification: y"):
        job_table.squeue_format("%y")
    assert job_table.sacct_fields("jobid,State%20,User%-9") == [("JobID", 12, True), ("State", 20, False),
                                                                 ("User", 9, True)]
    with pytest.raises(UsageError, match='Invalid field requested: "Bogus"'):
        job_table.sacct_fields("Bogus")


def test_slurm_s_variables_only_for_a_job_sbatch_submitted() -> None:
    from worker import spawn

    spec = api.JobSpec(name="sim", queue="normal", project="chem", slots=4,
                       env={"SLURM_SUBMIT_DIR": "/home/alice", "SLURM_NTASKS": "2"})
    job = api.Job(id=41, array_id=40, array_index=3, host="node01", spec=spec,
                  allocation=[api.HostAllocation(host="node01", slots=2),
                              api.HostAllocation(host="node02", slots=2)])
    env = spawn.slurm_env(job, None)
    assert (env["SLURM_JOB_ID"], env["SLURM_ARRAY_JOB_ID"], env["SLURM_ARRAY_TASK_ID"]) == ("41", "40", "3")
    assert (env["SLURM_JOB_NODELIST"], env["SLURM_JOB_NUM_NODES"], env["SLURM_CPUS_ON_NODE"]) == (
        "node[01-02]", "2", "2")
    assert env["SLURM_NTASKS"] == "2" and env["SLURM_JOB_PARTITION"] == "normal"
    assert spawn.slurm_env(api.Job(id=1, spec=api.JobSpec(slots=1)), None) == {}  # bsub's: none
    from cli.lsf import environment

    assert set(env) <= environment.NEVER_COPIED  # never carried into a job it submits


def test_an_array_from_index_0_from_format_24() -> None:
    from controller.fsm import arrays
    from controller.fsm.versions import ZERO_INDEX_FORMAT
    from tests.unit.test_unit_arrays import State

    spec = api.JobSpec(command=["true"], array=api.ArraySpec(ranges=[api.IndexRange(start=0, end=2)]))
    state = State()
    refused = state.run(log.Entry(format=ZERO_INDEX_FORMAT - 1, submit=log.SubmitBatch(
        requests=[api.SubmitJobsRequest(request_id="old", jobs=[spec])])))
    assert refused.code == log.INVALID_ARGUMENT and "bad range 0-2" in refused.message
    taken = state.run(log.Entry(format=ZERO_INDEX_FORMAT, submit=log.SubmitBatch(
        requests=[api.SubmitJobsRequest(request_id="new", jobs=[spec])])))
    assert taken.code == log.OK, taken.message
    record, wanted = arrays.find_target(state.tables, f"{taken.job_ids[0]}[0]")
    assert wanted is not None and wanted[0].start == 0
    assert arrays.element_view(state.tables, record, 0).array_index == 0


def test_getopt_s_reading_after_values_of_their_own(tmp_path: Path) -> None:
    spec = built(tmp_path, ["-p", "debug", "-n4", "-J", "-odd", "--wrap", "true"])
    assert (spec.queue, spec.slots, spec.name) == ("debug", 4, "-odd")
    _, args = entry.parse("sacct", ["-XPn", "-j", "1", "-j", "2", "-o", "JobID", "-o", "State"])
    assert (args.allocations, args.parsable2, args.noheader) == (True, True, True)
    from cli.slurm import sacct

    assert sacct.prepare(args) and args.jobs == "1,2" and [f[0] for f in args.fields] == ["JobID", "State"]
    _, args = entry.parse("sacct", ["-nu", "alice"])
    assert (args.noheader, args.users) == (True, "alice")
    _, args = entry.parse("squeue", ["-u", "me", "-o%i %T"])
    assert (args.users, args.format) == ("me", "%i %T")


def test_sbatch_lines_as_slurm_reads_them(tmp_path: Path) -> None:
    text = ('#!/bin/sh\n#SBATCH -J "a #1" # a comment\n  #SBATCH -p ignored (not in column 0)\n'
            "#SBATCH --mem=0 -t 0\ntrue\n")
    spec = built(tmp_path, [], text)
    assert (spec.name, spec.queue, spec.mem_limit_mb, spec.run_limit_s) == ("a #1", "", 0, 0)  # 0: no limit


@pytest.mark.parametrize("words, text, said", [
    ([], "#!/bin/sh\n#SBATCH --mem 4 G\ntrue\n", "Invalid argument: G"),
    ([], "#!/bin/sh\r\ntrue\r\n", "DOS line breaks"),
    (["-d", "afterok:1,afterany:2?afterok:3", "--wrap", "x"], None, "one kind of separator"),
    (["-d", "after:1+10", "--wrap", "x"], None, "a delay (+time) is not carried out"),
    (["--signal", "USR9@60", "--wrap", "x"], None, "'USR9' is not a signal"),
    (["--reservation", "maint", "--wrap", "x"], None, "this option of Slurm's is not carried out"),
])
def test_more_refusals(tmp_path: Path, capsys: pytest.CaptureFixture[str], words: list[str], text: str | None,
                       said: str) -> None:
    test_refusals(tmp_path, capsys, words, text, said)


def test_the_worker_fills_slurm_s_patterns_in() -> None:
    from worker import spawn

    spec = api.JobSpec(name="sim", user="alice", env={"SLURM_SUBMIT_DIR": "/d"})
    element = api.Job(id=42, array_id=40, array_index=2, spec=spec)
    assert spawn.output_path("%x-%j-%A_%a-%u-%%.out", element) == "sim-42-40_2-alice-%.out"
    lsf = api.Job(id=42, array_id=40, array_index=2, spec=api.JobSpec(name="sim"))
    assert spawn.output_path("out-%J-%I-%j.txt", lsf) == "out-40-2-%j.txt"  # bsub's: LSF's tokens only


def test_comment_and_open_mode(tmp_path: Path) -> None:
    spec = built(tmp_path, ["--comment", "run 7 of the sweep", "--wrap", "true"])
    assert spec.comment == "run 7 of the sweep" and spec.stdout_overwrite and spec.stderr_overwrite
    appended = built(tmp_path, ["--open-mode=append", "--wrap", "true"])
    assert not appended.stdout_overwrite and not appended.comment
    job = api.Job(id=1, spec=spec)
    assert job_table.SACCT["Comment"](job, 0) == "run 7 of the sweep"


def test_a_task_never_empties_the_job_s_output() -> None:
    from worker import spawn
    from worker.process_host import Account

    job = api.Job(id=3, spec=api.JobSpec(command=["true"], stdout_path="o.txt", stderr_path="o.txt",
                                         stdout_overwrite=True, stderr_overwrite=True, cwd="/tmp"))
    account = Account("alice", 1000, 1000, "/home/alice", "/bin/sh")
    whole = spawn.shim_command(job, account, Path("/s"), None, ("o.txt", "o.txt"), False)
    assert whole[whole.index("--overwrite") + 1] == "1,2"  # the job's start empties them (sbatch, -oo)
    task = api.LaunchTask(task_id="t", host="w2", command=["hostname"])
    assert "--overwrite" not in spawn.shim_command(job, account, Path("/s"), task, ("o.txt", "o.txt"), False)
