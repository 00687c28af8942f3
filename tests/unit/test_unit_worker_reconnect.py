"""The worker's reconnect loop (worker/daemon.py, Worker._connect_forever): how long it sleeps between
attempts, with the stream itself replaced by a stand-in."""

from __future__ import annotations

import random
import threading
from pathlib import Path

import grpc
import pytest

from worker.config import WorkerConfig
from worker.daemon import INITIAL_BACKOFF_S, MAX_BACKOFF_S, Worker
from xce.v1 import api_pb2 as api


class Unavailable(grpc.RpcError):
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return "connection lost"


class Stop:
    """Stands in for the worker's stop event: records each sleep, stops after `sleeps` of them."""

    def __init__(self, sleeps: int) -> None:
        self.waits: list[float] = []
        self.sleeps = sleeps

    def is_set(self) -> bool:
        return len(self.waits) >= self.sleeps

    def wait(self, timeout: float) -> bool:
        self.waits.append(timeout)
        return self.is_set()

    def set(self) -> None:
        self.sleeps = 0


def test_a_lost_stream_that_had_joined_starts_the_backoff_afresh(tmp_path: Path) -> None:
    """Ten failed attempts grow the backoff to its cap; then a session joins and its leader is killed
    (the stream ends with an error, as it does): the next attempt comes at the initial backoff, not after
    the cap, which would outlast the failover by a second or two."""
    config = WorkerConfig(path=tmp_path / "worker.toml", controllers=("a:1", "b:1"),
                          host=api.HostSpec(name="n1"), spool_dir=tmp_path / "spool")
    daemon = Worker(config, rng=random.Random(1))
    stop = Stop(sleeps=12)
    daemon._stop = stop  # type: ignore[assignment]
    attempts: list[str] = []

    def session(target: str, joined: threading.Event) -> None:
        attempts.append(target)
        if len(attempts) == 11:
            joined.set()  # the eleventh joins, then its leader dies
        raise Unavailable()

    daemon._session = session  # type: ignore[method-assign]
    daemon._connect_forever()
    assert attempts[:3] == ["a:1", "b:1", "a:1"]  # each failure moves on to the next replica
    assert MAX_BACKOFF_S * 0.5 <= stop.waits[9] <= MAX_BACKOFF_S * 1.5  # capped after ten failures
    assert stop.waits[10] == pytest.approx(INITIAL_BACKOFF_S, rel=0.5)  # afresh after the joined one
