"""What real Slurm clients need of the Slurm commands (cli/slurm/), pure: submitit's #SBATCH lines
(--signal checked, --wckey and --gpus-per-node taken), sbatch's input variables ranked as Slurm ranks
them (command line > SBATCH_* > #SBATCH), an array's rest as squeue and sacct name it, squeue's -O
names, squeue --json and sacct --json in Slurm 22.05's shape, sinfo's -o, salloc's job, srun's
output frames, and compressed host lists of 1, 3 and 40 hosts."""

from __future__ import annotations

import datetime
import json
import socket
from pathlib import Path

import pytest

from cli.parser import UsageError
from cli.slurm import array_rest, entry, formats, job_table, json_out, salloc, sbatch, sinfo, task_relay
from xce import hostlist
from xce.v1 import api_pb2 as api

NOW = datetime.datetime(2026, 12, 6, 10, 0, 0)
SUBMITTER = {"USER": "alice", "PATH": "/usr/bin", "HOME": "/home/alice", "SHELL": "/bin/bash"}

SUBMITIT = """#!/bin/bash

# Parameters
#SBATCH --array=0-19%4
#SBATCH --cpus-per-task=2
#SBATCH --error=/shared/logs/%A_%a_0_log.err
#SBATCH --gpus-per-node=1
#SBATCH --job-name=submitit
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --open-mode=append
#SBATCH --output=/shared/logs/%A_%a_0_log.out
#SBATCH --signal=USR2@90
#SBATCH --time=5
#SBATCH --wckey=submitit

# command
export SUBMITIT_EXECUTOR=slurm
srun --unbuffered --output /shared/logs/%A_%a_%t_log.out python -u -m submitit.core._submit /shared/logs
"""


def built(tmp_path: Path, words: list[str], text: str | None = None,
          environ: dict[str, str] | None = None) -> tuple[api.JobSpec, list[str]]:
    if text is not None:
        (tmp_path / "job.sh").write_text(text)
        words = [*words, str(tmp_path / "job.sh")]
    _, args = entry.parse("sbatch", words)
    spec = sbatch.build(args, {**SUBMITTER, **(environ or {})}, "login1", NOW)
    return spec, args.notes


def test_submitit_s_script_is_taken_whole(tmp_path: Path) -> None:
    spec, notes = built(tmp_path, ["--parsable"], SUBMITIT)
    assert (spec.name, spec.slots, spec.run_limit_s, spec.array.limit) == ("submitit", 2, 300, 4)
    assert spec.resource_req == "span[hosts=1] rusage[gpu=1]"  # --gpus-per-node as --gres=gpu:1
    assert spec.stdout_path == "/shared/logs/%A_%a_0_log.out" and not spec.stdout_overwrite  # append
    assert notes == []  # USR2 90 s before the limit: to the job's tasks (worker/monitor.py)
    untimed, quiet = built(tmp_path, ["--signal=B:TERM@30", "--wckey", "x", "--wrap", "true"])
    assert quiet == [] and untimed.run_limit_s == 0  # no run limit: no signal to miss


@pytest.mark.parametrize("text, expected", [
    ("USR2@90", ("", 12, 90)), ("B:SIGTERM@5", ("B", 15, 5)), ("R:10", ("", 10, 60)),
    ("RB:INT@0", ("B", 2, 0)), ("9", ("", 9, 60)),
])
def test_signal_as_slurm_reads_it(text: str, expected: tuple[str, int, int]) -> None:
    assert sbatch.warning_signal(text) == expected


@pytest.mark.parametrize("text, said", [
    ("NOPE@10", "is not a signal"), ("X:USR1", "write [{R|B}:]SIG[@TIME]"), ("USR1@70000", "0 to 65535"),
    ("USR1@soon", "0 to 65535"), ("65", "is not a signal"),
])
def test_signal_refusals(text: str, said: str) -> None:
    with pytest.raises(UsageError, match=said.replace("[", r"\[").replace("|", r"\|")):
        sbatch.warning_signal(text)


