"""Output file patterns (bsub's -o %J %I, sbatch's %j %A %a, srun's %t %n): `%X` replaced by its value,
`%%` by a percent sign, anything else left as written. Pure."""

from __future__ import annotations

from collections.abc import Mapping


def fill(pattern: str, values: Mapping[str, str]) -> str:
    out, i = [], 0
    while i < len(pattern):
        if pattern[i] == "%" and i + 1 < len(pattern) and pattern[i + 1] in values:
            out.append(values[pattern[i + 1]])
            i += 2
        else:
            out.append(pattern[i])
            i += 1
    return "".join(out)
