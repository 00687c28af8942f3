"""What starts a job's command or task: the shim's command line and the job's environment.

Theory of operation. Pure functions of the job, the owner's account and
this host; the file and process work (the host file, the spawn itself) is
the caller's (instances.py). The environment is built like `sbatch
--export`: a clean baseline for the owner (HOME, USER, LOGNAME, SHELL, a
default PATH), what was submitted, what every job here gets (how `xce
launch` reaches the worker), where the job runs (as LSF and PBS tell it),
and the ids (XCE_JOB_ID, XCE_JOB_ATTEMPT, XCE_JOB_READABLE_ID, XCE_SPOOL;
an array's element also XCE_ARRAY_ID and XCE_ARRAY_INDEX), and LSF's
variables of a batch job (`lsf_env`: LSB_JOBID, LSB_JOBINDEX, LSB_JOBNAME,
LSB_QUEUE, ...); nothing of the worker's own environment. It reaches the job through the
shim's stdin, read only after the shim's child has become the owner.
"""

from __future__ import annotations

import sys
from pathlib import Path

from worker.process_host import SHIM, Account
from xce import hostlist, patterns
from xce.rules import feasibility
from xce.v1 import api_pb2 as api

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
# LSF's bound on a job name, the command line's when none was given (a command line of 400 KB as one
# variable would be past the kernel's 128 KB for one, and the job could not start).
MAX_JOB_NAME = 4094
# bsub -I (cli/lsf/interactive.py): where its submitter waits, and whether the job gets a terminal.
INTERACTIVE, INTERACTIVE_PTY = "XCE_INTERACTIVE", "XCE_INTERACTIVE_PTY"
HOME_FALLBACK = "/tmp"  # where a job without a working directory runs if its owner's home is missing


def ids_env(job: api.Job, spool: Path, task: api.LaunchTask | None) -> dict[str, str]:
    """What names the instance; the shim's own environment too, so a restarted worker finds it."""
    ids = {"XCE_JOB_ID": str(job.id), "XCE_JOB_ATTEMPT": str(job.attempt), "XCE_SPOOL": str(spool)}
    if task is not None:  # its own, so a restarted worker never takes it for the job's command
        ids["XCE_TASK_ID"] = task.task_id
    return ids


def per_slot_hosts(job: api.Job, here: str) -> list[str]:
    """The job's hosts, one per slot, its first host first."""
    parts = feasibility.allocation_of(job) or [feasibility.Part(here, job.spec.slots, {})]
    return [part.host for part in parts for _ in range(part.slots)]


def hosts_env(job: api.Job, here: str, credential: str, hostfile: str | None) -> dict[str, str]:
    """Where the job runs, as LSF and PBS tell it: XCE_HOSTS/LSB_HOSTS (a host per slot),
    LSB_MCPU_HOSTS (host and slots), a host file (XCE_HOSTFILE, LSB_DJOB_HOSTFILE, a host per
    slot, like PBS_NODEFILE) if one was written, and the credential `xce launch` presents."""
    parts = feasibility.allocation_of(job) or [feasibility.Part(here, job.spec.slots, {})]
    per_slot = per_slot_hosts(job, here)
    env = {"XCE_HOSTS": " ".join(per_slot), "LSB_HOSTS": " ".join(per_slot),
           "LSB_MCPU_HOSTS": " ".join(f"{part.host} {part.slots}" for part in parts),
           "LSB_DJOB_NUMPROC": str(len(per_slot))}
    if credential:
        env["XCE_JOB_CREDENTIAL"] = credential
    if hostfile is not None:
        env["XCE_HOSTFILE"] = env["LSB_DJOB_HOSTFILE"] = hostfile
    return env


def job_env(job: api.Job, account: Account, task: api.LaunchTask | None, common: dict[str, str],
            where: dict[str, str], ids: dict[str, str], gpus: list[int] | None,
            host_gpus: int) -> dict[str, str]:
    """The whole environment of the job's command (or of a task: its launcher's on top)."""
    env = {"HOME": account.home, "USER": account.name, "LOGNAME": account.name, "SHELL": account.shell,
           "PATH": DEFAULT_PATH, "LSB_SUBCWD": job.spec.cwd or account.home, **job.spec.env,
           **(dict(task.env) if task is not None else {}), **common, **where, **ids,
           "XCE_JOB_READABLE_ID": job.readable_id, **lsf_env(job), **slurm_env(job, task)}
    if host_gpus:  # the indices it holds, no others (none for a job that reserved none)
        env["CUDA_VISIBLE_DEVICES"] = env["XCE_GPUS"] = ",".join(map(str, gpus or []))
    if job.array_id:  # an array's element
        env.update(XCE_ARRAY_ID=str(job.array_id), XCE_ARRAY_INDEX=str(job.array_index))
    return env


