"""Deliberately injected bugs, to show the checks can fail (issue 5, item 5).

Each is switched on through a monkeypatch (pytest's `MonkeyPatch`, also
usable as `MonkeyPatch.context()` outside pytest) on the real function it
breaks, except `run_before_commit`, which lives in the simulated leader
(leader.py) because the leader's send loop is what the simulation replicates.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from controller import fsm
from scheduler.view import View
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

from .cluster import Options


def run_before_commit(mp: pytest.MonkeyPatch, options: Options) -> Options:
    """The leader sends RunJob for a batch as soon as it proposes it (no commit barrier)."""
    return replace(options, run_before_commit=True)


def requeue_on_success(mp: pytest.MonkeyPatch, options: Options) -> Options:
    """The seed's bug-1512: a success ack (a `started` report) puts the job back to PEND."""
    original: Callable[[fsm.Applier, log.HostReport], log.Result] = fsm._report_one

    def buggy(applier: fsm.Applier, relayed: log.HostReport) -> log.Result:
        result = original(applier, relayed)
        if result.code == log.OK and relayed.report.WhichOneof("body") == "started":
            job = fsm.read_job(applier.tables, relayed.report.job_id)
            assert job is not None
            fsm._release(applier, job)
            job.state, job.host, job.pending_reason = api.PEND, "", "requeued on a success ack"
            job.attempt += 1
            applier.put_job(job)
        return result

    mp.setattr(fsm, "_report_one", buggy)
    return options


def join_without_generation_bump(mp: pytest.MonkeyPatch, options: Options) -> Options:
    """A re-join is accepted but the host keeps its generation."""
    original: Callable[[fsm.Applier, api.HostSpec], log.Result] = fsm._join_one

    def buggy(applier: fsm.Applier, spec: api.HostSpec) -> log.Result:
        before = fsm.read_host(applier.tables, spec.name)
        result = original(applier, spec)
        if before is not None and before.generation > 0 and result.code == log.OK:
            host = fsm.read_host(applier.tables, spec.name)
            assert host is not None
            host.generation = before.generation
            applier.put_host(host)
            result.generation = before.generation
        return result

    mp.setattr(fsm, "_join_one", buggy)
    return options


def view_accepts_old_events(mp: pytest.MonkeyPatch, options: Options) -> Options:
    """The scheduler's view applies an event whose revision is not newer than its own."""
    original = View._apply_event

    def buggy(self: View, event: log.Event) -> None:
        if event.revision <= self.revision:
            self.revision = event.revision - 1  # so the real check lets the repeat through
        original(self, event)

    mp.setattr(View, "_apply_event", buggy)
    return options


def stale_lease_accepted(mp: pytest.MonkeyPatch, options: Options) -> Options:
    """Apply takes a decision batch without checking its lease epoch and holder."""
    original = fsm._HANDLERS["decisions"]

    def buggy(applier: fsm.Applier) -> list[log.Result]:
        meta, batch = applier.meta, applier.entry.decisions
        saved = (meta.lease_epoch, meta.lease_holder, meta.lease_expires_ms)
        meta.lease_epoch, meta.lease_holder = batch.lease_epoch, batch.scheduler_id
        meta.lease_expires_ms = max(meta.lease_expires_ms, applier.entry.stamp_ms + 1)
        try:
            return original(applier)
        finally:  # the lease itself is left as it was: only the check is skipped
            meta.lease_epoch, meta.lease_holder, meta.lease_expires_ms = saved

    mp.setitem(fsm._HANDLERS, "decisions", buggy)
    return options


BUGS: dict[str, Callable[[pytest.MonkeyPatch, Options], Options]] = {
    f.__name__: f for f in (run_before_commit, requeue_on_success, join_without_generation_bump,
                            view_accepts_old_events, stale_lease_accepted)}


def inject(name: str, mp: pytest.MonkeyPatch, options: Options | None = None) -> Options:
    return BUGS[name](mp, options or Options())


__all__ = ["BUGS", "inject"]
_ = Any
