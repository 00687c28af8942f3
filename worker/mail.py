"""Job mail (LSF's bsub -B, -N, -u): a message when a job starts, and its job report when it ends.

The worker that runs the job's command sends them, through the site's
sendmail (`mail_command` in the worker's file; Debian's exim4 and postfix
both give /usr/sbin/sendmail), to the job's `-u` address or its owner. The
address was checked at submit (controller/fsm/validation.py: nothing
sendmail could take for an option) and goes as an argument after the
command's own; the message is on its standard input. Sending never holds
the worker up: a thread per message, bounded in time, and a failure is a
line in the worker's log, never the job's.

`start_message` and `end_message` are pure (the job, its report, the host
and the time in): the text, as LSF's mail has it.
"""

from __future__ import annotations

import logging
import shlex
import subprocess
import threading
import time
from collections.abc import Sequence

from xce import mail_address
from xce.v1 import api_pb2 as api

log = logging.getLogger("xce.worker.mail")
SEND_TIMEOUT_S = 60.0
DEFAULT_COMMAND = ("/usr/sbin/sendmail", "-oi")
RULE = "-" * 60


def recipient(job: api.Job) -> str:
    """Its -u address or its owner; "" if neither may be given to sendmail (never sent then)."""
    to = job.spec.mail_user or job.spec.user
    return to if mail_address.valid(to) else ""


def _name(job: api.Job) -> str:
    """The job's name for a header: its control characters (a newline would start a header of the
    job's own) made spaces."""
    name = job.spec.name or " ".join(job.spec.command)
    return "".join(c if c.isprintable() else " " for c in name[:200])


def _when(ms: int) -> str:
    return time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(ms / 1000)) if ms else "-"


def _job_ref(job: api.Job) -> str:
    return f"{job.array_id}[{job.array_index}]" if job.array_id else str(job.id)


def _head(job: api.Job, subject: str) -> list[str]:
    return [f"To: {recipient(job)}", f"Subject: {subject}", f"X-XCE-Job: {job.id}",
            "Content-Type: text/plain; charset=utf-8", ""]


def start_message(job: api.Job, host: str, started_ms: int) -> bytes:
    """-B: the job started (LSF's "Job ... is started on host")."""
    lines = _head(job, f"Job {_job_ref(job)}: <{_name(job)}> started on <{host}>")
    lines += [f"Job <{_name(job)}> was submitted by user <{job.spec.user}>, in queue <{job.spec.queue}>.",
              f"It started on host <{host}> at {_when(started_ms)}.", ""]
    return "\n".join(lines).encode()


def end_message(job: api.Job, host: str, report: api.JobReport, started_ms: int) -> bytes:
    """-N: LSF's job report: where and how it ran, how it ended, what it used."""
    end = report.finished
    done = end.exit_code == 0 and not end.term_signal and not end.status_unknown
    lines = _head(job, f"Job {_job_ref(job)}: <{_name(job)}> {'Done' if done else 'Exited'}")
    spec = job.spec
    cwd = spec.cwd or spec.env.get("LSB_SUBCWD", "") or "-"
    lines += [f"Job <{_name(job)}> was submitted from host <{spec.env.get('LSB_SUB_HOST', '-')}> by user "
              f"<{spec.user}> at {_when(job.submit_time_ms)}.",
              f"Job was executed on host(s) <{host}>, in queue <{spec.queue}>, as user <{spec.user}>.",
              f"<{cwd}> was used as the working directory.",
              f"Started at {_when(started_ms)}, Results reported at {_when(end.time_ms)}.", "",
              "Your job looked like:", "", RULE, "# LSBATCH: User input", *_input(job), RULE, ""]
    if report.HasField("dispatch_failed"):
        lines.append(f"Could not start: {report.dispatch_failed.reason}")
    elif done:
        lines.append("Successfully completed.")
    elif end.term_signal:
        reason = f" ({end.exit_reason})" if end.exit_reason else ""
        lines.append(f"Exited by signal {end.term_signal}.{reason}")
    elif end.status_unknown:
        lines.append("Exited; its status is not known (it ended while no worker watched).")
    else:
        lines.append(f"Exited with exit code {end.exit_code}.")
    usage, pad = end.usage, " " * 35
    lines += ["", "Resource usage summary:", "",
              f"    CPU time :{pad}{usage.user_cpu_s + usage.system_cpu_s:.2f} sec.",
              f"    Max Memory :{pad[2:]}{usage.max_rss_kb // 1024} MB",
              f"    Run time :{pad}{usage.wall_s:.0f} sec.", ""]
    return "\n".join(lines).encode()


def _input(job: api.Job) -> list[str]:
    """What the user gave: a command line (bsub's, run by sh -c) or a job script as it was, else the
    command's words."""
    command = list(job.spec.command)
    given = next((word for word in command if "\n" in word), None)
    if command[:2] == ["/bin/sh", "-c"] and len(command) == 3:
        given = command[2]
    return given.splitlines() if given is not None else [shlex.join(command)]


def send(command: Sequence[str], to: str, message: bytes) -> threading.Thread:
    """The message to `to` through the sendmail command, on a thread of its own (returned, started)."""
    def run() -> None:
        try:
            done = subprocess.run([*command, to], input=message, capture_output=True, timeout=SEND_TIMEOUT_S,
                                  check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            log.warning("job mail to %s not sent: %s", to, exc)
            return
        if done.returncode != 0:
            log.warning("job mail to %s not sent: %s exited %d: %s", to, command[0], done.returncode,
                        done.stderr.decode(errors="replace").strip()[:300])

    thread = threading.Thread(target=run, name="job-mail", daemon=True)
    thread.start()
    return thread
