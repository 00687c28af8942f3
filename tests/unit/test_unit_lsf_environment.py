"""bsub's job environment (cli/lsf/environment.py): the submitter's copied by default, `-env` as LSF
10.1 reads it, what names a job or proves its submitter never copied, and bounded sizes."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli.lsf.environment import MAX_ENV_BYTES, NEVER_COPIED, EnvError, job_environment
from worker import spawn
from worker.process_host import Account
from xce.v1 import api_pb2 as api

SUBMITTER = {"PATH": "/opt/tools/bin:/usr/bin", "HOME": "/home/alice", "OMP_NUM_THREADS": "4",
             "MODULEPATH": "/etc/modules", "XCE_TOKEN": "secret", "LSB_JOBID": "12",
             "XCE_JOB_CREDENTIAL": "cafe", "XCE_ARRAY_INDEX": "3"}


def test_by_default_every_variable_but_a_job_s_names_and_secrets_is_copied() -> None:
    assert job_environment(None, SUBMITTER) == {"PATH": "/opt/tools/bin:/usr/bin", "HOME": "/home/alice",
                                                "OMP_NUM_THREADS": "4", "MODULEPATH": "/etc/modules"}
    assert job_environment("all", SUBMITTER) == job_environment(None, SUBMITTER)


def test_none_copies_nothing_and_takes_nothing_else() -> None:
    assert job_environment("none", SUBMITTER) == {}
    assert job_environment(" NONE ", SUBMITTER) == {}
    with pytest.raises(EnvError, match="none takes no other"):
        job_environment("none, A=1", SUBMITTER)


def test_all_with_exclusions_and_values() -> None:
    got = job_environment("all, ~HOME, ~MODULEPATH, OMP_NUM_THREADS=8, NEW='a,b'", SUBMITTER)
    assert got == {"PATH": "/opt/tools/bin:/usr/bin", "OMP_NUM_THREADS": "8", "NEW": "a,b"}


def test_a_list_copies_only_the_variables_it_names() -> None:
    got = job_environment("PATH, OMP_NUM_THREADS=2, UNSET_HERE, XCE_TOKEN", SUBMITTER)
    assert got == {"PATH": "/opt/tools/bin:/usr/bin", "OMP_NUM_THREADS": "2"}  # never the token


@pytest.mark.parametrize("spec", ["all, ~", "PATH, ~HOME", "all,, PATH", "A B=1", "'unclosed", "=x"])
def test_a_bad_env_is_refused(spec: str) -> None:
    with pytest.raises(EnvError):
        job_environment(spec, SUBMITTER)


def test_sizes_are_bounded_and_non_text_is_left_out() -> None:
    with pytest.raises(EnvError, match="more than the 131071"):
        job_environment(None, {"BIG": "x" * 131_071})
    with pytest.raises(EnvError, match=f"more than the {MAX_ENV_BYTES}"):
        job_environment(None, {f"V{i}": "x" * 100_000 for i in range(3)})
    assert job_environment(None, {"BAD": "caf\udce9", "OK": "1"}) == {"OK": "1"}  # os.environ's non-UTF-8
    with pytest.raises(EnvError, match="not text"):
        job_environment("all, X='a\0b'", {})


def test_every_variable_the_worker_sets_for_some_jobs_only_is_never_copied() -> None:
    """A job submitting a job has its own job's variables: the new job must not inherit any that the
    worker sets only for some jobs (an element's index, a host file, GPUs) or that prove the job."""
    owner = Account("alice", 1000, 1000, "/home/alice", "/bin/bash")
    job = api.Job(id=40, attempt=1, readable_id="31[9]", array_id=31, array_index=9, spec=api.JobSpec(
        command=["true"], name="sweep[9]", queue="short", stdout_path="o", stderr_path="e", slots=1))
    task = api.LaunchTask(task_id="t1", command=["a.out"])
    ids = spawn.ids_env(job, spool=Path("/spool"), task=task)
    where = spawn.hosts_env(job, "h1", credential="c", hostfile="/spool/hosts/40.1")
    env = spawn.job_env(job, owner, task, {"XCE_LAUNCH_SOCKET": "/run/x", "LSF_BINDIR": "/b"}, where, ids,
                        [0], 1)
    baseline = {"HOME", "USER", "LOGNAME", "SHELL", "PATH", "CUDA_VISIBLE_DEVICES"}
    assert set(env) - baseline <= NEVER_COPIED, set(env) - baseline - NEVER_COPIED
