"""How the pass benchmarks time a pass: the median of a few runs, two ways.

`cold`: `run_pass` on the hosts' and jobs' records, making each host's feasibility state and each
job's digest in the pass. `kept`: as the scheduler daemon runs it: the view keeps those states, the
index's order of the hosts with free slots (scheduler/view.py: View.fleet) and the waiting jobs'
digests (View.digests) between passes, and makes them again only for the hosts and jobs an event
touched, so a pass starts from them. Both are reported; the targets are the daemon's (kept).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import TypedDict

from scheduler.decisions import PassResult
from scheduler.host_index import Fleet
from scheduler.job_digest import Digests
from xce.rules import feasibility
from xce.v1 import api_pb2 as api

Pass = Callable[["Kept"], PassResult]


class Kept(TypedDict, total=False):
    """run_pass's arguments for what the view keeps (none: the pass makes them)."""

    fleet: Fleet
    digests: Digests


def kept_fleet(hosts: Sequence[api.Host]) -> Fleet:
    """What View.fleet holds for these hosts."""
    return Fleet.of({h.spec.name: feasibility.host_state(h, load=True) for h in hosts})


def timed(one_pass: Pass, hosts: Sequence[api.Host], jobs: Sequence[api.Job],
          repeat: int) -> tuple[PassResult, dict[str, float]]:
    """(the last kept pass's result, {cold_s, pass_s_median, pass_s_max}); the runs interleaved.
    `one_pass(kept)` passes `kept` on to run_pass as keyword arguments."""
    kept_ = Kept(fleet=kept_fleet(hosts), digests=Digests(jobs))
    cold: list[float] = []
    kept: list[float] = []
    result: PassResult | None = None
    for _ in range(repeat):
        started = time.perf_counter()
        one_pass(Kept())
        cold.append(time.perf_counter() - started)
        started = time.perf_counter()
        result = one_pass(kept_)
        kept.append(time.perf_counter() - started)
    assert result is not None
    return result, {"pass_s_median": round(statistics.median(kept), 3), "pass_s_max": round(max(kept), 3),
                    "cold_s_median": round(statistics.median(cold), 3)}