def test_input_variables_rank_between_the_command_line_and_the_script(tmp_path: Path) -> None:
    script = "#!/bin/sh\n#SBATCH -p from_script -J script_name -t 10 -A chem\ntrue\n"
    environ = {"SBATCH_PARTITION": "from_env", "SBATCH_TIMELIMIT": "20", "SBATCH_OUTPUT": "env-%j.out",
               "SBATCH_REQUEUE": "", "SBATCH_EXPORT": "NONE", "SBATCH_ARRAY_INX": "1-3"}
    spec, _ = built(tmp_path, ["-t", "30"], script, environ)
    assert (spec.queue, spec.run_limit_s, spec.name) == ("from_env", 1800, "script_name")
    assert spec.project == "chem"
    assert spec.stdout_path == "env-%j.out" and spec.rerunnable and [r.end for r in spec.array.ranges] == [3]
    assert set(spec.env) == {"SLURM_SUBMIT_DIR", "SLURM_SUBMIT_HOST", "SLURM_NTASKS"}  # --export=NONE
    with pytest.raises(UsageError, match="SBATCH_QOS: --qos: this option of Slurm's is not carried out"):
        built(tmp_path, ["--wrap", "true"], None, {"SBATCH_QOS": "high"})
    assert sbatch.input_words({"SBATCH_JOB_NAME": "", "SBATCH_EXCLUSIVE": ""}) == ["--exclusive"]


def _array(runs: list[tuple[int, int, int]], limit: int = 0, step: int = 1, end: int = 100) -> api.Job:
    indices = api.ArraySpec(ranges=[api.IndexRange(start=0, end=end, step=step)], limit=limit)
    spec = api.JobSpec(name="sweep", user="alice", queue="normal", slots=1, array=indices)
    state = api.ArrayState(size=end // step + 1,
                           runs=[api.ElementRun(first=a, last=b, state=s) for a, b, s in runs])
    return api.Job(id=12, state=api.PEND, spec=spec, array=state)


def test_an_array_s_rest_as_squeue_and_sacct_name_it() -> None:
    record = _array([(5, 100, api.PEND)], limit=5)
    rest = array_rest.rest(record)
    assert [formats.job_id(line, True) for line in rest] == ["12_[5-100%5]"]  # squeue
    assert [formats.job_id(line) for line in rest] == ["12_[5-100]"]  # sacct
    assert formats.name(rest[0]) == "sweep" and formats.state(rest[0]) == "PENDING"
    record.depend_state = api.DEPEND_PENDING
    assert formats.reason(array_rest.rest(record)[0]) == "Dependency"  # (the record holds the condition)
    held = array_rest.rest(_array([(3, 4, api.PSUSP), (8, 9, api.PEND), (20, 20, api.PEND)]))
    assert [(formats.job_id(line), formats.reason(line)) for line in held] == [
        ("12_[8-9,20]", "Priority"), ("12_[3-4]", "JobHeldUser")]
    stepped = array_rest.rest(_array([(1, 999_999, api.PEND)], step=2, end=1_999_999))[0]
    text = array_rest.indices_text(stepped)
    assert text.startswith("2,4,6,8") and text.endswith("...") and len(text) == array_rest.BITSTR_LEN
    element = api.Job(id=30, array_id=12, array_index=3, state=api.PEND, array_limit=5,
                      pending_code=api.PEND_LIMIT_REACHED, spec=api.JobSpec(name="sweep[3]"))
    assert (formats.job_id(element), formats.name(element), formats.reason(element)) == (
        "12_3", "sweep", "JobArrayTaskLimit")
    assert array_rest.rest(element) == []  # an element has no rest


def test_squeue_s_named_fields() -> None:
    job = api.Job(id=17, state=api.RUN, host="w1", start_time_ms=1, submit_time_ms=1,
                  spec=api.JobSpec(name="sim", user="alice", queue="normal", slots=2, run_limit_s=600))
    rest = array_rest.rest(_array([(5, 9, api.PEND)], limit=2))[0]
    rows = job_table.squeue_rows([job, rest], "JobID:6,Name:.8|,StateCompact:3,ArrayTaskID,TimeLimit", True,
                                 named=True)
    assert rows == ["JOBID     NAME|ST ARRAY_TASK_ID       TIME_LIMIT          ",
                    "17         sim|R  N/A                 10:00               ",
                    "12       sweep|PD 5-9%2               UNLIMITED           "]
    with pytest.raises(UsageError, match="Invalid job format specification: Bogus"):
        job_table.squeue_named_format("JobID,Bogus")


