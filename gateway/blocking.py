"""Blocking reads on the event hub: wait until a change a read covers commits past a revision.

The hub holds the committed changes of jobs, hosts and queues (event_hub.py), so a blocking read
costs no call until it answers. A change it cannot see (a revision older than the hub keeps, a gap
in its stream) ends the wait at once: a blocking read may wake for nothing, never sleep through a
change (as Nomad's, whose clients re-check and block again).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from gateway import sse
from gateway.event_hub import EventHub


async def wait_past(hub: EventHub, index: int, covers: Callable[[sse.Message], bool], wait_s: float) -> None:
    """Return at the first change after revision `index` that `covers` takes, or after `wait_s`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    place = sse.Position(index)
    while True:
        waiter = hub.waiter()  # taken before the buffer is looked at, so that no change is missed
        found = hub.after(place)
        if found is None:
            return
        items = found[0]
        for item in items:
            if not isinstance(item, sse.Message) or covers(item):
                return
        if items:
            last = items[-1]
            assert isinstance(last, sse.Message)
            place = sse.Position(last.revision, -1 if last.last else last.index)
        left = deadline - loop.time()
        if left <= 0:
            return
        try:
            await asyncio.wait_for(waiter.wait(), left)
        except TimeoutError:
            return


def of_jobs(item: sse.Message) -> bool:
    return item.type.startswith("job.")


def of_hosts(item: sse.Message) -> bool:
    return item.type.startswith("host.")


def of_queues(item: sse.Message) -> bool:
    return item.type.startswith("queue.")


def of_job(job_ids: set[int]) -> Callable[[sse.Message], bool]:
    return lambda item: item.type.startswith("job.") and item.job_id in job_ids
