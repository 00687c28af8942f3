"""Load indices (the `host_loads` kind): what each worker measured, for the planner alone.

Workers send their load with every heartbeat (worker/host_load.py); the
leader commits a host's at most every `[hosts] load_commit_s`, and only
when it changed at the precision kept here. Apply stores them in the host
record (`load`, `load_time_ms`) for the scheduler, which reads them in
select[] and order[] (`r1m`, `ut`, free `mem`, ...). Apply never decides
on them: the commit barrier treats load indices as unknown (feasibility.py),
since load moves between the planner's view and the commit. A re-join
clears them: they were the old generation's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from controller.fsm.applier import Applier, each
from controller.fsm.records import host_at
from xce.rules import feasibility
from xce.v1 import log_pb2 as log

NAMES = feasibility.LOAD_INDICES | {"mem"}  # mem: what the host has free now, in MB
MAX_VALUE = 1e15


def clean(values: Mapping[str, float]) -> dict[str, float]:
    """The known indices of a report, finite, at most MAX_VALUE, to two decimals (what a worker
    sends is not trusted, and finer figures would only churn the log)."""
    kept = {}
    for name in sorted(NAMES & values.keys()):
        value = values[name]
        if isinstance(value, float | int) and math.isfinite(value) and 0 <= value <= MAX_VALUE:
            kept[name] = round(float(value), 2)
    return kept


def apply_host_loads(applier: Applier) -> list[log.Result]:
    return each(applier, applier.entry.host_loads.loads, load_one, "host loads")


def load_one(applier: Applier, load: log.HostLoad) -> log.Result:
    host = host_at(applier.tables, load.name, load.generation)
    if isinstance(host, log.Result):  # no such host, or it re-joined meanwhile: the old one's load
        return host
    host.ClearField("load")
    host.load.update(clean(load.values))
    host.load_time_ms = applier.stamp_ms
    applier.put_host(host)
    return log.Result(code=log.OK, generation=host.generation)
