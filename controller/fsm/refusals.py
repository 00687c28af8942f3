"""A failed dispatch (a worker's refusal to start the job), applied by whose fault it is.

Before entry format 19 (REFUSALS_FORMAT) every refusal sent the job back to PEND at
the next attempt with `PEND_DISPATCH_REFUSED` and the refusing host, which
the scheduler cools down for everyone (scheduler/planner.py). A job its
owner's own files made impossible (an output file or a working directory it
cannot open, a command that does not exist) was then dispatched, refused and
requeued about once a second forever, each time a Raft write, and its
refusals kept cooling the hosts for every other user's jobs.

From format 19 the code says whose fault it is (xce/start_failures.py):
- the job's: the job ends EXIT with a shell's exit code and the worker's
  words (`start_error`), at once for its command or working directory; an
  output file is tried MAX_TRIES times in all, the job pending in between
  with `PEND_START_RETRY` and no dispatch before `not_before_ms` (this
  refusal's stamp plus a doubling backoff: the leader's clock, carried in the
  entry, never read here);
- its owner's on that host: the job pends with `PEND_OWNER_REFUSED` and
  remembers the host and its generation (`refused_owner`), where the
  scheduler and the barrier no longer place it until the host joins anew;
- the host's: as before (the cool-down).
Only the last sets `refused_host`, so only the host's refusals cool a host.
"""

from __future__ import annotations

from controller.fsm.applier import Applier
from controller.fsm.records import next_attempt
from controller.fsm.versions import REFUSALS_FORMAT, START_FORMAT
from xce import start_failures
from xce.start_failures import Kind
from xce.v1 import api_pb2 as api

# What refused starts leave on a job: cleared with its instance's fields when it is requeued (a fresh
# try: a user's requeue of an ended job, a lost host's rerunnable job).
START_FIELDS = ("start_failures", "start_error", "not_before_ms", "refused_owner")


def refused(applier: Applier, job: api.Job, host: str, generation: int, failed: api.DispatchFailed) -> None:
    """The job's attempt was refused by `host` (at `generation`); what it held is given back already."""
    entry_format = applier.entry.format
    kind = start_failures.kind(failed.code, entry_format) if entry_format >= REFUSALS_FORMAT else Kind.HOST
    if kind is Kind.HOST:  # (every refusal, before format 19)
        words = f"dispatch to {host} failed: {failed.reason[:200]}"
        _pend_again(applier, job, words, api.PEND_DISPATCH_REFUSED)
        job.refused_host = host
    elif kind is Kind.OWNER:
        job.refused_owner[host] = generation
        _pend_again(applier, job, start_failures.owner_words(host, failed.reason), api.PEND_OWNER_REFUSED)
    elif failed.code in start_failures.ENDS_AT_ONCE:
        _end(applier, job, host, failed, *start_failures.ENDS_AT_ONCE[failed.code])
    else:
        job.start_failures += 1
        if job.start_failures >= start_failures.MAX_TRIES:
            _end(applier, job, host, failed, *start_failures.RETRIED[failed.code])
            return
        job.start_error = start_failures.error_words(failed.reason, host)
        job.not_before_ms = applier.stamp_ms + start_failures.backoff_ms(job.start_failures)
        _pend_again(applier, job, start_failures.retry_words(job), api.PEND_START_RETRY)


def _pend_again(applier: Applier, job: api.Job, words: str, code: api.PendingReason) -> None:
    job.state = api.PEND
    job.attempt = next_attempt(job)
    job.pending_reason = words
    job.pending_code = code
    job.ClearField("refused_host")
    job.host = ""
    job.ClearField("allocation")
    job.pid = 0
    if applier.entry.format >= START_FORMAT:  # the dispatch's: the next attempt has not started
        job.start_time_ms = 0


def _end(applier: Applier, job: api.Job, host: str, failed: api.DispatchFailed, exit_code: int,
         reason: str) -> None:
    """EXIT, as a shell that could not run the command ends; the worker's words kept on the job."""
    job.state = api.EXIT
    job.exit_code = exit_code
    job.exit_reason = reason
    job.start_error = start_failures.error_words(failed.reason, host)
    job.end_time_ms = applier.stamp_ms
    job.pending_reason = ""
    job.ClearField("pending_code")
