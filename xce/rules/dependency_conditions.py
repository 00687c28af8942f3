"""Job dependency conditions (`xce submit -w`), as LSF users write them.

    -w "done(12) && (exit(13, != 0) || ended(14))"
    -w "numdone(17, >= 100) || done(18[3])"      -w "12"   (done(12))

Conditions on a job (a job id, an array's element `17[3]`, or a whole array
`17` or `17[*]`, meaning every element):
- `done(J)`: it ended DONE; `exit(J)`: it ended EXIT, with `exit(J, N)` or
  `exit(J, OP N)` on its exit code (OP one of == != > >= < <=);
- `ended(J)`: it ended either way; `started(J)`: it is past pending, as LSF
  has it: RUN, stopped, DONE or EXIT (a job killed while pending included);
- a bare `J` is `done(J)`, as in LSF.
Counts over an array's elements: `numdone(A, OP N)`, `numexit`, `numended`,
`numstart`, `numrun`, `numpend`; `*` instead of `OP N` means all elements.
Operators `&&`, `||`, `!` (also `and`, `or`, `not`) and parentheses.

Evaluation (`evaluate`) says whether the condition holds now and whether it
is settled: it can no longer change, because the jobs it reads have ended.
A condition that does not hold and is settled is never satisfied
(DEPENDENCY_NEVER_SATISFIED); one that does not hold yet is pending
(DEPENDENCY_PENDING). `!` reads the present, as LSF's does: `!done(12)`
holds while 12 runs, and is settled once 12 has ended.

Refusals are `DependencyError`, with the column (1-based) and what was
expected there. Bounds keep hostile input cheap: at most MAX_CHARS
characters, MAX_DEPTH nested parentheses, MAX_REFERENCES job references.

Pure: parsing and evaluation read nothing but their arguments (the jobs'
facts come through `lookup`), so apply may use them.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from xce.rules import grammar_errors

MAX_CHARS = 4096
MAX_DEPTH = 32
MAX_NESTING = 64  # levels of the parse tree: the leader refuses deeper (a `!` chain has no parentheses)
MAX_REFERENCES = 256

GRAMMAR = r"""
?start: expr
?expr: or_
?or_: and_ (OR and_)*
?and_: not_ (AND not_)*
?not_: NOT not_ -> not_
     | atom
?atom: CONDITION "(" ref ["," code] ")" -> condition
     | COUNTER "(" JOB "," count ")"    -> counter
     | ref                              -> bare
     | "(" expr ")"

ref: JOB ["[" (INDEX | STAR) "]"]
code: [COMP] INT
count: COMP INT | STAR

