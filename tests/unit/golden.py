"""Data-driven scripts with golden output, after etcd-io/raft's `testdata/*.txt`.

A script is a run of cases; each case is a command line, optional input
lines, a `----` line, and the expected output up to the next blank line:

    dispatch job=1 host=h1
    ----
    accepted

A command line is a name and arguments, `key=value` or a bare word; a list
is a value in parentheses, commas between, no spaces: `victims=(1,2)`. A
line starting with `#` is a comment.
The runner hands each case to a handler, which returns the output as text,
and compares it with the expected text. With XCE_REWRITE=1 the script is
rewritten with the outputs the code gives instead (read the diff before
committing it). Output never holds a blank line: that would end the case.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

SEPARATOR = "----"


@dataclass
class Case:
    line: int  # where the command is in the script, for the failure's message
    command: str
    args: dict[str, str]
    input: list[str] = field(default_factory=list)
    expected: str = ""
    expected_lines: slice = field(default_factory=lambda: slice(0))  # where it is in the script

    def arg(self, key: str, default: str | None = None) -> str:
        if key in self.args:
            return self.args[key]
        if default is None:
            raise ValueError(f"line {self.line}: {self.command} needs {key}=")
        return default

    def number(self, key: str, default: int | None = None) -> int:
        return int(self.arg(key, None if default is None else str(default)))

    def items(self, key: str) -> list[str]:
        """A list argument: `k=(a,b)` or `k=a`."""
        value = self.arg(key, "")
        return [v for v in value.strip("()").split(",") if v]


def parse_command(text: str, line: int) -> Case:
    """`name key=value word ...`: a bare word is an argument with the empty value."""
    name, *tokens = text.split()
    args = dict(token.partition("=")[::2] for token in tokens)
    return Case(line, name, args)


def parse(text: str) -> list[Case]:
    cases: list[Case] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if not lines[i].strip() or lines[i].startswith("#"):
            i += 1
            continue
        case = parse_command(lines[i], i + 1)
        i += 1
        while i < len(lines) and lines[i] != SEPARATOR:
            case.input.append(lines[i])
            i += 1
        if i == len(lines):
            raise ValueError(f"line {case.line}: {case.command} has no {SEPARATOR} line")
        i += 1
        first = i
        while i < len(lines) and lines[i].strip():
            i += 1
        case.expected_lines = slice(first, i)
        case.expected = "\n".join(lines[first:i])
        cases.append(case)
    return cases


def rewrite(text: str, cases: list[Case], outputs: list[str]) -> str:
    """The script with each case's expected text replaced by its output, comments and spacing kept."""
    lines = text.splitlines()
    for case, output in reversed(list(zip(cases, outputs, strict=True))):
        lines[case.expected_lines] = output.splitlines()
    return "\n".join(lines) + "\n"


def run(path: Path, handle: Callable[[Case], str]) -> None:
    """Run every case of the script at `path` through `handle`, in order, and compare (or rewrite)."""
    text = path.read_text()
    cases = parse(text)
    outputs: list[str] = []
    failures: list[str] = []
    for case in cases:
        output = handle(case).rstrip("\n")
        assert "\n\n" not in output, f"{path.name}:{case.line}: a blank line in the output ends the case"
        outputs.append(output)
        if output != case.expected:
            failures.append(f"{path.name}:{case.line}: {case.command}\n"
                            f"--- expected\n{case.expected}\n--- got\n{output}")
    if os.environ.get("XCE_REWRITE") == "1":
        path.write_text(rewrite(text, cases, outputs))
        return
    assert not failures, "\n\n".join(failures) + "\n\n(XCE_REWRITE=1 rewrites the expected outputs)"
