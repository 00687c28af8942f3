"""Job scripts as bsub reads them (cli/lsf/script.py): #BSUB lines up to the first command, and the
command that runs the spooled script under its #! interpreter."""

from __future__ import annotations

import pytest

from cli.lsf.script import ScriptError, command, directives

SCRIPT = """#!/bin/bash
# a comment
#BSUB -J "my job"
#BSUB -q normal   # the queue
#BSUBX -n 9

#BSUB -n 4 -R "span[hosts=1]"
echo start
#BSUB -W 10
"""


def test_directives_stop_at_the_first_command() -> None:
    assert directives(SCRIPT, "job.sh") == ["-J", "my job", "-q", "normal", "-n", "4", "-R", "span[hosts=1]"]


def test_a_bad_directive_names_its_line() -> None:
    with pytest.raises(ScriptError, match=r"job.sh line 2: .*#BSUB -J \"open"):
        directives('#!/bin/sh\n#BSUB -J "open\n', "job.sh")


@pytest.mark.parametrize(("first", "expected", "zero"), [
    ("#!/bin/bash", ["/bin/bash", "-c"], ["job.sh"]),  # a shell's $0
    ("#!/bin/bash -l", ["/bin/bash", "-l", "-c"], ["job.sh"]),
    ("#!/usr/bin/env bash", ["/usr/bin/env", "bash", "-c"], ["job.sh"]),
    ("#!/usr/bin/env python3", ["/usr/bin/env", "python3", "-c"], []),
    ("#!/usr/bin/python3.11", ["/usr/bin/python3.11", "-c"], []),
    ("#!/usr/bin/perl -w", ["/usr/bin/perl", "-w", "-e"], []),
    ("echo no interpreter", ["/bin/sh", "-c"], ["job.sh"]),
])
def test_the_script_runs_under_its_interpreter(first: str, expected: list[str], zero: list[str]) -> None:
    text = f"{first}\necho hi\n"
    assert command(text, "job.sh") == [*expected, text, *zero]


def test_a_script_that_cannot_be_given_to_its_interpreter_is_refused() -> None:
    with pytest.raises(ScriptError, match="interpreter /usr/bin/awk"):
        command("#!/usr/bin/awk -f\n{print}\n", "x.awk")
    with pytest.raises(ScriptError, match="more than"):
        command("#!/bin/sh\n" + "#" * 140_000, "big.sh")
    with pytest.raises(ScriptError, match="NUL"):
        command("#!/bin/sh\n\0", "bin")
