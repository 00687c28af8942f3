"""Job scripts, as bsub reads them: `#BSUB` directives, and the command that runs the script.

LSF reads the `#BSUB` lines before the script's first command (blank lines
and other comments may come between them; the first line that is neither
ends them). Each holds bsub options in shell words; options on the command
line override the script's. The script itself is spooled with the job (its
text is the job's), not read from a path on the host that runs it: it runs
under the interpreter its `#!` line names (sh without one), given the text
to run as shells, Python, Perl and R take it (`-c`/`-e`).
"""

from __future__ import annotations

import os
import shlex

# Interpreters that run a program given as an argument, and the flag that says so.
EVAL_FLAG = {**dict.fromkeys(("sh", "bash", "dash", "zsh", "ksh", "mksh", "csh", "tcsh"), "-c"),
             "python": "-c", "perl": "-e", "Rscript": "-e"}
SHELLS = frozenset(name for name, flag in EVAL_FLAG.items() if flag == "-c" and name != "python")
MAX_SCRIPT_BYTES = 131071 - 1  # one argument, as exec takes it (controller/fsm/validation.py)


class ScriptError(ValueError):
    """A script bsub cannot take: the message names the line."""


def directives(text: str, source: str) -> list[str]:
    """The bsub words of the script's #BSUB lines, in order."""
    words: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped:
            continue
        if not stripped.startswith("#"):
            break  # the first command: LSF reads no #BSUB line past it
        if stripped.startswith("#BSUB") and (len(stripped) == 5 or stripped[5].isspace()):
            try:
                words.extend(shlex.split(stripped[5:], comments=True))
            except ValueError as exc:
                raise ScriptError(f"{source} line {number}: {exc}: {stripped[:120]}") from None
    return words


def _interpreter(first: str) -> list[str]:
    if not first.startswith("#!"):
        return ["/bin/sh"]
    words = first[2:].strip().split(None, 1)  # as the kernel reads it: the program and one argument
    if not words:
        return ["/bin/sh"]
    return words


def _family(program: str) -> str:
    """python3.11 -> python: the interpreter's name without its version."""
    name = os.path.basename(program)
    for known in EVAL_FLAG:
        version = name[len(known):]
        if name.startswith(known) and all(c.isdigit() or c == "." for c in version):
            return known
    return name


def command(text: str, name: str) -> list[str]:
    """The job's command running `text`, a script (named `name` as its $0 where the language has one)."""
    if len(text.encode()) > MAX_SCRIPT_BYTES:
        raise ScriptError(f"{name}: the job script is {len(text.encode())} bytes, more than the "
                          f"{MAX_SCRIPT_BYTES} a job may carry")
    if "\0" in text:
        raise ScriptError(f"{name}: the job script holds a NUL character (is it a program, not a script?)")
    interpreter = _interpreter(text.split("\n", 1)[0])
    program = interpreter[0]
    if os.path.basename(program) == "env" and len(interpreter) == 2 and not interpreter[1].startswith("-"):
        program = interpreter[1]  # #!/usr/bin/env bash
    family = _family(program)
    if family not in EVAL_FLAG:
        raise ScriptError(f"{name}: the job script's interpreter {program} cannot be given a script to run "
                          f"(shells, python, perl and Rscript can: {', '.join(sorted(EVAL_FLAG))})")
    tail = [name] if family in SHELLS else []
    return [*interpreter, EVAL_FLAG[family], text, *tail]
