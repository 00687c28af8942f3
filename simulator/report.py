"""What a simulation's figures are: waits, bounded slowdowns, utilization and makespan.

Theory of operation. From each job's record as it ended (submit, start of its
last attempt, end) and the machine's slots:
- wait: start - submit; response: end - submit; run: end - start;
- bounded slowdown (bsld): max(1, response / max(run, 10 s)), the 10-second
  threshold of Feitelson et al. that keeps very short jobs from dominating;
- utilization: slot-seconds run / (slots x makespan); makespan: the last end
  minus the first submit.
Overall, per queue and per user. Figures are rounded to fixed decimals so the
same run prints the same bytes. Pure.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from simulator.engine import Finished, Result

BSLD_THRESHOLD_MS = 10_000


@dataclass(frozen=True)
class Figures:
    jobs: int
    avg_wait_s: float
    max_wait_s: float
    avg_bsld: float
    utilization: float
    makespan_s: float

    def as_dict(self) -> dict[str, Any]:
        return {"jobs": self.jobs, "avg_wait_s": self.avg_wait_s, "max_wait_s": self.max_wait_s,
                "avg_bsld": self.avg_bsld, "utilization": self.utilization, "makespan_s": self.makespan_s}


def bsld(job: Finished) -> float:
    run = job.end_ms - job.start_ms
    return max(1.0, (job.end_ms - job.submit_ms) / max(run, BSLD_THRESHOLD_MS))


def figures(jobs: Sequence[Finished], slots: int) -> Figures:
    if not jobs:
        return Figures(0, 0.0, 0.0, 0.0, 0.0, 0.0)
    waits = [(j.start_ms - j.submit_ms) / 1000 for j in jobs]
    first = min(j.submit_ms for j in jobs)
    last = max(j.end_ms for j in jobs)
    makespan = (last - first) / 1000
    used = sum(j.slots * (j.end_ms - j.start_ms) for j in jobs) / 1000
    return Figures(len(jobs), round(sum(waits) / len(waits), 2), round(max(waits), 2),
                   round(sum(bsld(j) for j in jobs) / len(jobs), 2),
                   round(used / (slots * makespan), 4) if slots and makespan > 0 else 0.0, round(makespan, 2))


def report(result: Result, source: str, notes: Iterable[str] = ()) -> dict[str, Any]:
    done = result.finished
    by_queue = _grouped(done, lambda j: j.queue)
    by_user = _grouped(done, lambda j: j.user)
    return {
        "source": source, "notes": list(notes), "slots": result.slots,
        "overall": figures(done, result.slots).as_dict(),
        "queues": {q: figures(jobs, result.slots).as_dict() for q, jobs in by_queue.items()},
        "users": {u: figures(jobs, result.slots).as_dict() for u, jobs in by_user.items()},
        "run_limit_kills": sum(1 for j in done if j.exit_reason == "RUNLIMIT"),
        "unfinished": result.unfinished,
        "simulation": {"path": result.path, "passes": result.passes, "batches": result.batches,
                       "entries": result.entries,
                       "actions": result.actions, "actions_refused": result.actions_refused},
    }


def as_json(figures_: dict[str, Any]) -> str:
    return json.dumps(figures_, sort_keys=True, indent=1) + "\n"


def as_text(figures_: dict[str, Any], top_users: int = 10) -> str:
    lines = [f"simulated {figures_['source']}"]
    lines += [f"  ({note})" for note in figures_["notes"]]
    if figures_["simulation"]["path"] == "counted":
        lines.append("  (counted: one-slot hosts, one queue, the same starts as every event applied; "
                     "--faithful applies them)")
    lines.append(f"{'':<16} {'jobs':>8} {'avg wait s':>12} {'max wait s':>12} {'avg bsld':>10} "
                 f"{'util':>7} {'makespan s':>12}")
    lines.append(_row("all", figures_["overall"]))
    for queue, each in sorted(figures_["queues"].items()):
        lines.append(_row(f"queue {queue}", each))
    users = sorted(figures_["users"].items(), key=lambda kv: (-kv[1]["jobs"], kv[0]))
    for user, each in users[:top_users]:
        lines.append(_row(f"user {user}", each))
    if len(users) > top_users:
        lines.append(f"  ({len(users) - top_users} more users: --json lists them all)")
    if figures_["run_limit_kills"]:
        lines.append(f"{figures_['run_limit_kills']} jobs killed at their run limit (RUNLIMIT)")
    if figures_["unfinished"]:
        lines.append(f"{figures_['unfinished']} jobs never finished (they could not run on these hosts)")
    return "\n".join(lines) + "\n"


def _row(name: str, f: dict[str, Any]) -> str:
    return (f"{name[:16]:<16} {f['jobs']:>8} {f['avg_wait_s']:>12.2f} {f['max_wait_s']:>12.2f} "
            f"{f['avg_bsld']:>10.2f} {f['utilization']:>7.4f} {f['makespan_s']:>12.2f}")


def _grouped(jobs: Sequence[Finished], key: Any) -> dict[str, list[Finished]]:
    out: dict[str, list[Finished]] = {}
    for job in jobs:
        out.setdefault(key(job), []).append(job)
    return out
