"""The configured limits in the state (entry format 11): pushed with InitCluster, kept in the `limits` table.

The `limits` table (name -> api.Limit) is what the scheduler's view and the
commit barrier read (xce/rules/limits.py); the Sync stream carries it. A push
replaces the whole set when its digest differs from the last one applied,
so a restart proposes nothing and an edited file takes effect (badmin
reconfig). Running jobs keep what they hold: their `holds` recorded the
limits' counters as they were when they were placed.
"""

from __future__ import annotations

from controller.fsm.applier import Applier
from xce.errors import invalid
from xce.rules import limits
from xce.v1 import log_pb2 as log


def check(init: log.InitCluster) -> None:
    try:
        limits.check(list(init.limits))
    except limits.LimitError as exc:
        raise invalid(str(exc)) from None


def apply_limits(applier: Applier, init: log.InitCluster) -> None:
    meta = applier.meta
    if init.limits_digest == meta.limits_digest:
        return
    applier.replace_table("limits", {limit.name.encode(): limit.SerializeToString(deterministic=True)
                                     for limit in init.limits})
    meta.limits_digest = init.limits_digest
