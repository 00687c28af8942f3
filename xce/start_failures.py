"""A worker's refusal to start a job (a failed dispatch), and whose fault it is.

Theory of operation. A worker that cannot start a job reports a negative
code (api.proto: DispatchFailed); worker/shim.py and worker/executor.py set
them, the controller sorts them here, from entry format 19, into three kinds:

- the job's own (`JOB`): its command, its working directory, an output file
  its owner cannot open. Retrying on another host, or later, does not help
  (the owner's files are the same on every host of a cluster with shared
  file systems, and a job's own mistake is no host's). The job counts it:
  a missing or unexecutable command or working directory ends it at once,
  EXIT with a shell's code (127 not found, 126 not executable; 2 for a
  working directory, as LSF's LSB_EXIT_IF_CWD_NOTEXIST=Y); an output file
  is given MAX_TRIES attempts in all with a doubling backoff between them
  (a file server that blinks), then EXIT. The host is never cooled for it.
- its owner's on that host (`OWNER`): no account there, or not allowed there
  (a root job where allow_root_jobs is off, another user's job on a worker
  that is not root). The job is not placed on that host again while the host
  keeps its generation (a worker that joins anew, as it must after its
  configuration changed, is asked again); other hosts are tried at once.
  At most one refusal per job and host generation; the host is not cooled.
- the host's (`HOST`): draining, no free GPU index, the worker could not
  fork or died while starting it, and any code this module does not know
  (an older worker's -5 for what it could not tell apart). The job goes
  back to PEND as before, and the scheduler gives that host no dispatch for
  its refusal cool-down (scheduler/planner.py): a rate per host, whatever
  the number of jobs.

So every loop of dispatches is bounded: by MAX_TRIES per job, by the hosts'
generations per job, or by the cool-down per host. Pure: words and numbers.
"""

from __future__ import annotations

import enum

from xce.v1 import api_pb2 as api

COMMAND_NOT_FOUND, CWD_MISSING, UNKNOWN_USER, DRAINING, START_FAILED = -1, -2, -3, -4, -5
USER_NOT_ALLOWED = -6  # root without allow_root_jobs, or a user other than a non-root worker's
OUTPUT_FILE = -7  # the owner cannot open (create) its -o or -e file
NOT_EXECUTABLE = -8  # the command exists but cannot be executed (permission, format)
PRE_EXEC_FAILED = -9  # its pre-exec (bsub -E) failed: the job pends again, as LSF requeues it (format 21)
INTERACTIVE_LOST = -10  # an interactive job (bsub -I) could not reach its submitter: it ends (format 22)
CODES = frozenset({COMMAND_NOT_FOUND, CWD_MISSING, UNKNOWN_USER, DRAINING, START_FAILED, USER_NOT_ALLOWED,
                   OUTPUT_FILE, NOT_EXECUTABLE, PRE_EXEC_FAILED, INTERACTIVE_LOST})
# Codes an older entry format did not know (the host's, then): the format that knows each.
KNOWN_FROM = {PRE_EXEC_FAILED: 21, INTERACTIVE_LOST: 22}

MAX_TRIES = 4  # attempts in all of a job whose output file was refused: then EXIT
FIRST_BACKOFF_MS = 1_000  # after the first such refusal; doubled after each (1, 2, 4 s)
MAX_ERROR = 240  # characters of the worker's words kept on the job


class Kind(enum.Enum):
    JOB = "job"
    OWNER = "owner"
    HOST = "host"


# code -> (exit code, exit reason) of a job that ends at its first such refusal
ENDS_AT_ONCE = {COMMAND_NOT_FOUND: (127, "COMMAND_NOT_FOUND"), NOT_EXECUTABLE: (126, "NOT_EXECUTABLE"),
                CWD_MISSING: (2, "CWD_MISSING"), INTERACTIVE_LOST: (1, "INTERACTIVE_LOST")}
RETRIED = {OUTPUT_FILE: (1, "OUTPUT_FILE"), PRE_EXEC_FAILED: (1, "PRE_EXEC_FAILED")}  # ... tries ran out


def kind(code: int, entry_format: int | None = None) -> Kind:
    """Whose fault a refusal is; a code the entry format did not know yet is the host's, as any
    unknown code (None: the newest format)."""
    if entry_format is not None and entry_format < KNOWN_FROM.get(code, 0):
        return Kind.HOST
    if code in ENDS_AT_ONCE or code in RETRIED:
        return Kind.JOB
    if code in (UNKNOWN_USER, USER_NOT_ALLOWED):
        return Kind.OWNER
    return Kind.HOST


def backoff_ms(failures: int) -> int:
    """The wait after the `failures`-th refusal of the job's own (1, 2, 4 s ...)."""
    return FIRST_BACKOFF_MS << max(0, min(failures - 1, 16))


def error_words(reason: str, host: str) -> str:
    return f"{reason[:MAX_ERROR]} (on {host[:64]})"


def retry_words(job: api.Job) -> str:
    """A job waiting out its backoff, as apply and the scheduler both say it (the same words: the
    scheduler then proposes no change of reason)."""
    return (f"its start failed {job.start_failures} of {MAX_TRIES} times, last: {job.start_error}; "
            f"next try {backoff_ms(job.start_failures) // 1000} s after that")


def owner_words(host: str, reason: str) -> str:
    return f"host {host[:64]} refused its owner: {reason[:MAX_ERROR]}; not sent there again until it " \
           "joins anew"
