"""TLC, the TLA+ model checker, run on tla/: the jar, one run, and what its output says.

The jar is built from source by ../shared/tools/tlc/build-tlc.sh (once per
machine; it caches), or taken from $XCE_TLC_JAR. Each run works on a copy of
tla/ in a temporary directory, since TLC writes its state files and trace
modules beside the spec. A counterexample is given one line per step: the
spec action taken (by name, not TLC's source location) and the variables it
changed.

    .venv/bin/python -m tests.tlc MCTwoSchedulers     # one model of tla/, figures printed
    .venv/bin/python -m tests.tlc MCci --coverage     # and the distinct states of each action

With coverage, TLC counts each action's states and the model's ActionsTaken
(a POSTCONDITION) prints them at the end: `Run.coverage` reads them.

Ahead of time (`start_ahead`, from conftest.py when test_tlc.py is collected):
the long models run in the background at a lower CPU priority (nice +5: 15 in
`make test`'s computing tier; at 19, the lowest, they got only what every other
test left and ran ~70 s past them) while the other tests mostly wait on
daemons, one run at a time; `result` gives a run started ahead (waiting for
it) or runs it now. Every TLC this module started is killed at the session's
end (`stop_all`).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TLA = ROOT / "tla"
BUILD = ROOT.parent / "shared" / "tools" / "tlc" / "build-tlc.sh"

# TLC's exit codes (its README): what each means for a check.
EXIT_OK, EXIT_INVARIANT, EXIT_PROPERTY = 0, 12, 13

_STEP = re.compile(r"^(State (\d+)|Back to state (\d+)): <(.*)>$")
_LOCATION = re.compile(r"line (\d+), col (\d+) to line (\d+), col (\d+) of module (\w+)")
# An action of TLCGet("spec").actions, as PrintT shows it (white space squashed): where it is, its counts.
_ACTION_COUNT = re.compile(r"location \|-> \[ beginLine \|-> (\d+), beginColumn \|-> (\d+), "
                           r"endLine \|-> (\d+), endColumn \|-> (\d+), module \|-> \"(\w+)\" \], "
                           r"coverage \|-> \[generated \|-> \d+, distinct \|-> (\d+)\]")
# TLC's switch for counting each action's generated and distinct states, and nothing finer: -coverage
# counts every expression's evaluations too, which made the CI model's check take 55 % more CPU.
ACTION_COUNTS = "tlc2.TLCGlobals.coverage"
_APPLIED = re.compile(r"^(?:Step|Fault)\((\w+)\)$")


class TLCUnavailable(RuntimeError):
    pass


# The runs conftest.py starts ahead when test_tlc.py is collected: (model, overrides, coverage).
# Each with the test of test_tlc.py that reads it: a run whose test is not selected is not started.
AHEAD = {"test_ci_model_is_checked_exhaustively_and_takes_every_action": ("MCci", (), True),
         "test_allocation_model_takes_parallel_and_gpu_jobs_all_or_nothing_and_gives_back_exactly":
             ("MCAllocCI", (), False),
         "test_liveness_holds_at_the_smallest_constants": ("MCLive", (), False),
         "test_preemption_model_never_runs_a_preemptor_beside_a_victim_not_yet_stopped":
             ("MCPreemptCI", (), True)}
_JAR_LOCK = threading.Lock()
_PROCS_LOCK = threading.Lock()  # a process starts, or all are killed: never between the two
_STOPPING = threading.Event()
_RUNNING: set[subprocess.Popen[str]] = set()
_AHEAD: dict[tuple[str, tuple[str, ...], bool], Future[Run]] = {}
_THREADS: list[threading.Thread] = []


def jar() -> Path:
    with _JAR_LOCK:  # built once, though a run ahead and a test may ask at once
        return _jar()


@cache
def _jar() -> Path:
    """tla2tools.jar: $XCE_TLC_JAR, else built from the source kept in ../shared (~10 s once)."""
    if given := os.environ.get("XCE_TLC_JAR"):
        return Path(given)
    if not BUILD.is_file():
        raise TLCUnavailable(f"no {BUILD} (and no $XCE_TLC_JAR): TLC cannot be built")
    built = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True, timeout=900)
    printed = built.stdout.strip().splitlines()
    if built.returncode != 0 or not printed or not Path(printed[-1]).is_file():
        raise TLCUnavailable(f"build-tlc.sh failed:\n{built.stdout[-2000:]}\n{built.stderr[-4000:]}")
    return Path(printed[-1])


@dataclass
class Run:
    model: str
    code: int
    output: str
    seconds: float
    sources: dict[str, list[str]] = field(repr=False)

    @property
    def passed(self) -> bool:
        return self.code == EXIT_OK and "Model checking completed. No error has been found." in self.output

    def figure(self, pattern: str) -> int | None:
        found = re.findall(pattern, self.output)
        return int(found[-1].replace(",", "")) if found else None

    @property
    def distinct(self) -> int | None:
        return self.figure(r"([\d,]+) distinct states found, 0 states left on queue")

    @property
    def depth(self) -> int | None:
        return self.figure(r"depth of the complete state graph search is (\d+)")

    def violated(self) -> str | None:
        """The invariant or property TLC reports violated, if any."""
        found = re.search(r"(?:Invariant|Temporal propert(?:y|ies)) (\w+)[\w ]* (?:is|was|were) violated",
                          self.output)
        return found.group(1) if found else None

    def summary(self) -> str:
        return (f"{self.model}: exit {self.code}, {self.distinct} distinct states, depth {self.depth}, "
                f"{self.seconds:.0f} s")

    def _source(self, module: str, line: int, col: int, end_line: int, end_col: int) -> str:
        lines = self.sources.get(module, [])
        if not (0 < line <= len(lines)):
            return f"{module}:{line}"
        if line == end_line:
            return lines[line - 1][col - 1:end_col]
        return lines[line - 1][col - 1:]

    def action_name(self, label: str) -> str:
        """A step's action: the spec action a `Step(A)`/`Fault(A)` of the model names."""
        found = _LOCATION.search(label)
        if not found:
            return label
        line, col, end_line, end_col = (int(x) for x in found.groups()[:4])
        text = self._source(found.group(5), line, col, end_line, end_col).strip()
        applied = _APPLIED.match(text)
        return applied.group(1) if applied else label.split(" ", 1)[0]

    def coverage(self) -> dict[str, int]:
        """Distinct states each action of the model's next-state relation reached (a run with
        `coverage`: what the model's ActionsTaken printed)."""
        printed = self.output.partition('"actions taken"')[2]
        taken: dict[str, int] = {}
        for found in _ACTION_COUNT.finditer(re.sub(r"\s+", " ", printed)):
            line, col, end_line, end_col = (int(found.group(i)) for i in range(1, 5))
            text = self._source(found.group(5), line, col, end_line, end_col).strip()
            if applied := _APPLIED.match(text):
                name = applied.group(1)
                taken[name] = taken.get(name, 0) + int(found.group(6))
        return taken

    def trace(self) -> list[str]:
        """The counterexample, one line per step: number, action, the variables it changed."""
        steps: list[tuple[str, dict[str, str]]] = []
        current: dict[str, str] | None = None
        variable = ""
        for line in self.output.splitlines():
            if found := _STEP.match(line):
                if found.group(3):
                    steps.append((f"back to state {found.group(3)}: {self.action_name(found.group(4))}", {}))
                    current = None
                    continue
                current = {}
                steps.append((f"{found.group(2)}: {self.action_name(found.group(4))}", current))
            elif current is not None and line.startswith("/\\ ") and " = " in line:
                variable, value = line[3:].split(" = ", 1)
                current[variable] = value.strip()
            elif current is not None and line.strip() and variable:
                current[variable] += " " + line.strip()
            elif not line.strip():
                current, variable = None, ""
        lines: list[str] = []
        before: dict[str, str] = {}
        for label, state in steps:
            changed = {k: v for k, v in state.items() if before.get(k) != v and k not in _DERIVED}
            shown = ", ".join(_shown(k, v) for k, v in sorted(changed.items())) if before else \
                "(the initial state)"
            lines.append(f"{label}  {shown}" if state else label)
            before = {**before, **state}
        return lines


