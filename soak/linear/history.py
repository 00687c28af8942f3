"""The client history: every operation a client invoked, with its outcome, recorded as it happens.

One client is one sequential process (as in porcupine and Jepsen): it invokes
an operation, waits for its outcome, then may invoke the next. An outcome is
- ok: it completed with a result (a definite refusal such as
  FAILED_PRECONDITION is a result too: an observation of the state);
- fail: it definitely did not take effect and observed nothing;
- unknown: a timeout or an unavailable server after the request was sent:
  it may have taken effect at any time after its invocation, or never. The
  checker gives it an infinite completion time, whenever the client gave up.
An operation still pending when the history is read counts as unknown.

The file is JSON lines, written as operations are invoked and as they
complete (so a crash leaves the invoked ones, which then count as unknown):
  {"event": "invoke", "index": 3, "client": "load-2", "kind": "get", "input": {...}, "invoke_ns": ...}
  {"event": "complete", "index": 3, "status": "ok", "output": {...}, "complete_ns": ...}
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

STATUSES = ("ok", "fail", "unknown")


@dataclass
class Op:
    client: str
    kind: str
    input: dict[str, Any]
    invoke_ns: int
    output: dict[str, Any] | None = None
    complete_ns: int | None = None
    status: str = "unknown"  # until it completes: pending, which counts as unknown
    index: int = 0
    _history: History | None = field(default=None, repr=False, compare=False)

    @property
    def pending(self) -> bool:
        return self.complete_ns is None

    def ok(self, output: dict[str, Any]) -> None:
        """It completed with this result."""
        self._complete("ok", output)

    def fail(self, output: dict[str, Any]) -> None:
        """It definitely did not take effect (INVALID_ARGUMENT, say)."""
        self._complete("fail", output)

    def unknown(self, error: str) -> None:
        """Its outcome is unknown (a timeout or UNAVAILABLE after sending)."""
        self._complete("unknown", {"error": error})

    def _complete(self, status: str, output: dict[str, Any]) -> None:
        if self._history is None:
            raise RuntimeError(f"operation {self.index} belongs to no history")
        self._history._complete(self, status, output)

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "client": self.client, "kind": self.kind, "input": self.input,
                "output": self.output, "invoke_ns": self.invoke_ns, "complete_ns": self.complete_ns,
                "status": self.status}


class History:
    """Thread-safe: any number of clients record into one history. `path`, if given, is created anew."""

    def __init__(self, path: Path | None = None, *, clock: Callable[[], int] = time.monotonic_ns) -> None:
        self._lock = threading.Lock()
        self._ops: list[Op] = []
        self._pending: dict[str, Op] = {}  # client -> its operation not yet completed
        self._clock = clock
        self._file: TextIO | None = path.open("w", encoding="utf-8") if path is not None else None

    def invoke(self, client: str, kind: str, input: dict[str, Any]) -> Op:
        with self._lock:
            if client in self._pending:
                raise RuntimeError(f"client {client!r} invoked {kind} before its "
                                   f"{self._pending[client].kind} completed")
            op = Op(client, kind, dict(input), self._clock(), index=len(self._ops), _history=self)
            self._ops.append(op)
            self._pending[client] = op
            self._write({"event": "invoke", "index": op.index, "client": client, "kind": kind,
                         "input": op.input, "invoke_ns": op.invoke_ns})
            return op

    def _complete(self, op: Op, status: str, output: dict[str, Any]) -> None:
        with self._lock:
            if not op.pending:
                raise RuntimeError(f"operation {op.index} ({op.kind}) completed twice")
            op.complete_ns = max(self._clock(), op.invoke_ns)
            op.status, op.output = status, dict(output)
            del self._pending[op.client]
            self._write({"event": "complete", "index": op.index, "status": status, "output": op.output,
                         "complete_ns": op.complete_ns})

    def operations(self) -> list[Op]:
        with self._lock:
            return list(self._ops)

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def _write(self, record: dict[str, Any]) -> None:
        if self._file is not None:
            self._file.write(json.dumps(record, sort_keys=True) + "\n")
            self._file.flush()


def load(path: Path) -> list[Op]:
    """The operations of a history file, by index; one never completed is pending (unknown). A torn
    last line (the writer was killed mid-write) is ignored."""
    ops: dict[int, Op] = {}
    lines = path.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines):
                break
            raise ValueError(f"{path}:{number}: not JSON") from None
        _apply(ops, record, f"{path}:{number}")
    return [ops[i] for i in sorted(ops)]


def _apply(ops: dict[int, Op], record: dict[str, Any], where: str) -> None:
    event, index = record.get("event"), record.get("index")
    if not isinstance(index, int):
        raise ValueError(f"{where}: no index")
    if event == "invoke":
        if index in ops:
            raise ValueError(f"{where}: operation {index} invoked twice (two histories in one file?)")
        ops[index] = Op(str(record["client"]), str(record["kind"]), dict(record.get("input") or {}),
                        int(record["invoke_ns"]), index=index)
    elif event == "complete":
        op = ops.get(index)
        if op is None:
            raise ValueError(f"{where}: completes operation {index}, never invoked")
        if record["status"] not in STATUSES:
            raise ValueError(f"{where}: unknown status {record['status']!r}")
        op.status, op.output = record["status"], record.get("output")
        op.complete_ns = int(record["complete_ns"])
    else:
        raise ValueError(f"{where}: unknown event {event!r}")
