"""The live counts (gateway/stats.py) and their driver's folding of a Sync stream
(gateway/live_jobs.py): arrays counted by their elements, what each caller may read, the tally
kept equal to a recount as records change, the minute samples and the estimates from a snapshot.
Pure: records in, numbers out; a fake clock."""

from __future__ import annotations

import random
import struct

from gateway import stats
from gateway.live_jobs import LiveJobs
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

ADMIN = stats.Viewer("root", jobs=True, every_job=True, cluster=True)
ALICE = stats.Viewer("alice", jobs=True, every_job=False, cluster=False)
NOW_MS = 1_800_000_000_000 // stats.STEP_MS * stats.STEP_MS + 30_000


def job(job_id: int, user: str = "alice", queue: str = "normal", state: int = api.PEND,
        **more: object) -> api.Job:
    record = api.Job(id=job_id, state=state, submit_time_ms=NOW_MS - 600_000,  # type: ignore[arg-type]
                     **more)
    record.spec.user, record.spec.queue = user, queue
    return record


def array(job_id: int, size: int, running: int) -> api.Job:
    """An array's record: `running` elements are jobs that run, the rest positions not yet jobs."""
    record = job(job_id, user="bob")
    record.spec.array.SetInParent()
    record.array.size = size
    counts = [0] * 9
    counts[api.PEND], counts[api.RUN] = size - running, running
    record.array.counts.extend(counts)
    record.array.runs.add(first=running, last=size - 1, state=api.PEND)
    return record


def recount(views: list[stats.JobView]) -> stats.Tally:
    tally = stats.Tally()
    for view in views:
        tally.change(None, view)
    return tally


def test_an_array_counts_its_elements_once_and_each_caller_sees_what_it_may_read() -> None:
    elements = [stats.job_view(job(100 + n, user="bob", state=api.RUN, array_id=7, host="h1",
                                   start_time_ms=NOW_MS - 60_000)) for n in range(2)]
    views = [stats.job_view(array(7, 1000, 2)), *elements, stats.job_view(job(1)),
             stats.job_view(job(2, user="carol", queue="gpu", pending_code=api.PEND_NO_FREE_SLOTS))]
    hosts = [stats.HostView("h1", "HOST_OK", False, 4, 2, 0.5),
             stats.HostView("h2", "HOST_UNAVAIL", True, 8, 0, -1)]
    every = stats.answer(ADMIN, recount(views), hosts, [], NOW_MS, 0)
    assert every["jobs"]["total"] == 1002
    assert every["jobs"]["by_queue"] == {"gpu": {"PEND": 1}, "normal": {"PEND": 999, "RUN": 2}}
    assert every["pending"]["normal"] == {stats.ARRAY_WINDOW: 998, "PENDING_REASON_UNSPECIFIED": 1}
    assert every["pending"]["gpu"] == {"PEND_NO_FREE_SLOTS": 1}
    assert every["slots"] == {"used": 2, "total": 4}
    assert every["hosts"]["by_status"] == {"HOST_OK": 1, "HOST_UNAVAIL": 1, "closed": 1}
    own = stats.answer(ALICE, recount(views), hosts, [], NOW_MS, 0)
    assert own["jobs_visible"] == "own" and own["jobs"]["total"] == 1 and "hosts" not in own
    assert "slots_used" not in own["series"]


def test_the_tally_kept_by_changes_equals_a_recount() -> None:
    rng = random.Random(7)
    print("seed 7")
    live: dict[int, stats.JobView] = {}
    tally = stats.Tally()
    for _ in range(2000):
        job_id = rng.randrange(50)
        if rng.random() < 0.2:
            tally.change(live.pop(job_id, None), None)
            continue
        state = rng.choice([api.PEND, api.PSUSP, api.RUN, api.DONE, api.EXIT, api.SSUSP])
        view = stats.job_view(job(job_id, user=rng.choice("ab"), queue=rng.choice(["q", "r"]), state=state,
                                  pending_code=rng.choice([0, api.PEND_JOB_HELD])))
        tally.change(live.get(job_id), view)
        live[job_id] = view
    again = recount(list(live.values()))
    assert tally.states == again.states and tally.reasons == again.reasons


