"""A linearizability checker for a sequential model: Wing & Gong's search with Lowe's memoisation.

Theory of operation (the algorithm porcupine implements; this is our own code
from the papers: Wing & Gong 1993, Lowe 2017, Horn & Kroening 2015):
- A history is a list of operations, each with an invocation and a
  completion time. One whose outcome is unknown (a timeout after sending)
  completes at +infinity: it may take effect at any time after its
  invocation, or never (it can be linearized last, where its effect is
  seen by nothing).
- The model is partitioned first (P-compositionality: `model.partition`
  splits the history into sub-histories over independent objects, each
  checked alone; the whole is linearizable iff every part is).
- The events of a part (calls and returns, by time; a call before a return
  at the same instant, so touching intervals count as concurrent) are kept
  in a doubly linked list. The search walks it from the front: a call is
  tried as the next linearization point (the model must accept it from the
  current state), lifted out of the list with its return, and the walk
  restarts at the front; reaching a return means the operation it closes
  cannot be left for later, so the last choice is undone (backtracking)
  and the walk goes on after it. An empty list is a linearization.
- Lowe's memoisation: a (set of linearized operations, model state) pair
  seen once is never explored again.
- Nondeterministic models (`step` returns several states) are searched as
  porcupine's NondeterministicModel does, by the powerset construction: the
  search state is the frozenset of every model state the prefix may have
  left; an operation is legal if the set it leads to is not empty.
- A time budget bounds the search: past it the verdict is "unknown".
- The parts are searched in turns (`check`): each search is resumable, and
  every part still undecided gets SLICE_S of search a turn, so one part
  whose search is long (linearizable or not) does not keep the checker
  from an illegal part it would decide at once (porcupine searches the
  parts in parallel and stops at the first illegal one). In porcupine's
  c50-bad history the first part was still undecided after 60 s while the
  second was illegal in 0.2 s.

For an illegal history, `reduce` finds a smaller sub-history whose failure
implies the original's (module docstring of `reduce`), and the longest
partial linearization the search found in it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

OK = "ok"
ILLEGAL = "illegal"
UNKNOWN = "unknown"  # the time budget ran out first

CLOCK_EVERY = 2048  # search steps between two looks at the clock
SLICE_S = 0.25  # search given to each undecided part a turn
STEP_CACHE_MAX = 200_000  # memoised step results kept per part (then the cache starts over)
FINAL_SEARCH_S = 10.0  # the search for the reduced history's longest linearization, past the reducer's budget


@dataclass(frozen=True)
class Operation:
    """One operation as the checker sees it. `output` None: its outcome is unknown (then ret is inf)."""

    index: int  # its place in the recorded history (negative: made up by the model's partition)
    client: str
    input: Any
    output: Any
    call: float
    ret: float = math.inf
    kind: str = ""

    @property
    def unknown(self) -> bool:
        return self.ret == math.inf


class Model(Protocol):
    """A sequential specification. States must be hashable and compare by value."""

    def init(self) -> Hashable: ...

    def step(self, state: Any, input: Any, output: Any) -> Sequence[Hashable]:
        """The states the operation may leave (several: nondeterminism); empty: illegal from `state`."""
        ...

    def partition(self, ops: Sequence[Operation]) -> list[list[Operation]]: ...

    def describe_operation(self, input: Any, output: Any) -> str: ...

    def describe_state(self, state: Any) -> str: ...

    def read_only(self, input: Any) -> bool:
        """True if the operation never changes the state (a pure observation): the reducer may drop it."""
        ...


class BaseModel:
    """Defaults for the optional parts of `Model`: one partition, plain descriptions, no reads known."""

    def partition(self, ops: Sequence[Operation]) -> list[list[Operation]]:
        return [list(ops)]

    def describe_operation(self, input: Any, output: Any) -> str:
        return f"{input!r} -> {'?' if output is None else repr(output)}"

    def describe_state(self, state: Any) -> str:
        return repr(state)

    def read_only(self, input: Any) -> bool:
        return False


@dataclass
class PartResult:
    verdict: str
    longest: list[Operation]  # the longest partial linearization seen, in order
    steps: int


@dataclass
class Result:
    verdict: str
    operations: int
    partitions: int
    elapsed_s: float
    timed_out_partitions: int = 0
    failing_partition: list[Operation] = field(default_factory=list)
    failing: list[Operation] = field(default_factory=list)  # the reduced failing sub-history
    linearization: list[Operation] = field(default_factory=list)  # longest partial one of `failing`
    reduced_fully: bool = False  # the reducer finished within its budget

    @property
    def ok(self) -> bool:
        return self.verdict == OK


def check(model: Model, ops: Sequence[Operation], budget_s: float | None = None,
          reduce_budget_s: float = 30.0, clock: Callable[[], float] = time.monotonic) -> Result:
    """Check a whole history: every partition, within `budget_s` (None: no bound); an illegal
    one is then reduced within `reduce_budget_s`."""
    start = clock()
    deadline = math.inf if budget_s is None else start + budget_s
    parts = model.partition(ops)
    searches = {k: _Search(model, part) for k, part in enumerate(parts)}
    while searches and clock() <= deadline:
        for k in list(searches):  # a turn: parts in order, each SLICE_S at most
            outcome = searches[k].run(min(deadline, clock() + SLICE_S), clock)
            if outcome.verdict == ILLEGAL:
                part = parts[k]
                failing, longest, complete = reduce(model, part, start_budget(clock, reduce_budget_s), clock)
                return Result(ILLEGAL, len(ops), len(parts), clock() - start, 0, list(part), failing,
                              longest, complete)
            if outcome.verdict == OK:
                del searches[k]
    verdict = UNKNOWN if searches else OK
    return Result(verdict, len(ops), len(parts), clock() - start, len(searches))


def start_budget(clock: Callable[[], float], seconds: float) -> float:
    return clock() + seconds


def check_part(model: Model, ops: Sequence[Operation], deadline: float = math.inf,
               clock: Callable[[], float] = time.monotonic) -> PartResult:
    """Wing & Gong's search with Lowe's cache over one partition (module docstring)."""
    search = _Search(model, ops)
    return search.run(deadline, clock)


class _Search:
    """The linked list of events and the search over it; nodes are numbered, 0 is the head."""

    def __init__(self, model: Model, ops: Sequence[Operation]) -> None:
        self.model = model
        self.ops = list(ops)
        n = len(self.ops)
        # Events by time; at one instant calls first (touching intervals are concurrent), then by op.
        events = sorted([(op.call, 0, i) for i, op in enumerate(self.ops)]
                        + [(op.ret, 1, i) for i, op in enumerate(self.ops)])
        self.end = 2 * n + 1
        self.nxt = [0] * (2 * n + 2)
        self.prv = [0] * (2 * n + 2)
        self.is_call = [False] * (2 * n + 2)
        self.op_of = [0] * (2 * n + 2)
        self.ret_of = [0] * (2 * n + 2)
        node_of_return = [0] * n
        for position, (_, is_return, i) in enumerate(events, start=1):
            self.is_call[position] = not is_return
            self.op_of[position] = i
            if is_return:
                node_of_return[i] = position
        for position in range(1, 2 * n + 1):
            if self.is_call[position]:
                self.ret_of[position] = node_of_return[self.op_of[position]]
        for position in range(2 * n + 1):
            self.nxt[position] = position + 1
            self.prv[position + 1] = position
        self.step_cache: dict[tuple[frozenset[Hashable], int], frozenset[Hashable]] = {}
        self._walk: Iterator[PartResult | None] | None = None
        self._longest: list[int] = []
        self._steps = 0

    def _unlink(self, node: int) -> None:
        self.nxt[self.prv[node]] = self.nxt[node]
        self.prv[self.nxt[node]] = self.prv[node]

    def _relink(self, node: int) -> None:
        self.nxt[self.prv[node]] = node
        self.prv[self.nxt[node]] = node

    def _lift(self, call: int) -> None:
        self._unlink(call)
        self._unlink(self.ret_of[call])

    def _unlift(self, call: int) -> None:  # the reverse order of `_lift` (dancing links)
        self._relink(self.ret_of[call])
        self._relink(call)

    def _step(self, states: frozenset[Hashable], i: int) -> frozenset[Hashable]:
        key = (states, i)
        found = self.step_cache.get(key)
        if found is None:
            op = self.ops[i]
            found = frozenset(s for state in states for s in self.model.step(state, op.input, op.output))
            if len(self.step_cache) >= STEP_CACHE_MAX:
                self.step_cache.clear()
            self.step_cache[key] = found
        return found

    def run(self, deadline: float, clock: Callable[[], float]) -> PartResult:
        """Search until a verdict or the deadline (then UNKNOWN); a later call goes on from where
        the last one stopped (the lifted links are the search's own state)."""
        if self._walk is None:
            self._walk = self._search()
        for result in self._walk:
            if result is not None:
                return result
            if clock() > deadline:
                return PartResult(UNKNOWN, self._ops(self._longest), self._steps)
        raise AssertionError("the search ended without a verdict")

    def _search(self) -> Iterator[PartResult | None]:
        """The search; yields None every CLOCK_EVERY steps (a chance to stop), then its verdict."""
        state: frozenset[Hashable] = frozenset([self.model.init()])
        linearized = 0
        seen: set[tuple[int, frozenset[Hashable]]] = set()
        stack: list[tuple[int, frozenset[Hashable]]] = []
        self._longest, self._steps = [], 0
        entry = self.nxt[0]
        while entry != self.end:
            self._steps += 1
            if self._steps % CLOCK_EVERY == 0:
                yield None
            if self.is_call[entry]:
                i = self.op_of[entry]
                after = self._step(state, i)
                bits = linearized | (1 << i)
                if after and (bits, after) not in seen:
                    seen.add((bits, after))
                    stack.append((entry, state))
                    state, linearized = after, bits
                    self._lift(entry)
                    if len(stack) > len(self._longest):
                        self._longest = [self.op_of[node] for node, _ in stack]
                    entry = self.nxt[0]
                else:
                    entry = self.nxt[entry]
                continue
            if not stack:
                yield PartResult(ILLEGAL, self._ops(self._longest), self._steps)
                return
            entry, state = stack.pop()
            linearized &= ~(1 << self.op_of[entry])
            self._unlift(entry)
            entry = self.nxt[entry]
        yield PartResult(OK, self._ops([self.op_of[node] for node, _ in stack]), self._steps)

    def _ops(self, indexes: list[int]) -> list[Operation]:
        return [self.ops[i] for i in indexes]


def truncate(ops: Sequence[Operation], cut: float) -> list[Operation]:
    """The history as it stood at time `cut`: operations invoked after it dropped, those not completed
    by it made unknown (they may or may not have taken effect)."""
    kept = []
    for op in ops:
        if op.call > cut:
            continue
        kept.append(op if op.ret <= cut else replace(op, output=None, ret=math.inf))
    return kept


def reduce(model: Model, ops: Sequence[Operation], deadline: float,
           clock: Callable[[], float] = time.monotonic) -> tuple[list[Operation], list[Operation], bool]:
    """A smaller failing sub-history of the illegal partition `ops`, each step keeping this property:
    if the sub-history is not linearizable, neither is `ops` (so it is a true witness).
    1. The shortest failing prefix in time: the history cut at a completion time (`truncate`); an
       operation pending at the cut becomes unknown. Cutting is monotone (a linearizable history
       stays so when cut), so a binary search over the completion times finds the earliest.
    2. Greedy deletion of pure observations (`model.read_only`), last first, while it still fails:
       dropping an observation from a linearization leaves it one. Writes are never dropped: without
       one, a correct history can fail.
    Returns the reduced history, its longest partial linearization, and whether all of it was done
    within the deadline (if not, what was reached so far: still a failing history)."""
    current = list(ops)

    def fails(candidate: list[Operation]) -> bool:
        return check_part(model, candidate, deadline, clock).verdict == ILLEGAL

    cuts = sorted({op.ret for op in current if op.ret != math.inf})
    low, high = 0, len(cuts)  # truncate at cuts[high] fails (high == len: the whole, known to fail)
    while low < high and clock() < deadline:
        middle = (low + high) // 2
        if fails(truncate(current, cuts[middle])):
            high = middle
        else:
            low = middle + 1
    if high < len(cuts):
        current = truncate(current, cuts[high])
    current = [op for op in current if not (op.unknown and model.read_only(op.input))]
    complete = low >= high
    for op in sorted(current, key=lambda o: o.call, reverse=True):
        if clock() >= deadline:
            complete = False
            break
        if not model.read_only(op.input):
            continue
        candidate = [o for o in current if o is not op]
        if fails(candidate):
            current = candidate
    longest = check_part(model, current, max(deadline, clock() + FINAL_SEARCH_S), clock).longest
    return sorted(current, key=lambda o: (o.call, o.index)), longest, complete