def lsf_env(job: api.Job) -> dict[str, str]:
    """LSF's variables of a batch job, as LSF 10.1 sets them: an array's element has its array's
    LSB_JOBID and its own index (LSB_JOBINDEX is 0 outside arrays), LSB_BATCH_JID names the element
    (17[3]); the job name is the command line when none was given (its first MAX_JOB_NAME
    characters); the output files as -o/-e named them (%J, %I filled in), only when named; the
    project `default` when none. (LSB_SUBCWD, where it was submitted, is the submitter's if it sent
    one, else the job's working directory; the hosts' variables are `hosts_env`'s.)"""
    spec = job.spec
    index = job.array_index if job.array_id else 0
    env = {"LSB_JOBID": str(job.array_id or job.id),
           "LSB_BATCH_JID": f"{job.array_id}[{index}]" if job.array_id else str(job.id),
           "LSB_JOBINDEX": str(index), "LSB_JOBNAME": spec.name or " ".join(spec.command)[:MAX_JOB_NAME],
           "LSB_QUEUE": spec.queue, "LSB_PROJECT_NAME": spec.project or "default"}
    if spec.stdout_path:
        env["LSB_OUTPUTFILE"] = output_path(spec.stdout_path, job)
    if spec.stderr_path:
        env["LSB_ERRORFILE"] = output_path(spec.stderr_path, job)
    return env


def slurm_env(job: api.Job, task: api.LaunchTask | None) -> dict[str, str]:
    """Slurm's variables of a batch job, for a job sbatch submitted (its SLURM_SUBMIT_DIR says so: a
    job of bsub's gets none, so that tools that look for Slurm do not take it for one): its id (an
    array's element has its own, and its array's in SLURM_ARRAY_JOB_ID), name, partition, account,
    its hosts in Slurm's compressed list, their count, its tasks and the CPUs here. A task of `xce
    launch` is task 0 on its host as far as these say (srun's own numbering is srun's)."""
    spec = job.spec
    if "SLURM_SUBMIT_DIR" not in spec.env:
        return {}
    parts = feasibility.allocation_of(job)
    first = job.host or (parts[0].host if parts else "")
    here = task.host if task is not None and task.host else first
    hosts = [part.host for part in parts] or [first]
    cpus_here = next((part.slots for part in parts if part.host == here), spec.slots)
    per_node = _counted([part.slots for part in parts] or [spec.slots])
    env = {"SLURM_JOB_ID": str(job.id), "SLURM_JOBID": str(job.id), "SLURM_JOB_NAME": slurm_name(job),
           "SLURM_JOB_PARTITION": spec.queue, "SLURM_JOB_ACCOUNT": spec.project,
           "SLURM_JOB_NODELIST": hostlist.compress(hosts), "SLURM_NODELIST": hostlist.compress(hosts),
           "SLURM_JOB_NUM_NODES": str(len(hosts)), "SLURM_NNODES": str(len(hosts)),
           "SLURM_CPUS_ON_NODE": str(cpus_here), "SLURM_JOB_CPUS_PER_NODE": per_node,
           "SLURM_NTASKS": spec.env.get("SLURM_NTASKS", str(spec.slots)),
           "SLURM_NPROCS": spec.env.get("SLURM_NTASKS", str(spec.slots)), "SLURM_CLUSTER_NAME": "xce"}
    if task is None:  # the batch script: task 0 on the first node (a task's ranks are srun's: not set)
        env.update(SLURM_PROCID="0", SLURM_LOCALID="0", SLURM_NODEID="0")
    if job.array_id:
        env.update(SLURM_ARRAY_JOB_ID=str(job.array_id), SLURM_ARRAY_TASK_ID=str(job.array_index))
    if task is not None:
        env["SLURM_STEP_ID"] = "0"
    return env


def slurm_name(job: api.Job) -> str:
    """The job's name as Slurm's: an array's element has its array's (XCE names it `name[3]`)."""
    return job.spec.name.removesuffix(f"[{job.array_index}]") if job.array_id else job.spec.name


