"""A job's output relayed from its worker: the leader's book of requests in flight
(controller/output_relay.py) and the worker's careful read of the file (worker/executor.py)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from controller.output_relay import MAX_TAIL, TIMEOUT_S, OutputRelay, asked, tail_of
from worker.output_reader import OutputUnreadable, read_tail
from xce.errors import ServiceError
from xce.v1 import api_pb2 as api


def test_an_answer_reaches_only_the_caller_that_asked_that_stream() -> None:
    relay = OutputRelay()
    first = relay.ask(token=7, stream=1, host="n1", now_s=100.0)
    second = relay.ask(token=8, stream=2, host="n2", now_s=100.0)
    assert relay.answered(2, api.OutputAnswer(request=first, data=b"x")) is None  # another worker's
    waiting, answer = relay.answered(1, api.OutputAnswer(request=first, data=b"hello", size=10, path="/p"))
    assert waiting.token == 7
    assert answer == api.JobOutputResponse(data=b"hello", size=10, host="n1", path="/p")
    assert relay.answered(1, api.OutputAnswer(request=first)) is None  # answered once
    refused = relay.answered(2, api.OutputAnswer(request=second, error="no file /x"))
    assert refused is not None and isinstance(refused[1], ServiceError) and "no file /x" in refused[1].message
    assert relay.waiting == {}


def test_requests_end_by_time_by_hang_up_and_by_leadership() -> None:
    relay = OutputRelay()
    relay.ask(1, 10, "a", 0.0)
    relay.ask(2, 11, "b", 5.0)
    relay.ask(3, 11, "b", 5.0)
    assert relay.next_deadline_s() == TIMEOUT_S
    assert [w.token for w in relay.expired(TIMEOUT_S)] == [1]
    assert [w.token for w in relay.closed(11)] == [2, 3]
    relay.ask(4, 12, "c", 0.0)
    assert [w.token for w in relay.drain()] == [4] and relay.next_deadline_s() is None


def test_the_worker_is_asked_without_the_environment_and_within_bounds() -> None:
    job = api.Job(id=5, attempt=1, spec=api.JobSpec(user="ann", env={"SECRET": "s"}, stdout_path="o.txt"))
    message = asked(3, job, api.JobOutputRequest(job_id="5", stderr=True), 100)
    assert message.output.request == 3 and message.output.stderr and not message.output.job.spec.env
    assert message.output.job.spec.stdout_path == "o.txt"
    assert tail_of(api.JobOutputRequest()) == 64 << 10
    for bad in (-1, MAX_TAIL + 1):
        with pytest.raises(ServiceError):
            tail_of(api.JobOutputRequest(tail_bytes=bad))


def test_the_tail_of_the_owner_s_regular_file(tmp_path: Path) -> None:
    out = tmp_path / "job.out"
    out.write_bytes(b"".join(f"line {i}\n".encode() for i in range(1000)))
    data, size = read_tail(str(out), os.getuid(), 14)
    assert (data, size) == (b" 998\nline 999\n", out.stat().st_size)
    assert read_tail(str(out), os.getuid(), 1 << 30)[0] == out.read_bytes()[-(512 << 10):]


def test_a_link_a_fifo_or_another_s_file_is_not_read(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("root's")
    link = tmp_path / "job.out"
    link.symlink_to(secret)  # what a job could put in place of its output
    with pytest.raises(OutputUnreadable, match="cannot open"):
        read_tail(str(link), os.getuid(), 100)
    fifo = tmp_path / "fifo.out"
    os.mkfifo(fifo)
    done: list[str] = []
    reader = threading.Thread(target=lambda: done.append(_refusal(str(fifo))), daemon=True)
    reader.start()
    reader.join(10)
    assert done == [f"{fifo} is not a regular file"]  # and it did not hang on the FIFO
    with pytest.raises(OutputUnreadable, match="not the job owner's file"):
        read_tail(str(secret), os.getuid() + 1, 100)
    with pytest.raises(OutputUnreadable, match="no file"):
        read_tail(str(tmp_path / "missing"), os.getuid(), 100)
    # A device is never opened for reading (a watchdog's open arms it): only looked up.
    with pytest.raises(OutputUnreadable, match="not a regular file"):
        read_tail("/dev/null", os.stat("/dev/null").st_uid, 100)


def _refusal(path: str) -> str:
    try:
        read_tail(path, os.getuid(), 10)
    except OutputUnreadable as exc:
        return str(exc)
    return "read"


def test_no_component_of_the_path_is_followed_through_a_link(tmp_path: Path) -> None:
    """A link anywhere in the path is refused, named, before the file is looked at: the owner chose
    the path and could point a directory anywhere."""
    real = tmp_path / "real"
    real.mkdir()
    (real / "job.out").write_text("mine\n")
    (tmp_path / "via").symlink_to(real)
    assert read_tail(str(real / "job.out"), os.getuid(), 100) == (b"mine\n", 5)
    with pytest.raises(OutputUnreadable, match=f"{tmp_path}/via is a symbolic link"):
        read_tail(str(tmp_path / "via" / "job.out"), os.getuid(), 100)
    with pytest.raises(OutputUnreadable, match=f"{tmp_path}/via is a symbolic link"):
        read_tail(str(tmp_path / "via" / "missing.out"), os.getuid(), 100)  # same words: nothing on existence
    (real / "deeper").symlink_to(real)
    with pytest.raises(OutputUnreadable, match="deeper is a symbolic link"):
        read_tail(str(real / "deeper" / "job.out"), os.getuid(), 100)
    with pytest.raises(OutputUnreadable, match="Not a directory"):
        read_tail(str(real / "job.out" / "x"), os.getuid(), 100)
    with pytest.raises(OutputUnreadable, match="not an absolute path"):
        read_tail("relative/job.out", os.getuid(), 100)
    assert read_tail(str(real) + "/./job.out", os.getuid(), 3) == (b"ne\n", 5)
