"""tla/XceBarrier.tla is parsed, checked as far as a parser can, and mapped to tests.

TLC model-checks the spec (tests/tla/test_tlc.py); these checks are the fast
ones, with no JVM: it parses (the `tla` package from PyPI); every name it
uses is defined, bound or standard; every action of `Next` assigns every
variable; the names its .cfg checks are its operators. And it is tied to the code:
tla/README.md has a table row for every action of `Next` and every
invariant and property of the .cfg, naming the test rule or check that
implements it (`path::Qualified.name`), and each named thing must exist.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest

import tla

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "tla" / "XceBarrier.tla"
CONFIG = ROOT / "tla" / "XceBarrier.cfg"
README = ROOT / "tla" / "README.md"

STANDARD = {  # Integers, Sequences, FiniteSets and the language's own operator names
    "Nat", "Int", "BOOLEAN", "TRUE", "FALSE", "Len", "Append", "SubSeq", "Head", "Tail", "Seq",
    "Cardinality", "IsFiniteSet", "UNCHANGED", "DOMAIN", "SUBSET", "UNION", "ENABLED", "@",
    "Naturals", "Integers", "Sequences", "FiniteSets",
}
IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
BINDERS = ("Quantification", "SetComprehension", "Function", "SetSlice")


@cache
def module() -> Any:
    return tla.parse(SPEC.read_text())  # type: ignore[attr-defined]  # the package ships no stubs


def definitions() -> dict[str, Any]:
    return {u.name: u for u in module().units if type(u).__name__ == "OperatorDefinition"}


def declared(kind: str) -> set[str]:
    return {n.operator for u in module().units if type(u).__name__ == kind for n in u.names}


def _children(node: Any) -> Iterator[Any]:
    if isinstance(node, tuple) and hasattr(node, "_fields"):
        for name in node._fields:
            if name not in ("symbol", "start", "end"):
                yield getattr(node, name)
    elif isinstance(node, list | tuple):
        yield from node


def applications(node: Any) -> Iterator[Any]:
    if type(node).__name__ == "OperatorApplication":
        yield node
    for child in _children(node):
        yield from applications(child)


# ---------------------------------------------------------------- names


def _bound(declarations: list[Any]) -> tuple[set[str], list[Any]]:
    """Names a binder introduces, and the set expressions they range over."""
    names: set[str] = set()
    ranges = []
    for declaration in declarations:
        if declaration.operator == "\\in":
            target, over = declaration.arguments
            items = target.items if type(target).__name__ == "Tuple" else [target]
            names |= {item.operator for item in items}
            ranges.append(over)
        else:
            names.add(declaration.operator)
    return names, ranges


def unresolved(node: Any, scope: frozenset[str]) -> Iterator[tuple[str, int]]:
    """Identifiers used where nothing defines or binds them: (name, line)."""
    kind = type(node).__name__
    if kind in BINDERS:
        declarations = node.declaration if kind in ("Function", "SetSlice") else node.declarations
        names, ranges = _bound(declarations if isinstance(declarations, list) else [declarations])
        for over in ranges:
            yield from unresolved(over, scope)
        inner = scope | names
        for field in ("predicate", "item", "value"):
            if hasattr(node, field):
                yield from unresolved(getattr(node, field), inner)
        return
    if kind == "Let":
        inner = scope | {d.name for d in node.definitions}
        for definition in node.definitions:
            yield from unresolved(definition, inner)
        yield from unresolved(node.expression, inner)
        return
    if kind == "OperatorDefinition":
        params = {p.operator for p in node.arity or []}
        yield from unresolved(node.definiens, scope | params)
        return
    if kind == "OperatorApplication" and IDENTIFIER.match(node.operator) and node.operator not in scope \
            and node.operator not in STANDARD:
        yield node.operator, node.start.line
    for child in _children(node):
        if not isinstance(child, str):
            yield from unresolved(child, scope)


def test_the_spec_parses_and_every_name_is_defined_or_bound() -> None:
    scope = frozenset(definitions()) | declared("Constants") | declared("Variables")
    missing = sorted(set(unresolved(module(), scope)))
    assert not missing, f"undefined names in {SPEC.name}: {missing}"


# ---------------------------------------------------------------- actions assign every variable


def next_actions() -> list[str]:
    defs = definitions()
    return list(dict.fromkeys(a.operator for a in applications(defs["Next"].definiens) if a.operator in defs))


def _assigned(name: str, seen: frozenset[str] = frozenset()) -> set[str]:
    """Variables an operator primes or leaves UNCHANGED, through the operators it uses."""
    defs, variables = definitions(), declared("Variables")
    out: set[str] = set()
    for app in applications(defs[name].definiens):
        if app.operator == "'":
            out.add(app.arguments[0].operator)
        elif app.operator == "UNCHANGED":
            out |= _expand(app.arguments[0], variables)
        elif app.operator in defs and app.operator not in seen and app.operator != name:
            out |= _assigned(app.operator, seen | {name})
    return out


def _expand(node: Any, variables: set[str]) -> set[str]:
    defs = definitions()
    if type(node).__name__ == "Tuple":
        return set().union(*(_expand(item, variables) for item in node.items))
    if node.operator in variables:
        return {node.operator}
    return _expand(defs[node.operator].definiens, variables)


@pytest.mark.parametrize("action", next_actions())
def test_every_action_of_next_assigns_every_variable(action: str) -> None:
    variables = declared("Variables")
    assigned = _assigned(action)
    assert assigned == variables, f"{action} leaves {sorted(variables - assigned)} undefined"


# ---------------------------------------------------------------- the configuration


def config_names(section: str) -> list[str]:
    names, current = [], None
    for line in CONFIG.read_text().splitlines():
        words = line.split("\\*", 1)[0].split()
        if words and words[0].isupper():
            current, words = words[0], words[1:]
        if current in (section, section.rstrip("S")):
            names += words
    return names


def test_the_config_checks_spec_operators() -> None:
    defs = definitions()
    checked = config_names("INVARIANTS") + config_names("PROPERTIES") + config_names("SPECIFICATION")
    assert config_names("INVARIANTS") and config_names("PROPERTIES")
    assert [n for n in checked if n not in defs] == []


# ---------------------------------------------------------------- the mapping to tests


def mapped(text: str) -> dict[str, list[str]]:
    """README table rows: spec name -> the `path::name` references in the row."""
    rows: dict[str, list[str]] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if len(cells) >= 3 and (name := re.fullmatch(r"`(\w+)`", cells[0])):
            rows[name.group(1)] = re.findall(r"`([\w/.]+\.py::[\w.]+)`", " ".join(cells[2:]))
    return rows


def resolves(reference: str) -> bool:
    path, qualified = reference.split("::")
    if not (ROOT / path).is_file():
        return False
    name = path.removesuffix(".py").replace("/", ".")
    target: Any = importlib.import_module(name)
    for part in qualified.split("."):
        if not hasattr(target, part):
            return False
        target = getattr(target, part)
    return True


def unmapped(text: str) -> list[str]:
    """Spec actions, invariants and properties without a row, or whose row names nothing real."""
    rows = mapped(text)
    wanted = next_actions() + config_names("INVARIANTS") + config_names("PROPERTIES")
    problems = [f"{name}: no row" for name in wanted if not rows.get(name)]
    problems += [f"{name}: {ref} does not exist" for name in wanted for ref in rows.get(name, [])
                 if not resolves(ref)]
    return problems


def test_every_action_invariant_and_property_is_mapped_to_an_existing_test() -> None:
    assert unmapped(README.read_text()) == []


@pytest.mark.parametrize("name", ["Submit", "CommitApply", "NoDoubleRun", "EventuallyDispatched"])
def test_deleting_a_mapping_row_is_noticed(name: str) -> None:
    text = "\n".join(line for line in README.read_text().splitlines()
                     if not line.startswith(f"| `{name}` "))
    assert f"{name}: no row" in unmapped(text)


def test_a_row_naming_a_missing_test_is_noticed() -> None:
    text = README.read_text().replace("XceBarrierMachine.Submit`", "XceBarrierMachine.Sbumit`")
    assert any(p.startswith("Submit:") and "does not exist" in p for p in unmapped(text))


def test_the_machine_carries_the_spec_names() -> None:
    from protocol_sim.invariants import INVARIANTS

    from tests.sim.test_protocol_machine import XceBarrierMachine

    for action in next_actions():
        assert hasattr(XceBarrierMachine, action), f"no hypothesis rule named {action}"
    for invariant in config_names("INVARIANTS"):
        assert invariant in INVARIANTS and hasattr(XceBarrierMachine, invariant), invariant
