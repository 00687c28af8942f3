"""History reads: finished jobs newest first (ListHistory, like bhist/sacct) and usage totals (Accounting,
like bacct), from the tables fsm/history.py keeps.

Pure functions over the state tables; a bad request raises ServiceError.
A page examines at most SCAN_BUDGET records, so a filter that matches
little cannot hold a read transaction for long: the page may then come back
short, with a token to go on from.
"""

from __future__ import annotations

import struct

from controller import fsm
from controller.fsm import history
from controller.fsm.job_index import name_part
from controller.fsm.records import FINISHED
from controller.reads import DEFAULT_PAGE_SIZE, MAX_PAGE_BYTES, MAX_PAGE_SIZE, Viewer, as_is
from controller.tables import Tables
from xce.errors import invalid
from xce.v1 import api_pb2 as api

SCAN_BUDGET = 20_000


def _check_range(since_ms: int, until_ms: int) -> None:
    if since_ms < 0 or until_ms < 0:
        raise invalid("since and until must not be negative")
    if until_ms and since_ms >= until_ms:
        raise invalid("since must be before until")


class HistoryListing:
    """A checked ListHistory request."""

    def __init__(self, request: api.HistoryRequest, viewer: Viewer = as_is) -> None:
        self.request, self.viewer = request, viewer
        _check_range(request.since_ms, request.until_ms)
        if any(state not in FINISHED for state in request.states):
            raise invalid("history holds finished jobs: states may be DONE and EXIT")
        if request.page_size < 0:
            raise invalid("page_size must not be negative")
        self.size = min(request.page_size or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
        self.states = frozenset(request.states) or frozenset(FINISHED)
        self.prefix = b"u" + name_part(request.user) if request.user else \
            b"q" + name_part(request.queue) if request.queue else b"e"
        self.before = struct.pack(">qQ", request.until_ms or (1 << 63) - 1, 0)
        if request.page_token:
            when, _, job_id = request.page_token.partition(":")
            try:
                self.before = struct.pack(">qQ", int(when), int(job_id))
            except (ValueError, struct.error):
                raise invalid("bad page_token") from None

    def _wanted(self, job: api.Job) -> bool:
        request = self.request
        return job.state in self.states and (not request.queue or job.spec.queue == request.queue) \
            and (not request.HasField("exit_code") or job.exit_code == request.exit_code)

    def read(self, tables: Tables) -> api.HistoryResponse:
        response = api.HistoryResponse(revision=fsm.read_meta(tables).applied_index)
        examined, last, size = 0, "", 0
        for when, job_id in history.newest_first(tables, self.prefix, self.before):
            if when < self.request.since_ms:
                return response
            if len(response.jobs) == self.size or examined == SCAN_BUDGET or size >= MAX_PAGE_BYTES:
                # Where this page stopped: its last job when full (one the caller sees), else the
                # last record looked at. The next page starts strictly older.
                response.next_page_token = last
                return response
            examined += 1
            last = f"{when}:{job_id}"
            job = history.read(tables, job_id)
            if job is None or not self._wanted(job):
                continue
            shown = self.viewer(job)
            if shown is not None:
                response.jobs.append(shown)
                size += shown.ByteSize()
        return response


def accounting(tables: Tables, request: api.AccountingRequest, only_user: str | None = None
               ) -> api.AccountingResponse:
    """Totals per user and queue over the hours in range; only_user: the caller may see only its own."""
    _check_range(request.since_ms, request.until_ms)
    if only_user is not None and request.user and request.user != only_user:
        return api.AccountingResponse(revision=fsm.read_meta(tables).applied_index)
    user = only_user if only_user is not None else request.user
    first = request.since_ms // history.HOUR_MS
    last = -(-request.until_ms // history.HOUR_MS) if request.until_ms else (1 << 63) - 1
    totals: dict[tuple[str, str], api.UsageTotals] = {}
    for key, raw in tables.scan("acct", struct.pack(">q", first)):
        if struct.unpack(">q", key[:8])[0] >= last:
            break
        row = api.UsageTotals.FromString(raw)
        if (user and row.user != user) or (request.queue and row.queue != request.queue):
            continue
        into = totals.setdefault((row.user, row.queue), api.UsageTotals(user=row.user, queue=row.queue))
        history.add_totals(into, row)
    return api.AccountingResponse(totals=[totals[k] for k in sorted(totals)],
                                  revision=fsm.read_meta(tables).applied_index)
