"""Parsers for porcupine's test histories, read as porcupine's own test reads them.

- `test_data/kv/*.txt` (EDN maps, one a line): invoke and ok events of get,
  put and append, with :process; for `KvModel`.
- `test_data/jepsen/etcd_NNN.log` (Jepsen's log lines): invoke and ok of
  read, write and cas; `:fail :cas` is a cas that saw another value (an
  answer); `:fail :read :timed-out` completes a read whose result is
  unknown; `:info` (timed out: it may have taken effect) matches no rule, so
  the operation stays pending and completes at infinity; for `CasRegisterModel`.
Time is the line number: the logs carry the order of events, not their times.
An operation still pending at the end is unknown (porcupine's tests give it a
return after every other event, the same thing).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from soak.linear.checker import Operation

_KV_INVOKE = re.compile(
    r'\{:process (\d+), :type :invoke, :f :(get|put|append), :key "(.*)", :value (nil|"(.*)")\}')
_KV_OK = re.compile(r'\{:process (\d+), :type :ok, :f :(get|put|append), :key ".*", :value "(.*)"\}')

_J = r"^INFO\s+jepsen\.util\s+-\s+(\d+)\s+"
_J_INVOKE_READ = re.compile(_J + r":invoke\s+:read\s+nil$")
_J_INVOKE_WRITE = re.compile(_J + r":invoke\s+:write\s+(\d+)$")
_J_INVOKE_CAS = re.compile(_J + r":invoke\s+:cas\s+\[(\d+)\s+(\d+)\]$")
_J_OK_READ = re.compile(_J + r":ok\s+:read\s+(nil|\d+)$")
_J_OK_WRITE = re.compile(_J + r":ok\s+:write\s+(\d+)$")
_J_RETURN_CAS = re.compile(_J + r":(ok|fail)\s+:cas\s+\[(\d+)\s+(\d+)\]$")
_J_TIMEOUT_READ = re.compile(_J + r":fail\s+:read\s+:timed-out$")


@dataclass
class _Pending:
    index: int
    client: str
    input: dict[str, Any]
    call: float


class _Builder:
    """Matches returns to the calls of the same process, as porcupine's test parsers do."""

    def __init__(self) -> None:
        self.ops: list[Operation] = []
        self.pending: dict[str, _Pending] = {}
        self.count = 0

    def call(self, process: str, input: dict[str, Any], time: float) -> None:
        self.pending[process] = _Pending(self.count, process, input, time)
        self.count += 1

    def ret(self, process: str, output: dict[str, Any] | None, time: float) -> None:
        started = self.pending.pop(process, None)
        if started is None:
            raise ValueError(f"process {process} returns at line {int(time)} with nothing pending")
        self.ops.append(Operation(started.index, process, started.input, output, started.call, time,
                                  started.input["op"]))

    def finish(self) -> list[Operation]:
        for started in self.pending.values():
            self.ops.append(Operation(started.index, started.client, started.input, None, started.call,
                                      math.inf, started.input["op"]))
        self.pending.clear()
        return sorted(self.ops, key=lambda op: op.index)


def parse_kv(text: str) -> list[Operation]:
    built = _Builder()
    for number, line in enumerate(text.splitlines(), start=1):
        invoked = _KV_INVOKE.search(line)
        if invoked is not None:
            process, op, key, _, value = invoked.groups()
            input: dict[str, Any] = {"op": op, "key": key}
            if op != "get":
                input["value"] = value or ""
            built.call(process, input, float(number))
            continue
        done = _KV_OK.search(line)
        if done is not None:
            process, op, value = done.groups()
            built.ret(process, {"value": value} if op == "get" else {}, float(number))
    return built.finish()


def parse_jepsen(text: str) -> list[Operation]:
    built = _Builder()
    for number, line in enumerate(text.splitlines(), start=1):
        time = float(number)
        if m := _J_INVOKE_READ.match(line):
            built.call(m[1], {"op": "read"}, time)
        elif m := _J_INVOKE_WRITE.match(line):
            built.call(m[1], {"op": "write", "value": int(m[2])}, time)
        elif m := _J_INVOKE_CAS.match(line):
            built.call(m[1], {"op": "cas", "from": int(m[2]), "to": int(m[3])}, time)
        elif m := _J_OK_READ.match(line):
            built.ret(m[1], {"value": None if m[2] == "nil" else int(m[2])}, time)
        elif m := _J_OK_WRITE.match(line):
            built.ret(m[1], {}, time)
        elif m := _J_RETURN_CAS.match(line):
            built.ret(m[1], {"ok": m[2] == "ok"}, time)
        elif m := _J_TIMEOUT_READ.match(line):
            built.ret(m[1], None, time)  # a read that timed out: it returned, its value unknown
    return built.finish()


def parse_file(path: Path) -> list[Operation]:
    text = path.read_text(encoding="utf-8")
    return parse_jepsen(text) if path.suffix == ".log" else parse_kv(text)
