"""Porcupine's test models, for the agreement check: a key-value store and a compare-and-set register.

- `KvModel`: get/put/append on string keys, each key an independent
  object (partitioned by key, as porcupine's kv test does); the state of a
  key is its string value, "" when never written.
- `CasRegisterModel`: the register of porcupine's Jepsen etcd test: read,
  write, cas(from, to); its state is an int or None (nil). A cas that
  answered "fail" saw another value; one whose outcome is unknown takes
  effect if its `from` matched.
An operation's input is a dict with "op"; its output None when unknown.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from typing import Any

from soak.linear.checker import BaseModel, Operation
from soak.linear.history import Op


class KvModel(BaseModel):
    def init(self) -> Hashable:
        return ""

    def step(self, state: Any, input: Any, output: Any) -> Sequence[Hashable]:
        op = input["op"]
        if op == "get":
            return [state] if output is None or output.get("value") == state else []
        if op == "put":
            return [input["value"]]
        if op == "append":
            return [state + input["value"]]
        raise ValueError(f"unknown kv operation {op!r}")

    def partition(self, ops: Sequence[Operation]) -> list[list[Operation]]:
        by_key: dict[str, list[Operation]] = {}
        for op in ops:
            by_key.setdefault(op.input["key"], []).append(op)
        return [by_key[key] for key in sorted(by_key)]

    def describe_operation(self, input: Any, output: Any) -> str:
        key = input["key"]
        if input["op"] == "get":
            return f"get({key!r}) -> {'?' if output is None else repr(output.get('value'))}"
        return f"{input['op']}({key!r}, {input['value']!r})"

    def read_only(self, input: Any) -> bool:
        return bool(input["op"] == "get")


class CasRegisterModel(BaseModel):
    def init(self) -> Hashable:
        return None

    def step(self, state: Any, input: Any, output: Any) -> Sequence[Hashable]:
        op = input["op"]
        if op == "read":
            return [state] if output is None or output.get("value") == state else []
        if op == "write":
            return [input["value"]]
        if op == "cas":
            matched = state == input["from"]
            after = input["to"] if matched else state
            if output is None or bool(output.get("ok")) == matched:
                return [after]
            return []
        raise ValueError(f"unknown register operation {op!r}")

    def describe_operation(self, input: Any, output: Any) -> str:
        op = input["op"]
        if op == "read":
            return f"read() -> {'?' if output is None else output.get('value')}"
        if op == "write":
            return f"write({input['value']})"
        answer = "?" if output is None else ("ok" if output.get("ok") else "fail")
        return f"cas({input['from']}, {input['to']}) -> {answer}"

    def read_only(self, input: Any) -> bool:
        return bool(input["op"] == "read")


def kv_operations(history: Sequence[Op]) -> list[Operation]:
    """A recorded history of get/put/append (kind; input key, value; output value) for `KvModel`;
    failed operations (no effect, no observation) are left out."""
    ops = []
    for op in history:
        if op.status == "fail":
            continue
        known = op.status == "ok" and op.complete_ns is not None
        ret = float(op.complete_ns) if known and op.complete_ns is not None else math.inf
        ops.append(Operation(op.index, op.client, {"op": op.kind, **op.input}, op.output if known else None,
                             float(op.invoke_ns), ret, op.kind))
    return ops
