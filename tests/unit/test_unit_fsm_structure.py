"""The state machine's modules import one another without a circle, and each entry format is defined once.

- The imports among controller/fsm/*.py (type-only ones and imports inside functions included: a
  circle is not dodged by importing late) form no cycle: the applier calls the derived state
  (arrays, history, dependencies, fair share) through the table registered in
  controller/fsm/__init__.py (DERIVED), so those modules may import the applier.
- Every entry format is defined in controller/fsm/versions.py only: elsewhere a `*FORMAT` name is
  imported from there, never named again. And the table of derived state is what the applier runs.
"""

from __future__ import annotations

import ast
from pathlib import Path

from controller import fsm
from controller.fsm import arrays, chunks, depends, shares

ROOT = Path(__file__).resolve().parents[2]
FSM = ROOT / "controller" / "fsm"
PRODUCT = ("controller", "scheduler", "worker", "xce", "gateway", "simulator")


def _fsm_imports(path: Path) -> set[str]:
    """The fsm modules `path` imports, wherever it does (type-only and late imports count)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "controller.fsm":
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("controller.fsm."):
            found.add(node.module.split(".")[2])  # type: ignore[union-attr]
    return found


def test_the_fsm_modules_import_one_another_without_a_circle() -> None:
    graph = {path.stem: _fsm_imports(path) for path in FSM.glob("*.py") if path.stem != "__init__"}
    state: dict[str, str] = {}  # "open" while on the path, "done" after

    def visit(module: str, path: list[str]) -> None:
        if state.get(module) == "done":
            return
        assert state.get(module) != "open", "an import circle: " + " -> ".join([*path, module])
        state[module] = "open"
        for imported in sorted(graph.get(module, ())):
            visit(imported, [*path, module])
        state[module] = "done"

    for module in sorted(graph):
        visit(module, [])
    assert not {"arrays", "depends", "shares"} & graph["applier"]


def test_each_format_constant_is_defined_in_versions_only() -> None:
    found = []
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == FSM / "versions.py" or "/v1/" in str(path):
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                targets = node.targets if isinstance(node, ast.Assign) else \
                    [node.target] if isinstance(node, ast.AnnAssign) else []
                for target in targets:
                    if isinstance(target, ast.Name) and target.id.endswith("FORMAT") and target.id.isupper():
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {target.id}")
    assert not found, "define entry formats in controller/fsm/versions.py:\n" + "\n".join(found)


def test_the_derived_state_table_is_the_one_apply_uses() -> None:
    assert fsm.DERIVED.follow[0] is arrays.follow  # before history, which forgets a job live again
    assert depends.follow in fsm.DERIVED.follow and shares.follow in fsm.DERIVED.follow
    assert chunks.follow in fsm.DERIVED.follow
    # A chunk's next job first: its start writes its array's record and moves dependencies.
    assert fsm.DERIVED.settle == (chunks.settle, arrays.settle, depends.settle)
