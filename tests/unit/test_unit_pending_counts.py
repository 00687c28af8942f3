"""The leader's per-user count of pending jobs (controller/pending_counts.py), against a full scan."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.pending_counts import PendingCounts
from controller.tables import MemoryTables
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

STATES = [api.PEND, api.PSUSP, api.RUN, api.DONE, api.EXIT]
USERS = ["alice", "bob"]


def _scan(tables: MemoryTables, user: str) -> int:
    return sum(1 for _, raw in tables.scan("jobs")
               if (job := api.Job.FromString(raw)).spec.user == user and job.state in (api.PEND, api.PSUSP))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 6), st.sampled_from(USERS), st.sampled_from(STATES), st.booleans(),
                          st.booleans()), max_size=40))
def test_the_index_follows_the_events_as_a_scan_would_count(
        steps: list[tuple[int, str, int, bool, bool]]) -> None:
    tables, counts = MemoryTables(), PendingCounts()
    for revision, (job_id, user, state, delete, pruned) in enumerate(steps, start=1):
        key = struct.pack(">Q", job_id)
        if delete:
            tables.delete("jobs", key)
            change = log.Change(table="jobs", key=key, deleted=True)
        else:
            raw = api.Job(id=job_id, state=state, spec=api.JobSpec(user=user)).SerializeToString()
            tables.put("jobs", key, raw)
            change = log.Change(table="jobs", key=key, value=raw)
        counts.applied([None if pruned else log.Event(revision=revision, changes=[change])])
        for who in USERS:
            assert counts.count(tables, who) == _scan(tables, who)


def test_an_array_counts_its_pending_elements_and_an_element_s_record_nothing() -> None:
    """LSF counts each element toward MAX_PEND_JOBS: the array's record holds them by state."""
    tables, counts = MemoryTables(), PendingCounts()
    by_state = [0] * (max(api.JobState.values()) + 1)
    by_state[api.PEND], by_state[api.PSUSP], by_state[api.RUN] = 9_990, 5, 5
    spec = api.JobSpec(user="alice", array=api.ArraySpec(ranges=[api.IndexRange(start=1, end=10_000)]))
    array = api.Job(id=1, state=api.PEND, spec=spec, array=api.ArrayState(size=10_000, counts=by_state))
    element = api.Job(id=2, state=api.PEND, array_id=1, array_index=7, spec=api.JobSpec(user="alice"))
    for job in (array, element):
        tables.put("jobs", struct.pack(">Q", job.id), job.SerializeToString())
    assert counts.count(tables, "alice") == 9_995
    by_state[api.PEND] -= 1000
    by_state[api.DONE] = 1000
    array.array.counts[:] = by_state
    raw = array.SerializeToString()
    change = log.Change(table="jobs", key=struct.pack(">Q", 1), value=raw)
    counts.applied([log.Event(revision=2, changes=[change])])
    assert counts.count(tables, "alice") == 8_995
