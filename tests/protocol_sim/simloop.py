"""An asyncio event loop on the simulated clock, run only when the simulation says.

The leader's worker sessions (controller/worker_session.py) and its report
group commit (controller/group_commit.py) are asyncio code; the simulation
runs the real coroutines on this loop. `time()` is the simulated clock, so
their timeouts (a session's full re-derive every RESEND_S) fire by simulated
time; `run_idle()` runs ready callbacks and due timers until there are none
and never blocks. One loop per simulation, closed with it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

MAX_ITERATIONS = 100_000


class SimLoop(asyncio.SelectorEventLoop):
    def __init__(self, clock_s: Callable[[], float]) -> None:
        super().__init__()
        self._clock_s = clock_s
        self.failures: list[str] = []  # exceptions that ended a task: a broken wiring, or a bug
        self.set_task_factory(self._task)

    def _task(self, loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        task: asyncio.Task[Any] = asyncio.Task(coro, loop=loop, **kwargs)
        task.add_done_callback(self._check)
        return task

    def _check(self, task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            return
        exc = task.exception()  # retrieved: never reported again at garbage collection
        if exc is not None and not isinstance(exc, ConnectionError):
            self.failures.append(f"{task.get_coro()!r} raised {exc!r}")

    def time(self) -> float:
        return self._clock_s()

    def _busy(self) -> bool:
        ready = self._ready  # type: ignore[attr-defined]  # CPython's BaseEventLoop internals
        scheduled = self._scheduled  # type: ignore[attr-defined]
        return bool(ready) or bool(scheduled and scheduled[0].when() <= self.time())

    def run_idle(self) -> None:
        for _ in range(MAX_ITERATIONS):
            self.call_soon(self.stop)
            self.run_forever()
            if not self._busy():
                return
        raise AssertionError("the simulated event loop does not settle")

    def shutdown(self) -> None:
        for task in asyncio.all_tasks(self):
            task.cancel()
        self.run_idle()
        self.close()
