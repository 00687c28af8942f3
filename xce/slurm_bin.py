"""Where Slurm's commands live: a bin directory of their own, never on PATH unless a site puts it there.

XCE's `sbatch`, `squeue`, `scancel`, `sacct`, `sinfo`, `scontrol`, `srun`, `salloc` are small scripts in
`<prefix>/share/xce/slurm/bin` (the interpreter's prefix: the project's
virtual environment), made on first use by `xce slurm-path`, as LSF's are
(xce/lsf_bin.py): a real Slurm on the same machine is never shadowed by
accident.
"""

from __future__ import annotations

import os
import sys

from xce.lsf_bin import install

# The Slurm commands there: each runs cli/slurm/entry.py's `main`.
COMMANDS = ("sbatch", "squeue", "scancel", "sacct", "sinfo", "scontrol", "srun", "salloc")


def slurm_dir(prefix: str | None = None) -> str:
    return os.path.join(prefix or sys.prefix, "share", "xce", "slurm")


def bin_dir(prefix: str | None = None) -> str:
    return os.path.join(slurm_dir(prefix), "bin")


def script(command: str, interpreter: str) -> str:
    return (f"#!{interpreter}\n# XCE's {command} (xce/slurm_bin.py): Slurm's command over an XCE cluster\n"
            f"from cli.slurm.entry import main\nmain({command!r})\n")


def ensure(prefix: str | None = None, interpreter: str | None = None) -> str:
    """The bin directory, its scripts written (or rewritten, if they name another interpreter)."""
    base = bin_dir(prefix)
    install({os.path.join(base, name): (script(name, interpreter or sys.executable), 0o755)
             for name in COMMANDS})
    return base
