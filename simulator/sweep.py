"""A sweep: many what-ifs of one workload, compared in one table (`xce sim --sweep FILE`).

A sweep file has one configuration a line: a name, then what-ifs as `xce sim` takes them (`--set
KEY=VALUE`, repeated; `--add-hosts NxS`; `--scale-arrivals F`); `#` starts a comment:

    # name         what-ifs
    fcfs           --set queue.normal.backfill=none
    easy           --set queue.normal.backfill=easy
    easy+16        --set queue.normal.backfill=easy --add-hosts 16x1
    busier         --scale-arrivals 1.2

The workload as given is always the first row. Each configuration runs in a process of its own
(cli/sweep.py), or as an element of a job array on a live cluster (`--on-cluster`); either way a
configuration's figures are those `xce sim` prints for it alone, so the table is the same bytes.

Pure: text in, configurations and a table out.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from simulator import whatif, workload

MAX_CONFIGS = 200
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+=-]{0,39}")
AS_GIVEN = "as given"


class SweepError(ValueError):
    pass


@dataclass(frozen=True)
class Config:
    name: str
    sets: tuple[str, ...] = ()
    add_hosts: str | None = None
    scale_arrivals: float | None = None

    def options(self) -> list[str]:
        """The configuration as xce sim's options."""
        words = [w for item in self.sets for w in ("--set", item)]
        if self.add_hosts:
            words += ["--add-hosts", self.add_hosts]
        if self.scale_arrivals:
            words += ["--scale-arrivals", repr(self.scale_arrivals)]
        return words


def parse(text: str, where: str = "<sweep>") -> list[Config]:
    """The configurations of a sweep file; SweepError naming the line of the first fault."""
    configs: list[Config] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        try:
            words = shlex.split(raw, comments=True)
        except ValueError as exc:
            raise SweepError(f"{where}:{number}: {exc}") from None
        if not words:
            continue
        name, rest = words[0], words[1:]
        if not NAME.fullmatch(name):
            raise SweepError(f"{where}:{number}: {name[:50]!r} is not a configuration name (a letter or "
                             "digit, then up to 39 of them or . _ + = -)")
        if name in seen:
            raise SweepError(f"{where}:{number}: {name} again (first on line {seen[name]})")
        seen[name] = number
        configs.append(_config(name, rest, f"{where}:{number}"))
        if len(configs) > MAX_CONFIGS:
            raise SweepError(f"{where}: more than {MAX_CONFIGS} configurations")
    if not configs:
        raise SweepError(f"{where}: no configuration (one a line: a name, then what-ifs)")
    return configs


def _config(name: str, words: Sequence[str], where: str) -> Config:
    sets: list[str] = []
    add_hosts: str | None = None
    scale: float | None = None
    i = 0
    while i < len(words):
        option = words[i]
        if option not in ("--set", "--add-hosts", "--scale-arrivals") or i + 1 >= len(words):
            raise SweepError(f"{where}: {option[:50]!r}: a what-if is --set KEY=VALUE, --add-hosts NxS or "
                             "--scale-arrivals F, each with its value")
        value = words[i + 1]
        if option == "--set":
            sets.append(value)
        elif (add_hosts if option == "--add-hosts" else scale) is not None:
            raise SweepError(f"{where}: {option} twice")
        elif option == "--add-hosts":
            try:
                workload.hosts_option(value)
            except ValueError as exc:
                raise SweepError(f"{where}: --add-hosts: {exc}") from None
            add_hosts = value
        else:
            try:
                scale = float(value)
            except ValueError:
                raise SweepError(f"{where}: --scale-arrivals {value[:30]!r}: a number") from None
            if not 0 < scale <= 1000:
                raise SweepError(f"{where}: --scale-arrivals {value}: above 0, at most 1000")
        i += 2
    try:
        whatif.parse(sets)
    except whatif.WhatIfError as exc:
        raise SweepError(f"{where}: {exc}") from None
    return Config(name, tuple(sets), add_hosts, scale)


COLUMNS = (("jobs", "jobs", 8, "d"), ("avg_wait_s", "avg wait s", 12, ".2f"),
           ("max_wait_s", "max wait s", 12, ".2f"), ("avg_bsld", "avg bsld", 10, ".2f"),
           ("utilization", "util", 7, ".4f"), ("makespan_s", "makespan s", 12, ".2f"))


def table(rows: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
    """One line a configuration (its report's overall figures), and the change of avg wait and bsld
    against the workload as given (the first row)."""
    lines = [f"{'configuration':<24}" + "".join(f" {title:>{width}}" for _, title, width, _ in COLUMNS)
             + f" {'wait vs given':>14} {'bsld vs given':>14}"]
    base = rows[0][1]["overall"] if rows else {}
    for name, figures in rows:
        overall = figures["overall"]
        cells = "".join(f" {overall[key]:>{width}{form}}" for key, _, width, form in COLUMNS)
        lines.append(f"{name[:24]:<24}{cells} {_change(base['avg_wait_s'], overall['avg_wait_s']):>14} "
                     f"{_change(base['avg_bsld'], overall['avg_bsld']):>14}")
    return "\n".join(lines) + "\n"


def _change(before: float, after: float) -> str:
    if before == after:
        return "="
    return f"{100 * (after - before) / before:+.1f} %" if before else "new"
