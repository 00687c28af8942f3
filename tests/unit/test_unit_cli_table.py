"""The command table: every row names functions that exist, with the signature its kind runs them with,
and naming a command loads only its own family (nothing of the daemons or the simulator)."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys

import pytest

from cli import jobs, table


@pytest.mark.parametrize("command", table.COMMANDS, ids=lambda c: c.name)
def test_each_row_names_its_declaring_and_running_functions(command: table.Command) -> None:
    module = __import__(f"cli.{command.module}", fromlist=["_"])
    declare, run = getattr(module, command.declare), getattr(module, command.run)
    assert list(inspect.signature(declare).parameters) == ["p"]
    assert len(inspect.signature(run).parameters) == (2 if command.connects else 1)


def test_names_are_unique_and_the_job_actions_are_the_jobs_module_s() -> None:
    names = [command.name for command in table.COMMANDS]
    assert len(names) == len(set(names)) == len(table.BY_NAME)
    assert tuple(jobs.ACTIONS) == table.JOB_ACTIONS


_LOADED = ("import json, sys\nfrom cli.parser import build_parser\nbuild_parser({command!r})\n"
           "print(json.dumps(sorted(sys.modules)))\n")


@pytest.mark.parametrize(("command", "family"), [("jobs", "cli.job_queries"), ("history", "cli.history"),
                                                 ("sim", "cli.simulate"), (None, None)])
def test_building_a_parser_loads_its_family_only_and_no_daemon_or_simulator(command: str | None,
                                                                           family: str | None) -> None:
    done = subprocess.run([sys.executable, "-c", _LOADED.format(command=command)], capture_output=True,
                          text=True, check=True, timeout=60)
    loaded = set(json.loads(done.stdout))
    tops = {m.split(".")[0] for m in loaded}
    assert not tops & {"controller", "scheduler", "worker", "simulator", "grpc", "pysyncobj", "lmdb"}, tops
    every = {f"cli.{c.module}" for c in table.COMMANDS}
    # The full parser declares every family's arguments; one command's, its own family's only.
    assert loaded & every == ({family} if family is not None else every)
