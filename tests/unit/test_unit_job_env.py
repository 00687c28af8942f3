"""The job's environment as LSF makes it (worker/spawn.py): LSF's variables of a batch job, in a job,
an array's element and a task, beside XCE's own; nothing of the worker's."""

from __future__ import annotations

from pathlib import Path

from worker import spawn
from worker.process_host import Account
from xce.v1 import api_pb2 as api

OWNER = Account("alice", 1000, 1000, "/home/alice", "/bin/bash")


def env_of(job: api.Job, task: api.LaunchTask | None = None) -> dict[str, str]:
    ids = spawn.ids_env(job, spool=Path("/spool"), task=task)
    where = spawn.hosts_env(job, "h1", credential="", hostfile=None)
    return spawn.job_env(job, OWNER, task, {"XCE_LAUNCH_SOCKET": "/run/x"}, where, ids, None, 0)


def test_a_job_has_lsf_s_variables() -> None:
    job = api.Job(id=17, attempt=1, readable_id="17", spec=api.JobSpec(
        command=["sh", "-c", "echo hi"], queue="normal", slots=1, cwd="/data/run", project="chem",
        stdout_path="/data/out.%J", env={"MINE": "1"}))
    env = env_of(job)
    assert {k: env[k] for k in env if k.startswith("LSB_")} == {
        "LSB_JOBID": "17", "LSB_BATCH_JID": "17", "LSB_JOBINDEX": "0", "LSB_JOBNAME": "sh -c echo hi",
        "LSB_QUEUE": "normal", "LSB_SUBCWD": "/data/run", "LSB_PROJECT_NAME": "chem",
        "LSB_OUTPUTFILE": "/data/out.17", "LSB_HOSTS": "h1", "LSB_MCPU_HOSTS": "h1 1",
        "LSB_DJOB_NUMPROC": "1"}
    assert env["MINE"] == "1" and env["USER"] == "alice" and env["XCE_JOB_ID"] == "17"


def test_an_array_element_has_its_array_s_id_and_its_own_index() -> None:
    element = api.Job(id=40, attempt=1, readable_id="31[9]", array_id=31, array_index=9, spec=api.JobSpec(
        command=["true"], name="sweep[9]", queue="short", stderr_path="err.%J.%I"))
    env = env_of(element)
    assert (env["LSB_JOBID"], env["LSB_BATCH_JID"], env["LSB_JOBINDEX"]) == ("31", "31[9]", "9")
    assert (env["LSB_JOBNAME"], env["LSB_ERRORFILE"]) == ("sweep[9]", "err.31.9")
    assert env["LSB_PROJECT_NAME"] == "default"
    assert "LSB_OUTPUTFILE" not in env  # LSF sets it only for a file -o named
    assert env["LSB_SUBCWD"] == "/home/alice"  # no working directory given: the owner's home
    assert (env["XCE_ARRAY_ID"], env["XCE_ARRAY_INDEX"]) == ("31", "9")


def test_a_task_has_its_job_s_variables_and_the_submitter_s_subcwd_wins() -> None:
    job = api.Job(id=5, attempt=2, readable_id="5", spec=api.JobSpec(
        command=["mpirun", "a.out"], queue="normal", cwd="/scratch", env={"LSB_SUBCWD": "/home/alice/src"}))
    task = api.LaunchTask(task_id="t1", command=["a.out"], env={"OMPI_X": "1"})
    env = env_of(job, task)
    assert (env["LSB_JOBID"], env["LSB_QUEUE"]) == ("5", "normal")
    assert (env["OMPI_X"], env["XCE_TASK_ID"]) == ("1", "t1")
    assert env["LSB_SUBCWD"] == "/home/alice/src"


def test_the_job_cannot_rename_itself_in_lsf_s_variables() -> None:
    """The worker's answer wins over one in the job's own environment (what bjobs would say)."""
    job = api.Job(id=8, attempt=1, readable_id="8", spec=api.JobSpec(
        command=["true"], queue="normal", env={"LSB_JOBID": "999", "LSB_QUEUE": "vip"}))
    env = env_of(job)
    assert (env["LSB_JOBID"], env["LSB_QUEUE"]) == ("8", "normal")


def test_a_long_command_line_names_the_job_within_lsf_s_bound() -> None:
    """A 400 KB command line as one variable would be past the kernel's 128 KB: the job could not start."""
    command = ["sh", *["a" * 1000] * 400]
    job = api.Job(id=9, attempt=1, readable_id="9", spec=api.JobSpec(command=command))
    assert env_of(job)["LSB_JOBNAME"] == " ".join(command)[:4094]
