"""No ambient time, randomness or I/O where the design says there is none (AST checks).

- No module under controller/, scheduler/ or worker/ reads the wall clock,
  sleeps, or draws from the global random generator (or uuid4), except the
  drivers listed in ALLOWED, each with its reason; everything else is handed
  a Clock (xce/clock.py) and a seeded random.Random.
- The pure cores (the leader core, the planner, the feasibility module, the
  state machine, the follower's AppendEntries plan, and the modules they
  import from this project) import none of grpc, lmdb, pysyncobj, asyncio,
  threading, socket or subprocess.
- The protocol simulation (tests/protocol_sim) sets no attribute on a
  production module or class, monkeypatches nothing, and reaches the
  leader, scheduler and worker logic only through their real entry points
  (LeaderCore, Decider, Worker), never through their parts.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("controller", "scheduler", "worker")

# module (relative path) -> why it may read the clock or sleep
ALLOWED = {
    "worker/process_host.py": "the real process host: polls /proc for a process it adopted after a restart",
    "worker/shim.py": "a process of its own (each job's group leader): measures the job's wall time and "
                      "stamps its end",
    "worker/launch_socket.py": "the launch socket's driver (threads, a Unix socket): when a launch refused "
                               "for now is asked again, and until when",
    "controller/faults.py": "deliberate faults for tests only: slow-entry sleeps inside an apply to make it "
                            "long, and reads nothing from the clock into what the apply writes",
}
CLOCK_CALLS = {("time", "time"), ("time", "time_ns"), ("time", "monotonic"), ("time", "monotonic_ns"),
               ("time", "sleep"), ("time", "perf_counter"), ("datetime", "now"), ("datetime", "utcnow"),
               ("date", "today"), ("uuid", "uuid4"), ("uuid", "uuid1"), ("os", "urandom")}
RANDOM_OK = {"Random"}  # constructing a generator is fine: it is then passed in

CORES = ("controller/leader/__init__.py", "scheduler/planner.py", "scheduler/core.py", "scheduler/decider.py",
         "xce/rules/feasibility.py", "controller/fsm/__init__.py", "controller/raft_append.py")
CORES += ("scheduler/gates.py", "scheduler/host_checks.py", "scheduler/pass_state.py",  # the pass's stack
          "scheduler/pass_usage.py", "scheduler/host_index.py", "scheduler/preempt_fallback.py",
          "scheduler/decisions.py", "scheduler/job_digest.py", "scheduler/plain_lane.py")
FORBIDDEN_IN_CORES = {"grpc", "lmdb", "pysyncobj", "asyncio", "threading", "socket", "subprocess"}
PRODUCTION = ("controller", "scheduler", "worker", "xce")
# What the simulation may not import: the parts behind the real entry points.
PARTS = {"controller.worker_session", "controller.group_commit", "controller.host_liveness",
         "controller.watchdog", "controller.proposals", "scheduler.core", "worker.executor"}


def modules(*folders: str) -> Iterator[Path]:
    for folder in folders:
        yield from sorted((ROOT / folder).rglob("*.py"))


def parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def _ambient_reads(tree: ast.Module) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            pair = (node.value.id, node.attr)
            if pair in CLOCK_CALLS or (node.value.id == "random" and node.attr not in RANDOM_OK):
                found.append(f"line {node.lineno}: {node.value.id}.{node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module in ("time", "random", "uuid", "datetime"):
            for alias in node.names:
                if node.module == "datetime" or (node.module == "random" and alias.name in RANDOM_OK):
                    continue
                found.append(f"line {node.lineno}: from {node.module} import {alias.name}")
    return found


@pytest.mark.parametrize("path", list(modules(*SCANNED)), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_ambient_clock_or_randomness_outside_the_listed_drivers(path: Path) -> None:
    relative = str(path.relative_to(ROOT))
    found = _ambient_reads(parse(path))
    if relative in ALLOWED:
        assert found, f"{relative} is allowed to read the clock but does not: take it off the list"
        return
    assert not found, f"{relative} reads the clock or global randomness (inject a Clock / Random): {found}"


def test_the_checker_sees_what_it_must_refuse() -> None:
    tree = ast.parse("import time, random\nfrom time import monotonic\n"
                     "a = time.time()\nb = random.choice([1])\nc = random.Random(1)\ntime.sleep(1)\n")
    assert [f.split(": ", 1)[1] for f in _ambient_reads(tree)] == [
        "from time import monotonic", "time.time", "random.choice", "time.sleep"]


def _imports(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def _module_path(name: str) -> Path | None:
    base = ROOT / Path(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _closure(path: Path) -> dict[Path, set[str]]:
    """Every project module `path` imports, directly or not, with what each imports."""
    seen: dict[Path, set[str]] = {}
    todo = [path]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen[current] = _imports(parse(current))
        for name in seen[current]:
            if name.split(".")[0] in PRODUCTION and not name.startswith("xce.v1"):
                found = _module_path(name)
                if found is not None and found not in seen:
                    todo.append(found)
    return seen


@pytest.mark.parametrize("core", CORES)
def test_pure_cores_import_no_io(core: str) -> None:
    offenders = {}
    for module, names in _closure(ROOT / core).items():
        bad = {n for n in names if n.split(".")[0] in FORBIDDEN_IN_CORES}
        if bad:
            offenders[str(module.relative_to(ROOT))] = sorted(bad)
    assert not offenders, f"{core} reaches I/O through {offenders}"


def _production_names(tree: ast.Module) -> set[str]:
    """Local names bound to production modules or to what they define."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names
                      if alias.name.split(".")[0] in PRODUCTION}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PRODUCTION:
            names |= {alias.asname or alias.name for alias in node.names}
    return names


def _root_name(node: ast.expr) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


@pytest.mark.parametrize("path", list(modules("tests/protocol_sim")), ids=lambda p: p.name)
def test_the_simulation_changes_no_production_module(path: Path) -> None:
    tree = parse(path)
    production = _production_names(tree)
    found = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AugAssign | ast.AnnAssign) else []
        for target in targets:
            if isinstance(target, ast.Attribute) and _root_name(target) in production:
                found.append(f"line {node.lineno}: assigns {ast.unparse(target)}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name | ast.Attribute):
            name = node.func.id if isinstance(node.func, ast.Name) else node.func.attr
            if name in ("setattr", "setitem", "delattr", "MonkeyPatch"):
                found.append(f"line {node.lineno}: calls {name}")
        if isinstance(node, ast.Name) and node.id in ("monkeypatch", "MonkeyPatch"):
            found.append(f"line {node.lineno}: uses {node.id}")
    parts = sorted(n for n in _imports(tree) if any(n == p or n.startswith(p + ".") for p in PARTS))
    assert not found, f"{path.name} changes production code: {found}"
    assert not parts, f"{path.name} reaches past the real entry points into {parts}"