CONDITION.2: /(done|exit|ended|started)(?=\s*\()/
COUNTER.2: /num(done|exit|ended|start|run|pend)(?=\s*\()/
OR: "||" | /or\b/
AND: "&&" | /and\b/
NOT: "!" | /not\b/
COMP: "==" | "!=" | ">=" | "<=" | ">" | "<" | "="
JOB: /[1-9][0-9]{0,17}/
INDEX: /[0-9]{1,9}/
INT: /-?[0-9]{1,9}/
STAR: "*"
%ignore /[ \t]+/
"""

_TOKEN_WORDS = {"CONDITION": "done(, exit(, ended( or started(", "COUNTER": "numdone( ...",
                "JOB": "a job id", "INDEX": "an element index", "INT": "a number", "STAR": "*",
                "COMP": "a comparison (== != > >= < <=)", "LPAR": "(", "RPAR": ")", "LSQB": "[",
                "RSQB": "]", "COMMA": "a comma", "OR": "||", "AND": "&&", "NOT": "!", "$END": "the end"}

_OPS: dict[str, Callable[[int, int], bool]] = {
    "==": operator.eq, "=": operator.eq, "!=": operator.ne, ">": operator.gt, ">=": operator.ge,
    "<": operator.lt, "<=": operator.le}

Expr = tuple[Any, ...]
# ("or"|"and", a, b) ("not", a) ("cond", kind, job, index, op, code) ("count", kind, job, op, n)
# index: None (the job, or a whole array), an int (one element), or "*" (every element)
# op/code: None when not given; count's op "*" means all elements


class DependencyError(ValueError):
    """A dependency condition that cannot be used; the message says where and why."""

    def __init__(self, message: str, column: int = 0) -> None:
        super().__init__(f"column {column}: {message}" if column else message)
        self.column = column


@dataclass(frozen=True)
class Facts:
    """What a condition reads of one job (or of every element of an array in one state)."""

    state: str  # PEND, PSUSP, RUN, USUSP, SSUSP, UNKWN, DONE, EXIT
    exit_code: int = 0


FINISHED = frozenset({"DONE", "EXIT"})
RUNNING = frozenset({"RUN", "USUSP", "SSUSP", "UNKWN"})
PENDING = frozenset({"PEND", "PSUSP"})

# The facts of a job id with how many jobs they stand for: one for a job or an element (`index`
# given), groups covering every element of an array (`index` None or "*"; an array of a million
# elements is a few groups by state), None if no such job is known (live or in history).
Group = tuple[Facts, int]
Lookup = Callable[[int, "int | str | None"], Sequence[Group] | None]


class Verdict(Enum):
    SATISFIED = "satisfied"
    PENDING = "pending"
    NEVER = "never satisfied"


@functools.lru_cache(maxsize=4096)
def parse(text: str, max_nesting: int = 0) -> Expr:
    """The condition `text` says, or DependencyError saying where it is wrong. `max_nesting`: refuse
    one that nests deeper (the leader's check: MAX_NESTING; apply reads what was taken as before)."""
    if len(text) > MAX_CHARS:
        raise DependencyError(f"longer than {MAX_CHARS} characters")
    if not text.strip():
        raise DependencyError("empty: name a condition, as in done(12)")
    depth = 0
    for column, char in enumerate(text, 1):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth > MAX_DEPTH:
            raise DependencyError(f"more than {MAX_DEPTH} nested parentheses", column)
    tree = grammar_errors.parse(_parser(), text, DependencyError, _TOKEN_WORDS)
    grammar_errors.check_depth(tree, max_nesting, DependencyError)
    expr = _build(tree)
    if len(references(expr)) > MAX_REFERENCES:
        raise DependencyError(f"more than {MAX_REFERENCES} job references")
    return expr


@functools.cache
def _parser() -> Any:
    import lark

    return lark.Lark(GRAMMAR, parser="lalr", maybe_placeholders=True, propagate_positions=True)


def _build(node: Any) -> Expr:
    kind = node.data
    if kind in ("or_", "and_"):
        parts = [_build(child) for child in node.children if not _is_token(child)]
        result = parts[0]
        for part in parts[1:]:
            result = ("or" if kind == "or_" else "and", result, part)
        return result
    if kind == "not_":
        return ("not", _build(node.children[-1]))
    if kind == "bare":
        job, index = _ref(node.children[0])
        return ("cond", "done", job, index, None, None)
    if kind == "condition":
        word, ref, code = node.children
        job, index = _ref(ref)
        op, value = None, None
        if code is not None:
            given_op, number = code.children
            op, value = str(given_op) if given_op is not None else "==", int(number)
            if str(word) != "exit":
                raise DependencyError(f"{word}() takes no exit code; exit(J, OP N) does",
                                      code.meta.column)
        return ("cond", str(word), job, index, op, value)
    if kind == "counter":
        word, job, count = node.children
        if len(count.children) == 1:  # *
            return ("count", str(word)[3:], int(job), "*", None)
        op, number = count.children
        if int(number) < 0:
            raise DependencyError("a count is never negative", count.meta.column)
        return ("count", str(word)[3:], int(job), str(op), int(number))
    raise AssertionError(f"unexpected node {kind}")  # the grammar has no other


def _is_token(child: Any) -> bool:
    return not hasattr(child, "data")


def _ref(node: Any) -> tuple[int, int | str | None]:
    job, index = node.children
    if index is None:
        return int(job), None
    return int(job), "*" if str(index) == "*" else int(index)


@functools.lru_cache(maxsize=4096)
def references_of(text: str) -> frozenset[int]:
    """Every job id a held condition's text reads; none for a text that does not parse (refused at
    submit: a job never holds one). Cached: a pending job's condition is read at each write of it."""
    try:
        return references(parse(text))
    except DependencyError:
        return frozenset()


def references(expr: Expr) -> frozenset[int]:
    """Every job id the condition reads (to check at submit that each is known)."""
    if expr[0] in ("or", "and"):
        return references(expr[1]) | references(expr[2])
    if expr[0] == "not":
        return references(expr[1])
    return frozenset((expr[2],))


def evaluate(expr: Expr, lookup: Lookup) -> Verdict:
    """SATISFIED (the job may run now), PENDING, or NEVER (it can no longer be met)."""
    now, settled = _holds(expr, lookup)
    return Verdict.SATISFIED if now else Verdict.NEVER if settled else Verdict.PENDING


def _holds(expr: Expr, lookup: Lookup) -> tuple[bool, bool]:
    """(whether it holds now, whether that can no longer change)."""
    kind = expr[0]
    if kind == "not":
        now, settled = _holds(expr[1], lookup)
        return not now, settled
    if kind in ("and", "or"):
        a_now, a_settled = _holds(expr[1], lookup)
        b_now, b_settled = _holds(expr[2], lookup)
        decisive = (not a_now) if kind == "and" else a_now  # a settled operand that decides alone
        b_decisive = (not b_now) if kind == "and" else b_now
        now = (a_now and b_now) if kind == "and" else (a_now or b_now)
        return now, (a_settled and b_settled) or (a_settled and decisive) or (b_settled and b_decisive)
    facts = lookup(expr[2], expr[3] if kind == "cond" else None)
    if facts is None:  # a job that left history: what it was can no longer be known
        return False, True
    if kind == "cond":
        return _condition(expr[1], facts, expr[4], expr[5])
    return _count(expr[1], facts, expr[3], expr[4])


def _condition(kind: str, groups: Sequence[Group], op: str | None, code: int | None) -> tuple[bool, bool]:
    """Every job of `groups` (a job, or each element of an array) meets the condition."""
    results = [_one(kind, f, op, code) for f, n in groups if n > 0]
    now = all(r[0] for r in results)
    # All hold and stay so, or one fails for good: settled.
    settled = all(r[0] and r[1] for r in results) or any(not r[0] and r[1] for r in results)
    return now, settled


def _one(kind: str, facts: Facts, op: str | None, code: int | None) -> tuple[bool, bool]:
    ended = facts.state in FINISHED
    if kind == "done":
        return facts.state == "DONE", ended
    if kind == "exit":
        matches = facts.state == "EXIT" and (op is None or code is None or _OPS[op](facts.exit_code, code))
        return matches, ended
    if kind == "ended":
        return ended, ended
    started = facts.state not in PENDING
    return started, ended  # a requeue takes a running job back to pending


_COUNTED: dict[str, Callable[[Facts], bool]] = {
    "done": lambda f: f.state == "DONE",
    "exit": lambda f: f.state == "EXIT",
    "ended": lambda f: f.state in FINISHED,
    "start": lambda f: f.state not in PENDING,
    "run": lambda f: f.state in RUNNING,
    "pend": lambda f: f.state in PENDING,
}
_GROWS = frozenset({"done", "exit", "ended", "start"})  # counts that only grow


def _count(kind: str, groups: Sequence[Group], op: str, n: int | None) -> tuple[bool, bool]:
    count = sum(k for f, k in groups if _COUNTED[kind](f))
    if op == "*":
        op, n = "==", sum(k for _, k in groups)
    assert n is not None
    relation = _OPS[op]
    now = relation(count, n)
    if all(f.state in FINISHED for f, k in groups if k > 0):
        return now, True
    if kind not in _GROWS:
        return now, False
    # It can still grow by the elements not counted that have not ended: settled if the relation
    # has the same answer over every count it may reach.
    most = count + sum(k for f, k in groups if not _COUNTED[kind](f) and f.state not in FINISHED)
    return now, all(relation(c, n) == now for c in _reachable(count, most, n))


def _reachable(low: int, high: int, n: int) -> Iterable[int]:
    """The counts between low and high where a comparison with n can change its answer."""
    return sorted({low, high, *(c for c in (n - 1, n, n + 1) if low <= c <= high)})


def show(expr: Expr, outer: int = 0) -> str:
    """The condition in canonical form (for reasons and `xce job`)."""
    kind = expr[0]
    if kind in ("or", "and"):
        level = 1 if kind == "or" else 2
        text = f"{show(expr[1], level)} {'||' if kind == 'or' else '&&'} {show(expr[2], level)}"
        return f"({text})" if outer > level else text
    if kind == "not":
        return f"!{show(expr[1], 3)}"
    if kind == "cond":
        _, word, job, index, op, code = expr
        ref = f"{job}" if index is None else f"{job}[{index}]"
        return f"{word}({ref}, {op} {code})" if op is not None else f"{word}({ref})"
    _, word, job, op, n = expr
    return f"num{word}({job}, *)" if op == "*" else f"num{word}({job}, {op} {n})"
