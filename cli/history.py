"""`xce history` (like bhist / sacct), `xce acct` (like bacct) and `xce audit`: finished jobs, usage
totals, and the audit trail of the cluster's writes (who, with which key, how it came, what).

Times are given as an ISO date or date-time (UTC unless it names a zone,
e.g. 2026-11-30T14:00 or 2026-11-30T14:00+01:00) or as an age: 30m, 12h,
7d (that long ago).
"""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Callable

from cli.output import as_dict, emit
from cli.parser import STALE_HELP
from client.channel import Client
from xce.v1 import api_pb2 as api

_AGE = re.compile(r"^(\d+)([smhd])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
DEFAULT_LIMIT = 1000


def when_ms(text: str, now_s: Callable[[], float] = time.time) -> int:
    """Milliseconds since the epoch for an ISO time or an age; ValueError saying what is accepted."""
    text = text.strip()
    age = _AGE.match(text)
    if age:
        return int((now_s() - int(age.group(1)) * _UNIT_S[age.group(2)]) * 1000)
    try:
        import datetime  # only for a --since date

        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"not a time: {text!r} (an ISO date or date-time, or an age such as 30m, 12h, 7d)"
                         ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return int(moment.timestamp() * 1000)


def _time_arg(text: str) -> int:
    try:
        return when_ms(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def declare_history(p: argparse.ArgumentParser) -> None:
    p.add_argument("-u", "--user", default="", help="only this user's jobs")
    p.add_argument("-q", "--queue", default="", help="only this queue")
    p.add_argument("--state", choices=("DONE", "EXIT", "done", "exit"), help="only DONE or only EXIT")
    p.add_argument("--since", type=_time_arg, default=0, help="finished at or after (ISO time or age: 7d)")
    p.add_argument("--until", type=_time_arg, default=0, help="finished before (ISO time or age)")
    p.add_argument("--exit-code", type=int, help="only jobs that exited with this code")
    p.add_argument("-n", "--limit", type=int, default=DEFAULT_LIMIT,
                   help=f"at most this many jobs (default {DEFAULT_LIMIT}; 0: all)")
    p.add_argument("--json", action="store_true", help="print the answer as JSON")
    p.add_argument("--stale", action="store_true", help=STALE_HELP)


def run_history(client: Client, args: argparse.Namespace) -> int:
    finished = history(client, args)
    return emit(args, lambda: {"jobs": [as_dict(j) for j in finished]}, lambda: print_history(finished))


def declare_acct(p: argparse.ArgumentParser) -> None:
    p.add_argument("-u", "--user", default="", help="only this user's jobs")
    p.add_argument("-q", "--queue", default="", help="only this queue")
    p.add_argument("--since", type=_time_arg, default=0, help="from this hour (ISO time or age: 7d)")
    p.add_argument("--until", type=_time_arg, default=0, help="to the end of this hour (ISO time or age)")
    p.add_argument("--json", action="store_true", help="print the answer as JSON")
    p.add_argument("--stale", action="store_true", help=STALE_HELP)


def run_acct(client: Client, args: argparse.Namespace) -> int:
    totals = accounting(client, args)
    return emit(args, lambda: as_dict(totals), lambda: print_accounting(totals))


def declare_audit(p: argparse.ArgumentParser) -> None:
    p.add_argument("-u", "--user", default="", help="only this principal's rows (without audit.read: yours)")
    p.add_argument("--since", type=_time_arg, default=0, help="at or after (ISO time or age: 7d)")
    p.add_argument("-n", "--limit", type=int, default=DEFAULT_LIMIT,
                   help=f"at most this many rows (default {DEFAULT_LIMIT}; 0: all)")
    p.add_argument("--json", action="store_true", help="print the answer as JSON")


def run_audit(client: Client, args: argparse.Namespace) -> int:
    rows = audit(client, args)
    return emit(args, lambda: {"records": [as_dict(r) for r in rows]}, lambda: print_audit(rows))


def audit(client: Client, args: argparse.Namespace) -> list[api.AuditRecord]:
    if args.limit < 0:
        raise SystemExit("xce audit: --limit must not be negative")
    return client.list_audit(api.ListAuditRequest(principal=args.user, since_ms=args.since), args.limit)


def print_audit(rows: list[api.AuditRecord]) -> None:
    """[time] [principal] [via] [key] [action] [dry_run|confirmed|refused], how it ended, [params]. A
    row without a key was made with a MUNGE credential (or before rows named keys)."""
    print(f"{'TIME (UTC)':<20}{'PRINCIPAL':<14}{'VIA':<6}{'KEY':<18}{'KEY DESCRIPTION':<22}{'ACTION':<15}"
          f"{'OUTCOME':<10}{'RESULT':<24}PARAMS")
    for row in rows:
        outcome = api.AuditOutcome.Name(row.outcome).lower()
        print(f"{_stamp(row.time_ms):<20}{row.principal[:13]:<14}{row.via[:5]:<6}{row.key_id or '-':<18}"
              f"{_cut(row.key_description, 21) or '-':<22}{row.action[:14]:<15}{outcome:<10}"
              f"{row.result[:23]:<24}{row.params[:200]}")


def _cut(text: str, width: int) -> str:
    text = " ".join(text.split())  # a description may hold line breaks: one line per row
    return text if len(text) <= width else text[:width - 1] + "~"


def history_request(args: argparse.Namespace) -> api.HistoryRequest:
    request = api.HistoryRequest(user=args.user, queue=args.queue, since_ms=args.since, until_ms=args.until,
                                 stale=args.stale)
    if args.state:
        request.states.append(api.JobState.Value(args.state.upper()))  # type: ignore[arg-type]
    if args.exit_code is not None:
        request.exit_code = args.exit_code
    return request


def history(client: Client, args: argparse.Namespace) -> list[api.Job]:
    if args.limit < 0:
        raise SystemExit("xce history: --limit must not be negative")
    return client.history(history_request(args), args.limit)


def accounting(client: Client, args: argparse.Namespace) -> api.AccountingResponse:
    return client.accounting(api.AccountingRequest(user=args.user, queue=args.queue, since_ms=args.since,
                                                   until_ms=args.until, stale=args.stale))


def _stamp(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000)) if ms else "-"


def print_history(jobs: list[api.Job]) -> None:
    print(f"{'JOBID':>8}  {'STAT':<5}{'USER':<12}{'QUEUE':<12}{'EXIT':>5}  {'ENDED (UTC)':<20}NAME")
    for job in jobs:
        ended = _stamp(job.end_time_ms or job.modify_time_ms)
        print(f"{job.id:>8}  {api.JobState.Name(job.state):<5}{job.spec.user[:11]:<12}"
              f"{job.spec.queue[:11]:<12}{job.exit_code:>5}  {ended:<20}{job.spec.name or '-'}")


def _hours(ms: int) -> str:
    return f"{ms / 3_600_000:.2f}"


def print_accounting(response: api.AccountingResponse) -> None:
    print(f"{'USER':<12}{'QUEUE':<12}{'JOBS':>7}{'DONE':>7}{'EXIT':>7}{'SLOT-H':>10}{'CPU-H':>10}"
          f"{'AVG-WAIT-S':>12}{'AVG-RUN-S':>11}")
    for t in response.totals:
        wait = t.wait_ms / t.started / 1000 if t.started else 0.0
        run = t.run_ms / t.started / 1000 if t.started else 0.0
        print(f"{t.user[:11]:<12}{t.queue[:11]:<12}{t.jobs:>7}{t.done:>7}{t.exited:>7}{_hours(t.slot_ms):>10}"
              f"{_hours(t.cpu_ms):>10}{wait:>12.1f}{run:>11.1f}")