def test_squeue_json_as_slurm_22_05_prints_it() -> None:
    job = api.Job(id=41, array_id=40, array_index=3, state=api.EXIT, exit_code=2, host="node01",
                  submit_time_ms=1_700_000_000_000, start_time_ms=1_700_000_001_000,
                  end_time_ms=1_700_000_061_000, allocation=[api.HostAllocation(host="node01", slots=2),
                                                             api.HostAllocation(host="node02", slots=2)],
                  spec=api.JobSpec(name="sim[3]", user="alice", queue="normal", slots=4, run_limit_s=3600,
                                   env={"SLURM_NTASKS": "4"}))
    document = json.loads(json_out.document(json_out.SQUEUE_PLUGIN, [json_out.squeue_job(job)]))
    assert set(document) == {"meta", "errors", "jobs"} and document["errors"] == []
    assert document["meta"]["plugin"]["type"] == "openapi/v0.0.38"
    assert document["meta"]["Slurm"]["release"] == "22.05.8"
    shown = document["jobs"][0]
    names = ("job_id", "name", "user_name", "partition", "job_state", "state_reason", "exit_code", "nodes",
             "node_count", "array_job_id", "array_task_id", "submit_time", "start_time", "end_time",
             "time_limit", "tasks", "cpus")
    assert {k: shown[k] for k in names} == {
        "job_id": 41, "name": "sim", "user_name": "alice", "partition": "normal", "job_state": "FAILED",
        "state_reason": "NonZeroExitCode", "exit_code": 512, "nodes": "node[01-02]", "node_count": 2,
        "array_job_id": 40,
        "array_task_id": 3, "submit_time": 1_700_000_000, "start_time": 1_700_000_001,
        "end_time": 1_700_000_061, "time_limit": 60, "tasks": 4, "cpus": 4}
    rest = json_out.squeue_job(array_rest.rest(_array([(5, 9, api.PEND)], limit=2))[0])
    assert (rest["job_id"], rest["array_task_id"], rest["array_task_string"], rest["array_max_tasks"]) == (
        12, None, "5-9%2", 2)


def test_sacct_json_as_slurm_22_05_prints_it() -> None:
    killed = api.Job(id=7, state=api.EXIT, term_signal=9, kill_requested=True, host="w1", start_time_ms=1000,
                     end_time_ms=61_000, spec=api.JobSpec(name="x", user="bob", queue="normal", slots=1))
    done = api.Job(id=8, state=api.DONE, host="w2", start_time_ms=1000, end_time_ms=2000,
                   spec=api.JobSpec(name="y", user="bob", queue="normal", slots=1, comment="run 3"))
    document = json.loads(json_out.document(json_out.SACCT_PLUGIN, [json_out.sacct_job(j, 0)
                                                                     for j in (killed, done)]))
    assert document["meta"]["plugin"]["type"] == "openapi/dbv0.0.38"
    first, second = document["jobs"]
    assert first["state"] == {"current": "CANCELLED", "reason": "None"}
    assert first["exit_code"] == {"status": "SIGNALED", "return_code": 0,
                                  "signal": {"signal_id": 9, "name": "KILL"}}
    assert first["time"]["elapsed"] == 60 and first["nodes"] == "w1" and first["steps"] == []
    assert second["exit_code"] == {"status": "SUCCESS", "return_code": 0}
    assert second["comment"]["job"] == "run 3" and second["array"]["task_id"] is None
    rest = json_out.sacct_job(array_rest.rest(_array([(5, 9, api.PEND)]))[0], 0)
    assert (rest["job_id"], rest["array"]["job_id"], rest["array"]["task"]) == (12, 12, "5-9")
    assert rest["nodes"] == "None assigned" and rest["exit_code"]["status"] == "PENDING"


def test_sinfo_s_format_lines_as_slurm_groups_them() -> None:
    def host(name: str, used: int, closed: bool = False) -> api.Host:
        return api.Host(spec=api.HostSpec(name=name, slots=4), status=api.HOST_OK, slots_used=used,
                        closed=closed)

    hosts = [host("n1", 0), host("n2", 4), host("n3", 0), host("n4", 1, closed=True)]
    queues = [api.Queue(name="normal"), api.Queue(name="long")]
    assert sinfo.lines(queues, hosts, "normal", "%P", False, False) == ["normal*", "long"]
    assert sinfo.lines(queues[:1], hosts, "normal", sinfo.DEFAULT, False, True) == [
        "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST",
        "normal*      up   infinite      1  alloc n2",
        "normal*      up   infinite      1  drain n4",
        "normal*      up   infinite      2   idle n[1,3]"]
    assert sinfo.lines(queues[1:], hosts, "normal", "%R %C %F", False, False) == ["long 4/8/4/16 1/2/1/4"]
    with pytest.raises(UsageError, match="Invalid node format specification: y"):
        sinfo.parse_format("%y")


