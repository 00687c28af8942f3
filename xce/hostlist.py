"""Slurm's compressed host lists (node[01-03,07],gpu1): squeue's and sacct's NodeList, and the
SLURM_JOB_NODELIST every job sbatch submitted gets (worker/spawn.py). Pure."""

from __future__ import annotations

import re


def compress(hosts: list[str]) -> str:
    """Slurm's compressed host list: node[01-03,07],gpu1 (names that end in digits with a common
    prefix and width grouped, in their order of first appearance)."""
    groups: dict[tuple[str, int], list[int]] = {}
    order: list[tuple[str, int] | str] = []
    unique = list(dict.fromkeys(hosts))
    # Zero-padded numbers have their width (node007: 3); another number of that many digits goes with
    # them (node010), as Slurm's hostlist takes widths as equivalent; the rest are unpadded (width 0).
    padded = {(found[1], len(found[2])) for host in unique
              if (found := re.fullmatch(r"(.*?)(\d+)", host)) and len(found[2]) > 1 and found[2][0] == "0"}
    for host in unique:
        found = re.fullmatch(r"(.*?)(\d+)", host)
        if found is None:
            order.append(host)
            continue
        key = (found[1], len(found[2])) if (found[1], len(found[2])) in padded else (found[1], 0)
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(int(found[2]))
    out = []
    for item in order:
        if isinstance(item, str):
            out.append(item)
            continue
        prefix, width = item
        numbers = sorted(set(groups[item]))
        if len(numbers) == 1:
            out.append(f"{prefix}{numbers[0]:0{width}d}")
            continue
        spans, start, last = [], numbers[0], numbers[0]
        for number in numbers[1:]:
            if number == last + 1:
                last = number
                continue
            spans.append((start, last))
            start = last = number
        spans.append((start, last))
        text = ",".join(f"{a:0{width}d}" if a == b else f"{a:0{width}d}-{b:0{width}d}" for a, b in spans)
        out.append(f"{prefix}[{text}]")
    return ",".join(out)
