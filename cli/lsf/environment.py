"""The job's environment as bsub makes it: the submitter's, copied by default, or as `-env` says.

LSF 10.1's `-env`: `none` (no variable of the submitter's), `all` (every
one, the default), `all, ~VAR, VAR=value` (every one but VAR, with others
set), or `VAR, VAR=value, ...` (only those: VAR's value is the
submitter's). A value holding a comma is quoted: `-env "A='x,y'"`.

Some variables are never copied: what names a job (LSF's and XCE's, which
a job that submits a job has: the new job gets its own, and some are set
only for some jobs, as an array element's index) and what proves the
submitter (a token, a job's credential: they would be written into the
replicated state). Copying is bounded: a variable as long as exec takes one,
the whole environment MAX_ENV_BYTES; a variable that is not UTF-8 text is
left out of a copy.
"""

from __future__ import annotations

from collections.abc import Mapping

MAX_ENV_BYTES = 256 * 1024
MAX_VARIABLE_BYTES = 131071  # exec's bound on one NAME=VALUE (controller/fsm/validation.py: MAX_ARG_BYTES)
# What the worker sets for a job (worker/spawn.py), only for some jobs or not at all for others, and
# secrets. A test holds this against what the worker sets.
NEVER_COPIED = frozenset({
    "LSB_JOBID", "LSB_BATCH_JID", "LSB_JOBINDEX", "LSB_JOBINDEX_END", "LSB_JOBNAME", "LSB_QUEUE",
    "LSB_PROJECT_NAME", "LSB_OUTPUTFILE", "LSB_ERRORFILE", "LSB_SUBCWD", "LSB_SUB_HOST", "LSB_HOSTS",
    "LSB_MCPU_HOSTS", "LSB_DJOB_NUMPROC", "LSB_DJOB_HOSTFILE", "LSF_BINDIR",
    "XCE_JOB_ID", "XCE_JOB_ATTEMPT", "XCE_JOB_READABLE_ID", "XCE_JOB_CREDENTIAL", "XCE_ARRAY_ID",
    "XCE_ARRAY_INDEX", "XCE_HOSTS", "XCE_HOSTFILE", "XCE_SPOOL", "XCE_TASK_ID", "XCE_GPUS",
    "XCE_LAUNCH_SOCKET", "XCE_TOKEN", "XCE_MUNGE", "XCE_INTERACTIVE", "XCE_INTERACTIVE_KEY",
    "XCE_INTERACTIVE_PTY",
    # Slurm's, of a job sbatch submitted (worker/spawn.py: slurm_env; SLURM_SUBMIT_DIR marks such a job)
    "SLURM_JOB_ID", "SLURM_JOBID", "SLURM_JOB_NAME", "SLURM_JOB_PARTITION", "SLURM_JOB_ACCOUNT",
    "SLURM_JOB_NODELIST", "SLURM_NODELIST", "SLURM_JOB_NUM_NODES", "SLURM_NNODES", "SLURM_CPUS_ON_NODE",
    "SLURM_JOB_CPUS_PER_NODE", "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_PROCID", "SLURM_LOCALID",
    "SLURM_NODEID", "SLURM_CLUSTER_NAME", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_STEP_ID",
    "SLURM_SUBMIT_DIR", "SLURM_SUBMIT_HOST", "SLURM_CPUS_PER_TASK",
})


class EnvError(ValueError):
    """A bad -env, or an environment that cannot be carried."""


def _items(text: str) -> list[str]:
    """The comma-separated items of -env; commas inside quotes belong to a value."""
    items, word, quote = [], [], ""
    for char in text:
        if quote:
            if char == quote:
                quote = ""
            else:
                word.append(char)
        elif char in "'\"":
            quote = char
        elif char == ",":
            items.append("".join(word).strip())
            word = []
        else:
            word.append(char)
    if quote:
        raise EnvError(f"-env: unmatched {quote} in {text[:80]!r}")
    items.append("".join(word).strip())
    return items


def _text(value: str) -> bool:
    """Whether the wire can carry it: a variable that is not UTF-8 (os.environ holds its bytes as
    surrogates) is not copied."""
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def _name(text: str) -> str:
    if not text or "=" in text or "\0" in text or text.startswith("~") or any(c.isspace() for c in text):
        raise EnvError(f"-env: {text[:80]!r} is not a variable name")
    return text


def job_environment(spec: str | None, submitter: Mapping[str, str]) -> dict[str, str]:
    """What the job gets of the submitter's environment under `-env spec` (None: as LSF, all)."""
    copied = {k: v for k, v in submitter.items() if k not in NEVER_COPIED and _text(k) and _text(v)}
    if spec is None:
        return _bounded(copied)
    items = _items(spec)
    head = items[0].lower()
    if head == "none" and len(items) == 1:
        return {}
    if head == "none":
        raise EnvError("-env: none takes no other variable")
    chosen: dict[str, str] = {}
    rest = items
    if head == "all":
        chosen, rest = copied, items[1:]
    for item in rest:
        if not item:
            raise EnvError(f"-env: an empty item in {spec[:80]!r}")
        if item.startswith("~"):
            if head != "all":
                raise EnvError(f"-env: {item[:80]} (leaving a variable out) is only with all")
            chosen.pop(_name(item[1:].strip()), None)
        elif "=" in item:
            name, _, value = item.partition("=")
            chosen[_name(name.strip())] = value
        elif _name(item) in copied:
            chosen[item] = copied[item]
    return _bounded(chosen)


def _bounded(env: dict[str, str]) -> dict[str, str]:
    total = 0
    for name, value in env.items():
        if not _text(name) or not _text(value) or "\0" in value:
            raise EnvError(f"the variable {name[:80]!r} is not text (UTF-8 without NUL)")
        size = len(name.encode()) + 1 + len(value.encode())
        if size > MAX_VARIABLE_BYTES:
            raise EnvError(f"the variable {name[:80]} is {size} bytes, more than the {MAX_VARIABLE_BYTES} "
                           "a job can be given (leave it out: -env \"all, ~NAME\")")
        total += size + 1
    if total > MAX_ENV_BYTES:
        raise EnvError(f"the environment is {total} bytes, more than the {MAX_ENV_BYTES} a job may carry "
                       "(leave variables out with -env \"all, ~NAME\", or pass fewer with "
                       "-env \"NAME, ...\")")
    return env