_DERIVED = {"hist"}  # the states after each committed entry: follows from log and commit
_ENTRY = re.compile(r"\[ ?term \|-> \d+, op \|-> \[[^\]]*\] ?\]")


def _shown(variable: str, value: str) -> str:
    if variable == "log":  # the log only grows at its end or is cut back: its length and last entry
        entries = _ENTRY.findall(re.sub(r"\s+", " ", value))
        return f"log = <<{len(entries)} entries, last {entries[-1] if entries else 'none'}>>"
    return f"{variable} = {_squash(value)}"


def _squash(value: str, limit: int = 240) -> str:
    value = re.sub(r"\s+", " ", value)
    return value if len(value) <= limit else value[:limit] + " ..."


def config(model: str, overrides: tuple[str, ...] = ()) -> str:
    """tla/<model>.cfg, with `A <- B` overrides added to its CONSTANTS (the injected bugs)."""
    text = (TLA / f"{model}.cfg").read_text()
    if overrides:
        added = "".join(f"\n    {o}" for o in overrides)
        text, n = re.subn(r"^CONSTANTS$", lambda m: m.group(0) + added, text, count=1, flags=re.M)
        assert n == 1, f"{model}.cfg has no CONSTANTS section"
    return text


def start_ahead(runs: list[tuple[str, tuple[str, ...], bool]]) -> None:
    """Start these (model, overrides, coverage) runs in the background, one after the other, at
    nice +5: `result` picks them up."""
    if not runs:
        return
    for key in runs:
        _AHEAD[key] = Future()

    def work() -> None:
        for key in runs:
            future = _AHEAD[key]
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(run(key[0], key[1], coverage=key[2], nice=True))
            except BaseException as exc:  # noqa: BLE001 - the test that asks for it raises it
                future.set_exception(exc)

    thread = threading.Thread(target=work, name="tlc-ahead", daemon=True)
    _THREADS.append(thread)
    thread.start()


