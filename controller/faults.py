"""Deliberate bugs, for tests that must show the soak catching them.

`XCE_FAULT=<name>` in a controller's environment installs one at start (read
once, in main, never while applying: every replica of a test cluster gets the
same environment, so they stay identical). Never set in production; the
replica logs a warning when one is on.

- requeue-on-success: a job that finished with exit 0 goes back to PEND
  (attempt + 1), as the seed's duplicate-dispatch bug did: it runs again.
"""

from __future__ import annotations

import logging

from controller import fsm
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

logger = logging.getLogger(__name__)
FAULTS = ("requeue-on-success",)


def install(name: str) -> None:
    if not name:
        return
    if name not in FAULTS:
        raise ValueError(f"unknown XCE_FAULT {name!r} (known: {', '.join(FAULTS)})")
    logger.warning("XCE_FAULT=%s: this replica is deliberately broken (tests only)", name)
    original = fsm._report_one

    def requeue_on_success(applier: fsm.Applier, relayed: log.HostReport) -> log.Result:
        result = original(applier, relayed)
        job = fsm.read_job(applier.tables, relayed.report.job_id)
        if result.code == log.OK and job is not None and job.state == api.DONE:
            job.state = api.PEND
            job.attempt += 1
            job.ClearField("host")
            applier.put_job(job)
        return result

    fsm._report_one = requeue_on_success
