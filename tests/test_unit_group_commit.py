"""Unit tests of group commit (controller/group_commit.py) with a fake proposer."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from controller.group_commit import GroupCommit
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

T = TypeVar("T")
WAIT_S = 2.0


def run(body: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(asyncio.wait_for(body(), 10))


def request(number: int, padding: int = 0) -> api.SubmitJobsRequest:
    return api.SubmitJobsRequest(request_id=f"r{number}",
                                 jobs=[api.JobSpec(command=["echo", "x" * padding])])


class FakeProposer:
    """Records each proposal; answers each request with a Result naming it.

    `gate`, when set, holds every proposal until it is opened; `delay_s`
    models the commit latency; `fail` makes proposals raise.
    """

    def __init__(self, delay_s: float = 0.0, gate: asyncio.Event | None = None) -> None:
        self.batches: list[list[str]] = []
        self.delay_s = delay_s
        self.gate = gate
        self.in_flight = 0
        self.max_in_flight = 0
        self.fail = False

    async def __call__(self, requests: list[api.SubmitJobsRequest]) -> list[log.Result | None]:
        self.batches.append([r.request_id for r in requests])
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.gate is not None:
                await self.gate.wait()
            await asyncio.sleep(self.delay_s)
            if self.fail:
                raise RuntimeError("leader lost")
            return [log.Result(code=log.OK, message=r.request_id, job_ids=[int(r.request_id[1:])])
                    for r in requests]
        finally:
            self.in_flight -= 1


def test_concurrent_submits_share_few_proposals_and_each_gets_its_own_result() -> None:
    async def body() -> tuple[FakeProposer, GroupCommit, list[log.Result | None]]:
        proposer = FakeProposer(delay_s=0.01)
        batcher = GroupCommit(proposer)
        results = await asyncio.gather(*(batcher.submit(request(i)) for i in range(50)))
        await batcher.close()
        return proposer, batcher, results

    proposer, batcher, results = run(body)
    assert len(proposer.batches) <= 5
    assert [r.message if r else None for r in results] == [f"r{i}" for i in range(50)]
    assert [list(r.job_ids) if r else None for r in results] == [[i] for i in range(50)]
    # Every request was proposed exactly once, in submission order.
    assert [rid for batch in proposer.batches for rid in batch] == [f"r{i}" for i in range(50)]
    assert (batcher.batches, batcher.requests) == (len(proposer.batches), 50)


def test_submits_arriving_while_a_proposal_is_in_flight_form_the_next_batch() -> None:
    async def body() -> FakeProposer:
        gate = asyncio.Event()
        proposer = FakeProposer(gate=gate)
        batcher = GroupCommit(proposer, max_in_flight=1)
        first = asyncio.ensure_future(batcher.submit(request(0)))
        while not proposer.batches:
            await asyncio.sleep(0)
        rest = [asyncio.ensure_future(batcher.submit(request(i))) for i in range(1, 30)]
        await asyncio.sleep(0.01)
        assert len(proposer.batches) == 1  # held back: one proposal in flight at most
        gate.set()
        await asyncio.wait_for(asyncio.gather(first, *rest), WAIT_S)
        await batcher.close()
        return proposer

    proposer = run(body)
    assert proposer.batches == [["r0"], [f"r{i}" for i in range(1, 30)]]
    assert proposer.max_in_flight == 1


def test_light_load_proposes_at_once_without_waiting_for_company() -> None:
    async def body() -> FakeProposer:
        proposer = FakeProposer()
        batcher = GroupCommit(proposer)
        for i in range(3):
            result = await asyncio.wait_for(batcher.submit(request(i)), WAIT_S)
            assert result is not None and result.message == f"r{i}"
        await batcher.close()
        return proposer

    assert run(body).batches == [["r0"], ["r1"], ["r2"]]


def test_max_requests_bounds_every_batch() -> None:
    async def body() -> tuple[FakeProposer, list[log.Result | None]]:
        proposer = FakeProposer(delay_s=0.005)
        batcher = GroupCommit(proposer, max_requests=7)
        results = await asyncio.gather(*(batcher.submit(request(i)) for i in range(50)))
        await batcher.close()
        return proposer, results

    proposer, results = run(body)
    assert max(len(batch) for batch in proposer.batches) == 7
    assert len(proposer.batches) == 8  # ceil(50 / 7)
    assert [r.message if r else None for r in results] == [f"r{i}" for i in range(50)]


def test_max_bytes_bounds_every_batch_of_more_than_one() -> None:
    size = request(0, padding=100).ByteSize()

    async def body() -> FakeProposer:
        proposer = FakeProposer(delay_s=0.005)
        batcher = GroupCommit(proposer, max_bytes=3 * size + size // 2)
        await asyncio.gather(*(batcher.submit(request(i, padding=100)) for i in range(20)))
        # A request larger than max_bytes on its own still goes, alone.
        big = await batcher.submit(request(99, padding=10 * size))
        assert big is not None and big.message == "r99"
        await batcher.close()
        return proposer

    proposer = run(body)
    assert all(len(batch) <= 3 for batch in proposer.batches)
    assert max(len(batch) for batch in proposer.batches) == 3
    assert [rid for batch in proposer.batches for rid in batch] == [f"r{i}" for i in range(20)] + ["r99"]


def test_max_in_flight_bounds_outstanding_proposals() -> None:
    async def body() -> FakeProposer:
        proposer = FakeProposer(delay_s=0.01)
        batcher = GroupCommit(proposer, max_requests=2, max_in_flight=3)
        await asyncio.gather(*(batcher.submit(request(i)) for i in range(40)))
        await batcher.close()
        return proposer

    proposer = run(body)
    assert proposer.max_in_flight == 3


def test_proposer_exception_releases_every_waiter_with_none() -> None:
    async def body() -> tuple[list[log.Result | None], log.Result | None]:
        proposer = FakeProposer(delay_s=0.005)
        proposer.fail = True
        batcher = GroupCommit(proposer, max_requests=4, max_in_flight=1)
        failed = await asyncio.wait_for(
            asyncio.gather(*(batcher.submit(request(i)) for i in range(10))), WAIT_S)
        proposer.fail = False
        # The slot came back: later submits still go through.
        later = await asyncio.wait_for(batcher.submit(request(10)), WAIT_S)
        await batcher.close()
        return failed, later

    failed, later = run(body)
    assert failed == [None] * 10
    assert later is not None and later.message == "r10"


def test_unknown_outcome_from_proposer_reaches_its_caller() -> None:
    async def propose(requests: list[api.SubmitJobsRequest]) -> list[log.Result | None]:
        return [None if r.request_id == "r1" else log.Result(message=r.request_id) for r in requests]

    async def body() -> list[log.Result | None]:
        batcher = GroupCommit(propose)
        results = await asyncio.gather(*(batcher.submit(request(i)) for i in range(3)))
        await batcher.close()
        return results

    results = run(body)
    assert [r.message if r else None for r in results] == ["r0", None, "r2"]


def test_close_releases_queued_waiters_with_none() -> None:
    async def body() -> list[log.Result | None]:
        gate = asyncio.Event()
        batcher = GroupCommit(FakeProposer(gate=gate), max_requests=1, max_in_flight=1)
        first = asyncio.ensure_future(batcher.submit(request(0)))
        await asyncio.sleep(0.01)
        waiting = [asyncio.ensure_future(batcher.submit(request(i))) for i in range(1, 5)]
        await asyncio.sleep(0.01)
        await batcher.close()
        try:
            return list(await asyncio.wait_for(asyncio.gather(*waiting), WAIT_S))
        finally:
            gate.set()
            await asyncio.wait_for(first, WAIT_S)

    # r1 was taken off the queue by the flusher, which then waited for the
    # only in-flight slot; r2..r4 were still queued. Every one must be released.
    assert run(body) == [None] * 4


def test_proposer_answering_fewer_results_than_requests_releases_every_waiter() -> None:
    # StateStore.apply answers an entry whose apply failed with one Result
    # however many requests the batch held (fsm.apply_failed); the waiters of
    # that batch must still be released, with None (outcome unknown).
    async def propose(requests: list[api.SubmitJobsRequest]) -> list[log.Result | None]:
        await asyncio.sleep(0)
        return [log.Result(code=log.FAILED_PRECONDITION, message="entry failed to apply")]

    async def body() -> list[log.Result | None]:
        batcher = GroupCommit(propose)
        try:
            return list(await asyncio.wait_for(
                asyncio.gather(*(batcher.submit(request(i)) for i in range(5))), WAIT_S))
        finally:
            await batcher.close()

    results = run(body)
    assert len(results) == 5
    assert all(r is None or r.code == log.FAILED_PRECONDITION for r in results)


def test_submit_many_queues_in_order_and_answers_each() -> None:
    async def body() -> tuple[list[list[str]], list[str]]:
        gate = asyncio.Event()
        proposer = FakeProposer(gate=gate)
        commit = GroupCommit(proposer, max_requests=100)
        first = asyncio.ensure_future(commit.submit(request(0)))
        await asyncio.sleep(0)  # the first batch (one request) is in flight
        many = asyncio.ensure_future(commit.submit_many([request(1), request(2), request(3)]))
        later = asyncio.ensure_future(commit.submit(request(4)))
        await asyncio.sleep(0.01)
        gate.set()
        results = await many
        await asyncio.gather(first, later)
        await commit.close()
        return proposer.batches, [r.message for r in results if r is not None]

    batches, answers = run(body)
    assert batches == [["r0"], ["r1", "r2", "r3", "r4"]]
    assert answers == ["r1", "r2", "r3"]