def result(model: str, overrides: tuple[str, ...] = (), *, coverage: bool = False) -> Run:
    """The run started ahead, once it ends; else one now."""
    future = _AHEAD.get((model, overrides, coverage))
    return future.result() if future is not None else run(model, overrides, coverage=coverage)


def stop_all() -> None:
    """Kill every TLC still running (the session ends), cancel the runs not started, and wait for
    the thread that ran them (no TLC starts once this is called; a jar being built is waited for)."""
    _STOPPING.set()
    for future in _AHEAD.values():
        future.cancel()
    with _PROCS_LOCK:
        for proc in list(_RUNNING):
            proc.kill()
    for thread in _THREADS:
        thread.join(timeout=120)


def run(model: str, overrides: tuple[str, ...] = (), *, coverage: bool = False, workers: int = 2,
        timeout: float = 1800, module: str = "MCXceBarrier", files: dict[str, str] | None = None,
        nice: bool = False, quick: bool = False) -> Run:
    """TLC on a copy of tla/ with the model's configuration (tla/<model>.cfg, or `files` may
    hold `<model>.cfg` and generated modules); output kept whatever the result. `nice`: at a
    lower CPU priority (+5; a run ahead: the tests that run meanwhile come first). `quick`: a run of
    seconds, on the JVM's first compiler only: the optimizing compiler's threads took more CPU than
    they saved there (3.4 against 1.6 s for an injected bug's run), though they halve a long run's."""
    files = files or {}
    with tempfile.TemporaryDirectory(prefix="xce-tlc-") as work:
        directory = Path(work)
        for spec in TLA.glob("*.tla"):
            shutil.copy(spec, directory)
        for name, text in files.items():
            (directory / name).write_text(text)
        cfg = files.get(f"{model}.cfg") or config(model, overrides)
        # TLC makes a directory of its own in the JVM's temporary directory each run (tlc-NNN): in ours.
        java = ["java", "-XX:+UseParallelGC", f"-Djava.io.tmpdir={directory}",
                *(["-XX:TieredStopAtLevel=1"] if quick else [])]
        if coverage:  # TLC counts each action's states (not each expression's, as -coverage would) and
            java.append(f"-D{ACTION_COUNTS}=1")  # the model prints them when the check ends
            cfg += "\nPOSTCONDITION ActionsTaken\n"
        (directory / f"{model}.run.cfg").write_text(cfg)
        command = [*java, "-cp", str(jar()), "tlc2.TLC", "-workers", str(workers),
                   "-metadir", str(directory / "states"), "-config", f"{model}.run.cfg", "-noGenerateSpecTE"]
        if nice:
            command = ["nice", "-n", "5", *command]
        start = time.monotonic()
        with _PROCS_LOCK:
            if _STOPPING.is_set():
                raise TLCUnavailable("the session is ending: no TLC is started")
            proc = subprocess.Popen([*command, f"{module}.tla"], cwd=directory, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
            _RUNNING.add(proc)
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        finally:
            proc.kill()
            proc.wait()
            _RUNNING.discard(proc)
        sources = {p.stem: p.read_text().splitlines() for p in directory.glob("*.tla")}
        return Run(model, proc.returncode, stdout + stderr, time.monotonic() - start, sources)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+", help="configurations of tla/ (without .cfg)")
    parser.add_argument("--coverage", action="store_true", help="report the distinct states of each action")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    failed = False
    for model in args.models:
        result = run(model, coverage=args.coverage, workers=args.workers, timeout=24 * 3600)
        print(result.summary(), flush=True)
        if args.coverage:
            for name, states in sorted(result.coverage().items()):
                print(f"  {name}: {states} distinct states")
        if not result.passed:
            failed = True
            print(f"  violated: {result.violated()}" if result.violated() else result.output[-3000:])
            print("\n".join("  " + line for line in result.trace()))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
