"""Closed-loop load from separate client processes, and the statistics on it.

Standard library only: both the XCE benchmark (project venv) and the etcd
load script (etcd's own venv, protobuf 3) import it.

Each client process builds its own connection through `make_op(*args)`
(which should also warm it up), waits at a barrier so every client starts
together, then calls `op(n)` synchronously until the time or the count runs
out. Processes are spawned, not forked: the parent holds open gRPC channels,
and gRPC's core is not fork-safe.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import queue
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

Op = Callable[[int], None]
MakeOp = Callable[..., Op]

# A client that fails this many times in a row is broken, not slow: stop it
# rather than spin for the whole duration.
MAX_CONSECUTIVE_ERRORS = 50
SETUP_TIMEOUT_S = 120.0  # 16 processes importing gRPC on 2 cores takes a while


@dataclass
class LoadResult:
    clients: int
    ops: int
    errors: int
    elapsed_s: float
    latencies_s: list[float]

    @property
    def per_second(self) -> float:
        return self.ops / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def summary(self) -> dict[str, Any]:
        return {"clients": self.clients, "ops": self.ops, "errors": self.errors,
                "elapsed_s": round(self.elapsed_s, 3), "per_s": round(self.per_second, 1),
                "p50_ms": ms(percentile(self.latencies_s, 50)),
                "p99_ms": ms(percentile(self.latencies_s, 99))}


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile (so p99 of 10 samples is the maximum); nan if empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


def ms(seconds: float) -> float | None:
    """Seconds as milliseconds for JSON: None stands for 'no sample'."""
    return None if math.isnan(seconds) else round(seconds * 1000, 2)


def run_clients(make_op: MakeOp, per_client_args: Sequence[tuple[Any, ...]], seconds: float,
                max_ops: int) -> LoadResult:
    """One process per entry of per_client_args; all start together."""
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(len(per_client_args) + 1)
    out: Any = ctx.Queue()
    procs = [ctx.Process(target=_client, args=(make_op, args, seconds, max_ops, barrier, out),
                         daemon=True)
             for args in per_client_args]
    try:
        for proc in procs:
            proc.start()
        return _collect(procs, barrier, out, seconds)
    finally:
        for proc in procs:  # only our own children, by handle
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join()


def _collect(procs: list[Any], barrier: Any, out: Any, seconds: float) -> LoadResult:
    try:
        barrier.wait(timeout=SETUP_TIMEOUT_S)
    except Exception:  # noqa: BLE001 - a client failed its setup; say which below
        pass
    reports = []
    for _ in procs:
        try:
            reports.append(out.get(timeout=seconds + SETUP_TIMEOUT_S))
        except queue.Empty:
            raise RuntimeError("a client process did not report back") from None
    failures = [r["failed"] for r in reports if "failed" in r]
    if failures:
        raise RuntimeError(f"{len(failures)} client(s) failed: {failures[0]}")
    start = min(r["start"] for r in reports)
    end = max(r["end"] for r in reports)
    return LoadResult(clients=len(procs), ops=sum(r["ops"] for r in reports),
                      errors=sum(r["errors"] for r in reports), elapsed_s=end - start,
                      latencies_s=[x for r in reports for x in r["lat"]])


def _client(make_op: MakeOp, args: tuple[Any, ...], seconds: float, max_ops: int, barrier: Any,
            out: Any) -> None:
    try:
        op = make_op(*args)
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which prints it
        barrier.abort()
        out.put({"failed": f"{type(exc).__name__}: {exc}"})
        return
    try:
        barrier.wait(timeout=SETUP_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001 - another client failed its setup
        out.put({"failed": f"barrier broken: {exc!r}"})
        return
    out.put(_loop(op, seconds, max_ops))


def _loop(op: Op, seconds: float, max_ops: int) -> dict[str, Any]:
    """The timed, bounded loop; CLOCK_MONOTONIC is system-wide, so the parent
    can line up the start and end times of all the processes."""
    latencies: list[float] = []
    errors = consecutive = 0
    start = time.monotonic()
    deadline = start + seconds
    now = start
    while len(latencies) < max_ops and now < deadline and consecutive < MAX_CONSECUTIVE_ERRORS:
        try:
            op(len(latencies))
        except Exception:  # noqa: BLE001 - counted and reported as errors
            errors += 1
            consecutive += 1
            now = time.monotonic()
            continue
        consecutive = 0
        end = time.monotonic()
        latencies.append(end - now)
        now = end
    return {"ops": len(latencies), "errors": errors, "start": start, "end": now, "lat": latencies}