def test_samples_are_per_minute_and_the_first_snapshot_is_estimated_back() -> None:
    clock = [NOW_MS / 1000]
    live = LiveJobs(clock=lambda: clock[0])
    started = job(1, state=api.RUN, start_time_ms=NOW_MS - 300_000, host="h1")
    waiting = job(2, user="carol")
    host = api.Host(status=api.HOST_OK, slots_used=1)
    host.spec.name, host.spec.slots = "h1", 2
    records = [log.Change(table="jobs", key=struct.pack(">Q", j.id), value=j.SerializeToString())
               for j in (started, waiting)]
    records.append(log.Change(table="hosts", key=b"h1", value=host.SerializeToString()))
    live.observe(log.SyncMessage(snapshot_begin=log.SnapshotBegin(revision=5)))
    live.observe(log.SyncMessage(snapshot_chunk=log.SnapshotChunk(records=records)))
    live.observe(log.SyncMessage(snapshot_end=log.SnapshotEnd(revision=5)))
    assert live.ready and not live.error
    series = live.answer(ADMIN)["series"]
    assert len(series["times_ms"]) == stats.SERIES_STEPS
    # Running from 5 minutes before now, pending from 10 minutes before: the estimates say so.
    assert series["running"]["normal"][-7:] == [0, 0, 1, 1, 1, 1, 1]
    assert series["pending"]["normal"][-12:] == [0, 0, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1]
    assert series["slots_used"][-2:] == [1, 1] and series["slots_total"][-1] == 2
    # An event: carol's job runs; the next minute's first message samples it.
    ran = job(2, user="carol", state=api.RUN, start_time_ms=NOW_MS)
    event = log.Event(revision=6, changes=[log.Change(table="jobs", key=struct.pack(">Q", 2),
                                                      value=ran.SerializeToString())])
    live.observe(log.SyncMessage(event=event))
    live.observe(log.SyncMessage(event=event))  # again (a resumed stream): taken once
    clock[0] += stats.STEP_MS / 1000
    live.observe(log.SyncMessage(progress=6))
    answer = live.answer(ADMIN)
    assert answer["jobs"]["by_state"] == {"RUN": 2} and answer["revision"] == "6"
    assert answer["series"]["running"]["normal"][-1] == 2
    assert live.answer(ALICE)["series"]["running"]["normal"][-1] == 1
    # Minutes when nothing was heard stay empty.
    clock[0] += 5 * stats.STEP_MS / 1000
    live.observe(log.SyncMessage(progress=6))
    assert live.answer(ADMIN)["series"]["running"]["normal"][-5:-1] == [None] * 4


def test_a_failure_in_the_counts_leaves_the_stream_alone_and_says_so() -> None:
    live = LiveJobs(clock=lambda: NOW_MS / 1000)
    live.observe(log.SyncMessage(snapshot_begin=log.SnapshotBegin(revision=1)))
    live.observe(log.SyncMessage(snapshot_chunk=log.SnapshotChunk(records=[
        log.Change(table="jobs", key=b"x", value=b"\xff\xff")])))  # not a Job
    assert not live.ready and "DecodeError" in live.error


def test_many_users_are_folded_per_queue_for_those_who_see_every_job() -> None:
    pairs = {(f"q{n % 3}", f"u{n}"): (1, 0) for n in range(stats.MAX_PAIRS + 10)}
    folded = stats.fold(pairs)
    assert len(folded) <= stats.MAX_PAIRS + 2
    assert sum(p for p, _ in folded.values()) == len(pairs)
    assert any(user == stats.OTHERS for _, user in folded)
