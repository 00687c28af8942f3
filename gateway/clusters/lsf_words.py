"""LSF 10.1's words for a job (`bjobs -json -o`) in XCE's: the one table of the LSF backend.

XCE's states are LSF's, so a state maps to itself (WAIT, a job in a chunk, is pending; ZOMBI, a
job killed whose host does not answer, is UNKWN). An exit reason TERM_X is XCE's X (TERM_MEMLIMIT:
MEMLIMIT), but for the two XCE names otherwise. A pending reason is kept in LSF's words; its code
is unspecified (LSF's numbers are not XCE's). Times are LSF's table times (`Dec  6 05:28`, the
year only when it is not this one): minutes, in the gateway's time zone. Pure.
"""

from __future__ import annotations

import re
import time

from xce.v1 import api_pb2 as api

STATES: dict[str, api.JobState] = {
    "PEND": api.PEND, "WAIT": api.PEND, "PSUSP": api.PSUSP, "RUN": api.RUN, "USUSP": api.USUSP,
    "SSUSP": api.SSUSP, "DONE": api.DONE, "EXIT": api.EXIT, "UNKWN": api.UNKWN, "ZOMBI": api.UNKWN,
}
EXIT_REASONS = {"TERM_CWD_NOTEXIST": "CWD_MISSING", "TERM_PRE_EXEC_FAIL": "PRE_EXEC_FAILED"}
FIELDS = ("jobid jobindex stat user queue job_name proj_name command exec_host nreq_slot submit_time "
          "start_time finish_time exit_code exit_reason pend_reason exec_cwd output_file error_file memlimit "
          "runtimelimit")
_MONTHS = {m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct",
                                        "Nov", "Dec"), start=1)}
_TIME = re.compile(r"^([A-Z][a-z]{2})\s+(\d{1,2})\s+(\d{1,2}):(\d{2})(?::(\d{2}))?"
                   r"(?:\s+(\d{4}))?(?:\s+[A-Z])?$")


def table_time_ms(text: str, now_s: float) -> int:
    """`Dec  6 05:28` (this year, or last year's if that would be ahead of now), `Dec  6 05:28 2025`;
    '-' or nothing: 0."""
    found = _TIME.match(text.strip())
    if found is None or found.group(1) not in _MONTHS:
        return 0
    month = _MONTHS[found.group(1)]
    day, hour, minute, second = (int(found.group(i) or 0) for i in (2, 3, 4, 5))
    year = int(found.group(6)) if found.group(6) else time.localtime(now_s).tm_year
    stamp = time.mktime((year, month, day, hour, minute, second, 0, 0, -1))
    if not found.group(6) and stamp > now_s + 86_400:
        stamp = time.mktime((year - 1, month, day, hour, minute, second, 0, 0, -1))
    return int(stamp * 1000)


def _number(text: str) -> float:
    found = re.match(r"^\s*(\d+(?:\.\d+)?)", text or "")
    return float(found.group(1)) if found else 0.0


def exit_reason(text: str) -> str:
    term = (text or "").split(":", 1)[0].strip()
    if not term.startswith("TERM_"):
        return ""
    return EXIT_REASONS.get(term, term[len("TERM_"):])


def job_of(record: dict[str, str], cluster: str, now_s: float) -> tuple[api.Job, str]:
    """An api.Job from one bjobs -json record (the FIELDS); and the job's LSF id (`12`, `12[3]`)."""
    stat = record.get("STAT", "")
    job_id = int(record.get("JOBID") or 0)
    index = int(_number(record.get("JOBINDEX", "0")))
    native_id = f"{job_id}[{index}]" if index else str(job_id)
    spec = api.JobSpec(name=_field(record, "JOB_NAME"), user=_field(record, "USER"),
                       queue=_field(record, "QUEUE"), project=_field(record, "PROJ_NAME"),
                       slots=int(_number(record.get("NREQ_SLOT", "1"))) or 1,
                       cwd=_field(record, "EXEC_CWD"), stdout_path=_field(record, "OUTPUT_FILE"),
                       stderr_path=_field(record, "ERROR_FILE"))
    command = _field(record, "COMMAND")
    if command:
        spec.command.extend(["/bin/sh", "-c", command])
    limit_min = _number(record.get("RUNTIMELIMIT", ""))
    spec.run_limit_s = int(limit_min * 60)
    memlimit = record.get("MEMLIMIT", "")
    spec.mem_limit_mb = int(_number(memlimit) * (1024 if " G" in memlimit else 1))
    job = api.Job(id=job_id, readable_id=f"{cluster}:{native_id}", spec=spec,
                  state=STATES.get(stat, api.UNKWN),
                  submit_time_ms=table_time_ms(record.get("SUBMIT_TIME", ""), now_s),
                  start_time_ms=table_time_ms(record.get("START_TIME", ""), now_s),
                  end_time_ms=table_time_ms(record.get("FINISH_TIME", ""), now_s),
                  exit_reason=exit_reason(record.get("EXIT_REASON", "")))
    if index:
        job.array_id, job.array_index = job_id, index
    hosts = [h.rpartition("*")[2] for h in _field(record, "EXEC_HOST").split(":") if h]
    job.host = hosts[0] if hosts else ""
    if job.state in (api.PEND, api.PSUSP):
        job.pending_reason = _field(record, "PEND_REASON") or ("held" if job.state == api.PSUSP else "")
        if job.state == api.PSUSP:
            job.pending_code = api.PEND_JOB_HELD
    code = int(_number(record.get("EXIT_CODE", ""))) if job.state == api.EXIT else 0
    if code > 128 and job.exit_reason:  # LSF's 128 + the signal of a job it killed
        job.term_signal = code - 128
    else:
        job.exit_code = code
    return job, native_id


def _field(record: dict[str, str], name: str) -> str:
    value = str(record.get(name, "") or "")
    return "" if value == "-" else value