def test_salloc_s_job_runs_the_command_or_the_shell() -> None:
    _, args = entry.parse("salloc", ["-N", "2", "--ntasks-per-node=2", "-t", "10"])
    spec = salloc.build(args, SUBMITTER, "login1", "/home/alice")
    assert spec.command == ["/bin/bash"]  # the user's shell
    assert (spec.slots, spec.resource_req, spec.run_limit_s) == (4, "span[ptile=2]", 600)
    assert spec.env["SLURM_NTASKS"] == "4" and spec.env["SLURM_SUBMIT_DIR"] == "/home/alice"
    _, args = entry.parse("salloc", ["-n1", "srun", "-n", "1", "hostname"])
    assert salloc.build(args, SUBMITTER, "h", "/d").command == ["srun", "-n", "1", "hostname"]


def test_srun_s_output_frames_name_their_stream() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        ours.sendall(task_relay.FRAME.pack(2, 5) + b"oops\n" + task_relay.FRAME.pack(1, 2) + b"ok")
        ours.shutdown(socket.SHUT_WR)
        assert task_relay._frame(theirs) == (2, b"oops\n")
        assert task_relay._frame(theirs) == (1, b"ok")
        assert task_relay._frame(theirs) is None


def test_compressed_host_lists_of_one_three_and_forty_hosts() -> None:
    assert hostlist.compress(["node07"]) == "node07"
    assert hostlist.compress(["node03", "node01", "node02"]) == "node[01-03]"
    forty = [f"node{i:03d}" for i in range(1, 41)]
    assert hostlist.compress(forty) == "node[001-040]"
    gappy = [f"cn{i}" for i in [*range(1, 18), *range(20, 43)]]
    assert len(gappy) == 40 and hostlist.compress(gappy) == "cn[1-17,20-42]"
    mixed = [*(f"a{i:02d}" for i in range(1, 21)), *(f"b{i}" for i in range(100, 120))]
    assert hostlist.compress(mixed) == "a[01-20],b[100-119]"


def test_squeue_json_has_a_real_slurm_s_fields_in_its_order() -> None:
    golden = Path(__file__).resolve().parents[1] / "golden" / "slurm22" / "cli" / "squeue_json.out"
    if not golden.exists():
        pytest.skip("no golden of a real Slurm's squeue --json")
    real = json.loads(golden.read_text())
    ours = json.loads(json_out.document(json_out.SQUEUE_PLUGIN, [json_out.squeue_job(api.Job(
        id=1, state=api.RUN, host="w1", start_time_ms=1000, spec=api.JobSpec(slots=1, user="nobody")))]))
    assert ours["meta"] == real["meta"] and list(ours) == list(real)
    assert list(ours["jobs"][0]) == list(real["jobs"][0])
    kinds = {k: type(v) for k, v in real["jobs"][0].items()}
    assert {k: type(v) for k, v in ours["jobs"][0].items()} == kinds
    assert ours["jobs"][0]["job_resources"].keys() == real["jobs"][0]["job_resources"].keys()


def test_sinfo_s_tables_as_a_real_slurm_prints_them() -> None:
    golden = Path(__file__).resolve().parents[1] / "golden" / "slurm22" / "cli"
    if not (golden / "sinfo.out").exists():
        pytest.skip("no golden of a real Slurm's sinfo")
    busy = [api.Host(spec=api.HostSpec(name=name, slots=2), status=api.HOST_OK, slots_used=2)
            for name in ("n1", "n2")]
    queues = [api.Queue(name="normal")]
    assert sinfo.lines(queues, busy, "normal", sinfo.DEFAULT, False, True) == (
        golden / "sinfo.out").read_text().splitlines()
    assert sinfo.lines(queues, busy, "normal", sinfo.DEFAULT_NODES, True, True) == (
        golden / "sinfo_N.out").read_text().splitlines()
