"""The layers, enforced: which of the project's packages each package may import.

`xce` is the kernel (the wire, the rules shared by apply and the scheduler, the daemons' runtime
kit) and imports nothing of the project outside itself. `client` (the channel to the leader, its
transports, credentials) sits on it. The three daemons import `xce` and `client`, never each
other: apply must not depend on the scheduler, nor a worker on the controller. What sits on top
(`simulator`, which runs the real apply and scheduler; `ops`, `gateway`, `cli`) may import the
layers below it. Every import counts, a deferred one inside a function too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KERNEL = {"xce"}
CLIENT = KERNEL | {"client"}
DAEMONS = {"controller", "scheduler", "worker"}
# A package -> the project's packages it may import (itself always).
ALLOWED: dict[str, set[str]] = {
    "xce": KERNEL,
    "client": CLIENT,
    "controller": CLIENT,
    "scheduler": CLIENT,
    "worker": CLIENT,
    "simulator": CLIENT | {"controller", "scheduler"},
    "ops": CLIENT | DAEMONS,
    "gateway": CLIENT | {"simulator"},
    "cli": CLIENT | DAEMONS | {"simulator", "ops", "gateway"},
}
PROJECT = set(ALLOWED) | {"soak", "bench", "tests"}


def imported_packages(path: Path) -> list[tuple[int, str]]:
    """(line, top-level package) of every absolute import in the file."""
    tree = ast.parse(path.read_text(), str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name.split(".")[0]) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module.split(".")[0]))
    return found


def violations(root: Path) -> list[str]:
    """Each import that breaks the layers under `root`, as `path:line: a imports b`."""
    broken = []
    for package, allowed in sorted(ALLOWED.items()):
        for path in sorted((root / package).rglob("*.py")):
            for line, imported in imported_packages(path):
                if imported in PROJECT and imported != package and imported not in allowed:
                    broken.append(f"{path.relative_to(root)}:{line}: {package} imports {imported}")
    return broken


def test_the_project_keeps_its_layers() -> None:
    assert violations(ROOT) == []


def test_every_package_of_the_project_has_a_layer() -> None:
    packages = {path.parent.name for path in ROOT.glob("*/__init__.py")}
    assert packages - PROJECT == set(), "a new package: give it a place in ALLOWED"


@pytest.mark.parametrize(("package", "source", "imported"), [
    ("xce", "from controller.fsm import applier\n", "controller"),
    ("xce", "def later():\n    import scheduler.core\n", "scheduler"),
    ("client", "from worker import daemon\n", "worker"),
    ("controller", "from scheduler.preemption import may_take\n", "scheduler"),
    ("worker", "import controller.config\n", "controller"),
    ("scheduler", "from worker.executor import Executor\n", "worker"),
    ("gateway", "from ops import local_cluster\n", "ops"),
])
def test_a_synthetic_tree_that_breaks_a_layer_is_caught(tmp_path: Path, package: str, source: str,
                                                       imported: str) -> None:
    (tmp_path / package).mkdir()
    (tmp_path / package / "module.py").write_text(source)
    found = violations(tmp_path)
    assert len(found) == 1 and found[0].endswith(f"{package} imports {imported}")


def test_a_synthetic_tree_within_its_layers_passes(tmp_path: Path) -> None:
    for package, source in [("xce", "from xce.rules import resreq\nimport grpc\n"),
                            ("client", "from xce.errors import invalid\n"),
                            ("controller", "from client.credentials import Credentials\nfrom . import x\n"),
                            ("simulator", "from controller.fsm import apply\nfrom scheduler import core\n"),
                            ("cli", "from gateway import main\nfrom ops import demo\n")]:
        (tmp_path / package).mkdir()
        (tmp_path / package / "module.py").write_text(source)
    assert violations(tmp_path) == []
