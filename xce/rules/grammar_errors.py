"""lark parse errors as people read them: the column (1-based) and what was expected there.

Shared by the languages of the command line (xce/rules/resreq.py for -R,
xce/rules/dependency_conditions.py for -w). Their
refusals are stored with the requests apply refused, so the words must not change between builds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

Refusal = Callable[[str, int], Exception]  # (message, column) -> the language's error


def parse(parser: Any, text: str, refusal: Refusal, words: Mapping[str, str]) -> Any:
    """`parser.parse(text)`, or the language's error saying where and what was expected."""
    import lark

    try:
        return parser.parse(text)
    except lark.exceptions.UnexpectedCharacters as exc:
        where = exc.pos_in_stream or 0
        raise refusal(f"unexpected {text[where:where + 1]!r}{expected(exc.allowed, words)}",
                      exc.column) from None
    except lark.exceptions.UnexpectedToken as exc:
        at_end = exc.token.type == "$END"
        found = "the end" if at_end else repr(str(exc.token))
        column = len(text) + 1 if at_end or not isinstance(exc.column, int) else exc.column
        raise refusal(f"unexpected {found}{expected(exc.expected, words)}", column) from None
    except lark.exceptions.UnexpectedEOF as exc:
        raise refusal(f"unexpected end{expected([str(t) for t in exc.expected], words)}",
                      len(text) + 1) from None


def expected(tokens: Iterable[str] | None, words: Mapping[str, str]) -> str:
    """'; expected a, b' from lark's token names, in the language's words."""
    named = sorted({words.get(t, t.lower().strip("_")) for t in tokens or () if not t.startswith("__")})
    return f"; expected {', '.join(named)}" if named else ""


def depth(tree: Any) -> int:
    """How deep `tree` nests (a lark tree; tokens are leaves), found without recursion: the builders
    that read a tree recurse, and a chain of 1,000 `!` would exhaust Python's stack in them."""
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, level = stack.pop()
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in getattr(node, "children", ()) if child is not None)
    return deepest


def check_depth(tree: Any, most: int, refusal: Refusal) -> None:
    if most and depth(tree) > most:
        raise refusal(f"nested more than {most} levels deep (operators such as ! inside one another)", 0)
