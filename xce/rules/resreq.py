"""The resource requirement language (`xce submit -R`), as LSF users write it.

    select[type == X86_64 && mem > 4000 && defined(gpu)] order[-slots:mem]
    rusage[mem=4000:gpu=1] span[ptile=4] same[type]

Sections, each at most once, in any order; a string with no section at all is
a select expression (`-R "mem > 4000"`, as LSF takes it):
- `select[expr]`: which hosts may run the job. Operators `|| && !` (also
  `or and not`), `== != > >= < <=` (`=` is `==`), `+ - * /`, parentheses,
  numbers, "strings", names, `defined(name)`. A name is a host attribute
  (`slots`, `maxmem`, `mem`, `ncpus`, ...), a numeric resource of the host,
  or a load index; one the host lacks is undefined, and a comparison with an
  undefined value is false, unless the name stands opposite a string, where
  it is taken as its own text: `type == X86_64` is `type == "X86_64"`.
- `order[[-]name:...]`: the hosts' order of preference, largest first for
  `-name`, smallest first otherwise.
- `rusage[name=amount:...]` (`,` separates too): consumables reserved on the
  host for the job's life.
- `span[hosts=1]` (all slots on one host) or `span[ptile=N]` (N per host).
- `same[name:...]`: every host of a parallel job has the same values.

Refusals are `RequirementError`, with the column (1-based) and what was
expected there. Bounds keep hostile input cheap: at most MAX_CHARS
characters and MAX_DEPTH nested parentheses.

Pure: parsing and evaluation read nothing but their arguments; the parser
(lark, LALR) is built on first use and is deterministic, so apply may use it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from xce.rules import grammar_errors

MAX_CHARS = 4096
MAX_DEPTH = 32
MAX_NESTING = 64  # levels of the parse tree: the leader refuses deeper (a `!` chain has no parentheses)

Value = float | str | bool
Expr = tuple[Any, ...]  # ("or"|"and", a, b) ("not", a) ("cmp", op, a, b) ("arith", op, a, b) ("neg", a)
#                         ("num", x) ("str", s) ("name", n) ("defined", n)

GRAMMAR = r"""
start: section+ -> sections
     | expr     -> bare

section: _SELECT "[" expr "]"                 -> select
       | _ORDER "[" [order_key (SEP order_key)*] "]" -> order
       | _RUSAGE "[" [usage (SEP usage)*] "]" -> rusage
       | _SPAN "[" NAME "=" NUMBER "]"         -> span
       | _SAME "[" NAME (SEP NAME)* "]"        -> same

order_key: SIGN? NAME
usage: NAME "=" NUMBER

?expr: or_
?or_: and_ (OR and_)*
?and_: not_ (AND not_)*
?not_: NOT not_ -> not_
     | cmp
?cmp: sum (COMP sum)?
?sum: product (ADD product)*
?product: unary (MUL unary)*
?unary: "-" unary -> neg
      | atom
?atom: NUMBER -> num
     | STRING -> str
     | _DEFINED "(" NAME ")" -> defined
     | NAME -> name
     | "(" expr ")"