def _counted(counts: list[int]) -> str:
    """Slurm's SLURM_JOB_CPUS_PER_NODE: runs of equal counts as `4(x3),2`."""
    runs: list[list[int]] = []
    for count in counts:
        if runs and runs[-1][0] == count:
            runs[-1][1] += 1
        else:
            runs.append([count, 1])
    return ",".join(f"{count}(x{times})" if times > 1 else str(count) for count, times in runs)


def shim_command(job: api.Job, account: Account, status_file: Path, task: api.LaunchTask | None,
                 outputs: tuple[str, str], as_root: bool) -> list[str]:
    """The shim's command line: it becomes the owner (`as_root`: the worker can switch), enters the
    working directory, opens the output files `outputs` (stdout, stderr), then runs the command."""
    cwd = working_dir(job, account, task)
    switch = ["--user", account.name] if as_root else []
    # -I: the interpreter that stays root reads no PYTHON* variable, no user site, not the cwd;
    # -S: no site at all (half of its start-up). The shim is run as a file (it needs only the
    # standard library's built-in modules), installed or not.
    command = list(task.command) if task is not None else list(job.spec.command)
    # A working directory the job named is its own: if the owner cannot enter it, the job fails
    # (xce/start_failures.py). The owner's home is not the job's choice: a user without one runs
    # in /tmp, and is told so, as LSF does.
    home = not job.spec.cwd and not (task is not None and task.cwd)
    fallback = ["--cwd-fallback", HOME_FALLBACK] if home and cwd != HOME_FALLBACK else []
    # The default output files are the worker's choice, in its spool: failing to open them is the host's.
    spooled = ",".join(fd for fd, path in (("1", job.spec.stdout_path), ("2", job.spec.stderr_path))
                       if not path)
    spool = ["--spool-outputs", spooled] if spooled else []
    # bsub -E and -Ep, and -I's terminal, are the job's (its first host's), never a task's.
    around = [] if task is not None else \
        [*(["--pre-exec", job.spec.pre_exec] if job.spec.pre_exec else []),
         *(["--post-exec", job.spec.post_exec] if job.spec.post_exec else []),
         *(["--interactive", "pty" if job.spec.env.get(INTERACTIVE_PTY) else "plain"]
           if job.spec.env.get(INTERACTIVE) else [])]
    # -oo, -eo, sbatch's truncation: the job's output is emptied when the job starts, never when one of
    # its tasks does (a task appends to what the job and its other tasks wrote).
    emptied = ",".join(fd for fd, given, path in (("1", job.spec.stdout_overwrite, job.spec.stdout_path),
                                                  ("2", job.spec.stderr_overwrite, job.spec.stderr_path))
                       if given and path) if task is None else ""
    around += ["--overwrite", emptied] if emptied else []
    return [sys.executable, "-I", "-S", SHIM, str(status_file), *switch, "--cwd", cwd, *fallback,
            "--stdout", outputs[0], "--stderr", outputs[1], *spool, *around, "--", *command]


def working_dir(job: api.Job, account: Account, task: api.LaunchTask | None = None) -> str:
    cwd = job.spec.cwd or account.home or "/"
    return (task.cwd or cwd) if task is not None else cwd


def output_path(path: str, job: api.Job) -> str:
    """bsub's -o/-e patterns: %J the job's id (an element's: its array's), %I the array index (0 for a
    job that is not an element), %% a percent sign. sbatch's (a job it submitted): %j and %J the job's
    own id (an element's too), %A its array's, %a its index, %x its name, %u its owner."""
    if "SLURM_SUBMIT_DIR" in job.spec.env:
        values = {"j": str(job.id), "J": str(job.id), "A": str(job.array_id or job.id),
                  "a": str(job.array_index) if job.array_id else "4294967294", "x": slurm_name(job),
                  "u": job.spec.user, "%": "%"}
    else:
        values = {"J": str(job.array_id or job.id), "I": str(job.array_index if job.array_id else 0),
                  "%": "%"}
    return patterns.fill(path, values)


def env_bytes(env: dict[str, str]) -> bytes:
    """The job's environment as the shim reads it: NAME=VALUE items, NUL-separated (a NUL inside a
    name or value cannot reach exec anyway; the controller refuses none, so it is dropped here)."""
    return b"\0".join(f"{k}={v}".replace("\0", "").encode() for k, v in env.items())