// Keywords only where a section or defined() follows: select_me, defined_x are names.
_SELECT.2: /select(?=\s*\[)/
_ORDER.2: /order(?=\s*\[)/
_RUSAGE.2: /rusage(?=\s*\[)/
_SPAN.2: /span(?=\s*\[)/
_SAME.2: /same(?=\s*\[)/
_DEFINED.2: /defined(?=\s*\()/
OR: "||" | /or\b/
AND: "&&" | /and\b/
NOT: "!" | /not\b/
COMP: "==" | "!=" | ">=" | "<=" | ">" | "<" | "="
ADD: "+" | "-"
MUL: "*" | "/"
SIGN: "-" | "+"
SEP: ":" | ","
NAME.-1: /[A-Za-z_][A-Za-z0-9_.]*/
NUMBER: /\d+(\.\d+)?([eE][+-]?\d+)?/ | /\.\d+([eE][+-]?\d+)?/
STRING: /"[^"\\\n]*"/ | /'[^'\\\n]*'/
%ignore /[ \t]+/
"""

# The grammar entries of format 5 were checked with: its keywords were plain strings, so a name that
# starts with one (select_me, defined_x) was refused. Apply checks an entry of format 5 with it, so
# every replica refuses what, and as, the others did (the refusal's words are stored with its request).
GRAMMAR_5 = r"""
start: section+ -> sections
     | expr     -> bare

section: "select" "[" expr "]"                 -> select
       | "order" "[" [order_key (SEP order_key)*] "]" -> order
       | "rusage" "[" [usage (SEP usage)*] "]" -> rusage
       | "span" "[" NAME "=" NUMBER "]"         -> span
       | "same" "[" NAME (SEP NAME)* "]"        -> same

order_key: SIGN? NAME
usage: NAME "=" NUMBER

?expr: or_
?or_: and_ (OR and_)*
?and_: not_ (AND not_)*
?not_: NOT not_ -> not_
     | cmp
?cmp: sum (COMP sum)?
?sum: product (ADD product)*
?product: unary (MUL unary)*
?unary: "-" unary -> neg
      | atom
?atom: NUMBER -> num
     | STRING -> str
     | "defined" "(" NAME ")" -> defined
     | NAME -> name
     | "(" expr ")"

OR: "||" | /or\b/
AND: "&&" | /and\b/
NOT: "!" | /not\b/
COMP: "==" | "!=" | ">=" | "<=" | ">" | "<" | "="
ADD: "+" | "-"
MUL: "*" | "/"
SIGN: "-" | "+"
SEP: ":" | ","
NAME.-1: /[A-Za-z_][A-Za-z0-9_.]*/
NUMBER: /\d+(\.\d+)?([eE][+-]?\d+)?/ | /\.\d+([eE][+-]?\d+)?/
STRING: /"[^"\\\n]*"/ | /'[^'\\\n]*'/
%ignore /[ \t]+/
"""

# What lark calls the tokens it expected, in people's words.
_TOKEN_WORDS = {
    "NAME": "a name", "NUMBER": "a number", "STRING": "a string", "LSQB": "[", "RSQB": "]",
    "LPAR": "(", "RPAR": ")", "COMP": "a comparison (== != > >= < <=)", "OR": "||", "AND": "&&",
    "NOT": "!", "ADD": "+ or -", "MUL": "* or /", "SEP": ": or ,", "EQUAL": "=", "MINUS": "-",
    "SIGN": "- or +", "$END": "the end", "SELECT": "select[", "ORDER": "order[", "RUSAGE": "rusage[",
    "SPAN": "span[", "SAME": "same[", "DEFINED": "defined(", "_SELECT": "select[", "_ORDER": "order[",
    "_RUSAGE": "rusage[", "_SPAN": "span[", "_SAME": "same[", "_DEFINED": "defined(",
}
SECTIONS = ("select", "order", "rusage", "span", "same")


class RequirementError(ValueError):
    """A resource requirement that cannot be used; the message says where and why."""

    def __init__(self, message: str, column: int = 0) -> None:
        super().__init__(f"column {column}: {message}" if column else message)
        self.column = column


@dataclass(frozen=True)
class Requirement:
    select: Expr | None = None
    order: tuple[tuple[str, bool], ...] = ()  # (name, descending)
    rusage: tuple[tuple[str, float], ...] = ()  # sorted by name
    span_hosts: int = 0  # span[hosts=1]: 1; 0: no such section
    ptile: int = 0  # span[ptile=N]: N; 0: none
    same: tuple[str, ...] = ()

    def usage(self) -> dict[str, float]:
        return dict(self.rusage)


_PARSERS: dict[str, Any] = {}


def _parser(grammar: str = GRAMMAR) -> Any:
    parser = _PARSERS.get(grammar)
    if parser is None:
        import lark

        parser = _PARSERS[grammar] = lark.Lark(grammar, parser="lalr", maybe_placeholders=True,
                                               propagate_positions=True)
    return parser


def warm() -> None:
    """Build the parsers now (~0.1 s each), not inside the first apply that meets a requirement."""
    _parser()
    _parser(GRAMMAR_5)


@functools.lru_cache(maxsize=16384)  # jobs share a few requirement strings; a parse is ~0.3 ms
def parse(text: str, grammar: str = GRAMMAR, max_nesting: int = 0) -> Requirement:
    """The requirement `text` says (empty: none), or RequirementError saying where it is wrong.
    `grammar`: GRAMMAR_5 for entries of format 5 (see there). `max_nesting`: refuse one whose
    expressions nest deeper (the leader's check of what it takes: MAX_NESTING; apply reads what was
    taken as before, so an entry an older leader took is read alike)."""
    if len(text) > MAX_CHARS:
        raise RequirementError(f"longer than {MAX_CHARS} characters")
    if not text.strip():
        return Requirement()
    depth = deepest = 0
    for column, char in enumerate(text, 1):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth > MAX_DEPTH:
            raise RequirementError(f"more than {MAX_DEPTH} nested parentheses", column)
        deepest = max(deepest, depth)
    tree = grammar_errors.parse(_parser(grammar), text, RequirementError, _TOKEN_WORDS)
    grammar_errors.check_depth(tree, max_nesting, RequirementError)
    return _build(tree, text)


def _build(tree: Any, text: str) -> Requirement:
    if tree.data == "bare":
        return Requirement(select=_expr(tree.children[0]))
    fields: dict[str, Any] = {}
    for section in tree.children:
        kind = section.data
        if kind in fields or (kind == "span" and "span" in fields):
            raise RequirementError(f"{kind}[] given twice", _column(section))
        if kind == "select":
            fields["select"] = _expr(section.children[0])
        elif kind == "order":
            keys = [c for c in section.children if c is not None and getattr(c, "data", None) == "order_key"]
            fields["order"] = tuple((str(k.children[-1]), len(k.children) > 1 and str(k.children[0]) == "-")
                                    for k in keys)
        elif kind == "rusage":
            amounts: dict[str, float] = {}
            usages = [c for c in section.children if c is not None and getattr(c, "data", None) == "usage"]
            for usage in usages:
                name, amount = str(usage.children[0]), float(usage.children[1])
                if name in ("duration", "decay"):
                    raise RequirementError(f"rusage[] {name} is not supported (reservations last the job's "
                                           "life)", usage.children[0].column)
                if name in amounts:
                    raise RequirementError(f"rusage[] names {name} twice", usage.children[0].column)
                amounts[name] = amount
            fields["rusage"] = tuple(sorted(amounts.items()))
        elif kind == "span":
            name, number = section.children
            count = _count(number, f"span[{name}=]")
            if str(name) == "hosts":
                if count != 1:
                    raise RequirementError("span[hosts=] takes 1 (all slots on one host)", number.column)
                fields["span"] = {"span_hosts": 1}
            elif str(name) == "ptile":
                fields["span"] = {"ptile": count}
            else:
                raise RequirementError(f"span[] takes hosts=1 or ptile=N, not {name}", name.column)
        elif kind == "same":
            fields["same"] = tuple(str(c) for c in section.children if c is not None and c.type == "NAME")
    span = fields.pop("span", {})
    return Requirement(**fields, **span)


def _count(token: Any, what: str) -> int:
    value = float(token)
    if value != int(value) or not 1 <= value <= 1_000_000:
        raise RequirementError(f"{what} takes a whole number from 1 to 1,000,000, not {token}", token.column)
    return int(value)


def _column(node: Any) -> int:
    meta = getattr(node, "meta", None)
    return getattr(meta, "column", 0) or 0


def _expr(node: Any) -> Expr:
    import lark

    if isinstance(node, lark.Token):  # a lone NAME/NUMBER/STRING reduced to its token
        return _leaf(node.type, node)
    kind, children = node.data, [c for c in node.children if c is not None]
    if kind == "num":
        return ("num", float(children[0]))
    if kind == "str":
        return ("str", str(children[0])[1:-1])
    if kind == "name":
        return ("name", str(children[0]))
    if kind == "defined":
        return ("defined", str(children[0]))
    if kind == "neg":
        return ("neg", _expr(children[0]))
    if kind == "not_":
        return ("not", _expr(children[1]))
    if kind in ("or_", "and_", "sum", "product", "cmp"):
        # a op b op c ...: left to right
        result = _expr(children[0])
        for op, operand in zip(children[1::2], children[2::2], strict=True):
            result = _combine(kind, str(op), result, _expr(operand))
        return result
    raise RequirementError(f"cannot read {kind}")  # a grammar rule without a builder: a bug


def _leaf(kind: str, token: Any) -> Expr:
    if kind == "NUMBER":
        return ("num", float(token))
    if kind == "STRING":
        return ("str", str(token)[1:-1])
    return ("name", str(token))


def _combine(kind: str, op: str, a: Expr, b: Expr) -> Expr:
    if kind == "or_":
        return ("or", a, b)
    if kind == "and_":
        return ("and", a, b)
    if kind == "cmp":
        return ("cmp", "==" if op == "=" else op, a, b)
    return ("arith", op, a, b)


# ------------------------------------------------------------------ evaluation

_UNDEFINED = object()  # a name the host lacks: a comparison with it is false
_UNKNOWN = object()  # a name whose value is not known here (a load index at apply): neither true nor false


def matches(requirement: Requirement, host: Mapping[str, Value]) -> bool:
    """Whether `host` (its attributes, resources and load by name) passes select[]."""
    return requirement.select is None or evaluate(requirement.select, host) is True


def evaluate(expr: Expr, host: Mapping[str, Value], unknown: frozenset[str] = frozenset()) -> bool | None:
    """select[] on a host, in three values (Kleene's): True, False, or None when the answer hangs
    on a name in `unknown` (apply knows no load index, which only the planner reads: a select
    that hangs on one passes there)."""
    return _truth(_value(expr, host, unknown))


def names(expr: Expr | None) -> frozenset[str]:
    """Every name the expression reads (in defined() too)."""
    if expr is None:
        return frozenset()
    if expr[0] in ("name", "defined"):
        return frozenset((expr[1],))
    found: frozenset[str] = frozenset()
    for part in expr[1:]:
        if isinstance(part, tuple):
            found |= names(part)
    return found


def _truth(value: object) -> bool | None:
    if value is _UNKNOWN:
        return None
    if value is _UNDEFINED:
        return False
    return bool(value)


def _value(expr: Expr, host: Mapping[str, Value], unknown: frozenset[str]) -> object:
    kind = expr[0]
    if kind == "num" or kind == "str":
        return expr[1]
    if kind == "name":
        return _UNKNOWN if expr[1] in unknown else host.get(expr[1], _UNDEFINED)
    if kind == "defined":
        return _UNKNOWN if expr[1] in unknown else expr[1] in host
    if kind == "not":
        inner = _truth(_value(expr[1], host, unknown))
        return _UNKNOWN if inner is None else not inner
    if kind == "and" or kind == "or":
        a = _truth(_value(expr[1], host, unknown))
        if a is (kind == "or"):  # False and ..., True or ...: the other side is not read
            return a
        b = _truth(_value(expr[2], host, unknown))
        if b is (kind == "or"):
            return b
        return _UNKNOWN if a is None or b is None else b
    if kind == "neg":
        operand = _value(expr[1], host, unknown)
        if operand is _UNKNOWN:
            return _UNKNOWN
        return -float(operand) if _is_number(operand) else _UNDEFINED  # type: ignore[arg-type]
    if kind == "arith":
        left, right = _value(expr[2], host, unknown), _value(expr[3], host, unknown)
        if left is _UNKNOWN or right is _UNKNOWN:
            return _UNKNOWN
        if not (_is_number(left) and _is_number(right)):
            return _UNDEFINED
        x, y = float(left), float(right)  # type: ignore[arg-type]
        if expr[1] == "/":
            return x / y if y else _UNDEFINED
        return x + y if expr[1] == "+" else x - y if expr[1] == "-" else x * y
    if kind == "cmp":
        return _compare(expr[1], expr[2], expr[3], host, unknown)
    raise ValueError(f"not an expression: {kind}")


def _compare(op: str, left: Expr, right: Expr, host: Mapping[str, Value], unknown: frozenset[str]) -> object:
    a, b = _value(left, host, unknown), _value(right, host, unknown)
    if a is _UNKNOWN or b is _UNKNOWN:
        return _UNKNOWN
    # A bare word opposite a string is its own text (type == X86_64).
    if a is _UNDEFINED and left[0] == "name" and isinstance(b, str):
        a = left[1]
    if b is _UNDEFINED and right[0] == "name" and isinstance(a, str):
        b = right[1]
    if a is _UNDEFINED or b is _UNDEFINED:
        return False
    if isinstance(a, str) or isinstance(b, str):
        if not (isinstance(a, str) and isinstance(b, str)):
            return False
        x: Any = a
        y: Any = b
    else:
        x, y = float(a), float(b)  # type: ignore[arg-type]
    if op == "==":
        return bool(x == y)
    if op == "!=":
        return bool(x != y)
    if op == ">":
        return bool(x > y)
    if op == ">=":
        return bool(x >= y)
    if op == "<":
        return bool(x < y)
    return bool(x <= y)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float))  # bool is an int: defined() is 1 or 0, as in LSF


@functools.lru_cache(maxsize=4096)
def compiled(expr: Expr) -> Callable[[Mapping[str, Value]], bool]:
    """select[] as a function of a host, for when every name may be read (the planner, which calls
    it for thousands of hosts a pass): the same answers as `evaluate` with nothing unknown, without
    walking the tree each time (a test compares the two)."""
    value = _compiled(expr)
    return lambda host: _truth(value(host)) is True


Compiled = Callable[[Mapping[str, Value]], object]


def _compiled(expr: Expr) -> Compiled:
    compile_kind = _COMPILERS.get(expr[0])
    if compile_kind is None:
        raise ValueError(f"not an expression: {expr[0]}")
    return compile_kind(expr)


def _compiled_constant(expr: Expr) -> Compiled:
    constant = expr[1]
    return lambda host: constant


def _compiled_name(expr: Expr) -> Compiled:
    name = expr[1]
    return lambda host: host.get(name, _UNDEFINED)


def _compiled_defined(expr: Expr) -> Compiled:
    name = expr[1]
    return lambda host: name in host


def _compiled_not(expr: Expr) -> Compiled:
    inner = _compiled(expr[1])
    return lambda host: not _truth(inner(host))


def _compiled_and(expr: Expr) -> Compiled:
    left, right = _compiled(expr[1]), _compiled(expr[2])
    return lambda host: bool(_truth(left(host)) and _truth(right(host)))


def _compiled_or(expr: Expr) -> Compiled:
    left, right = _compiled(expr[1]), _compiled(expr[2])
    return lambda host: bool(_truth(left(host)) or _truth(right(host)))


def _compiled_neg(expr: Expr) -> Compiled:
    inner = _compiled(expr[1])

    def negated(host: Mapping[str, Value]) -> object:
        operand = inner(host)
        return -float(operand) if _is_number(operand) else _UNDEFINED  # type: ignore[arg-type]
    return negated


def _compiled_arith(expr: Expr) -> Compiled:
    op, left, right = expr[1], _compiled(expr[2]), _compiled(expr[3])

    def arith(host: Mapping[str, Value]) -> object:
        a, b = left(host), right(host)
        if not (_is_number(a) and _is_number(b)):
            return _UNDEFINED
        x, y = float(a), float(b)  # type: ignore[arg-type]
        if op == "/":
            return x / y if y else _UNDEFINED
        return x + y if op == "+" else x - y if op == "-" else x * y
    return arith


def _compiled_cmp(expr: Expr) -> Compiled:
    op, left_expr, right_expr = expr[1], expr[2], expr[3]
    left, right = _compiled(left_expr), _compiled(right_expr)
    left_word = left_expr[1] if left_expr[0] == "name" else None
    right_word = right_expr[1] if right_expr[0] == "name" else None

    def compare(host: Mapping[str, Value]) -> object:
        a, b = left(host), right(host)
        if a is _UNDEFINED and left_word is not None and isinstance(b, str):
            a = left_word
        if b is _UNDEFINED and right_word is not None and isinstance(a, str):
            b = right_word
        if a is _UNDEFINED or b is _UNDEFINED:
            return False
        if isinstance(a, str) or isinstance(b, str):
            if not (isinstance(a, str) and isinstance(b, str)):
                return False
            return _OPS[op](a, b)
        return _OPS[op](float(a), float(b))  # type: ignore[arg-type]
    return compare


_COMPILERS: dict[str, Callable[[Expr], Compiled]] = {
    "num": _compiled_constant, "str": _compiled_constant, "name": _compiled_name,
    "defined": _compiled_defined, "not": _compiled_not, "and": _compiled_and, "or": _compiled_or,
    "neg": _compiled_neg, "arith": _compiled_arith, "cmp": _compiled_cmp}


_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "==": lambda x, y: bool(x == y), "!=": lambda x, y: bool(x != y), ">": lambda x, y: bool(x > y),
    ">=": lambda x, y: bool(x >= y), "<": lambda x, y: bool(x < y), "<=": lambda x, y: bool(x <= y)}


_PRECEDENCE = {"or": 1, "and": 2, "not": 3, "cmp": 4, "+": 5, "-": 5, "*": 6, "/": 6, "neg": 7}


def show(expr: Expr, outer: int = 0) -> str:
    """The expression written back, with only the parentheses it needs (for pending reasons)."""
    kind = expr[0]
    if kind == "num":
        return f"{expr[1]:g}"
    if kind == "str":
        return f'"{expr[1]}"'
    if kind == "name":
        return str(expr[1])
    if kind == "defined":
        return f"defined({expr[1]})"
    if kind == "not":
        text, level = "!" + show(expr[1], _PRECEDENCE["not"]), _PRECEDENCE["not"]
    elif kind == "neg":
        text, level = "-" + show(expr[1], _PRECEDENCE["neg"]), _PRECEDENCE["neg"]
    elif kind in ("and", "or"):
        level = _PRECEDENCE[kind]
        text = f"{show(expr[1], level)} {'&&' if kind == 'and' else '||'} {show(expr[2], level + 1)}"
    elif kind == "cmp":
        level = _PRECEDENCE["cmp"]
        text = f"{show(expr[2], level + 1)}{expr[1]}{show(expr[3], level + 1)}"
    else:  # arith
        level = _PRECEDENCE[expr[1]]
        text = f"{show(expr[2], level)}{expr[1]}{show(expr[3], level + 1)}"
    return f"({text})" if level < outer else text


# ------------------------------------------------------------------ queue and job

def merge(queue: Requirement, job: Requirement) -> Requirement:
    """A queue's requirement with a job's, as LSF merges them: both select[]s must hold; the job's
    order[], span[] and same[] win where it gives them; rusage[] per resource, the job's amount
    where it names one."""
    if queue.select is None:
        select = job.select
    elif job.select is None:
        select = queue.select
    else:
        select = ("and", queue.select, job.select)
    usage = {**queue.usage(), **job.usage()}
    has_span = job.span_hosts or job.ptile
    return Requirement(select=select, order=job.order or queue.order, rusage=tuple(sorted(usage.items())),
                       span_hosts=job.span_hosts if has_span else queue.span_hosts,
                       ptile=job.ptile if has_span else queue.ptile, same=job.same or queue.same)
