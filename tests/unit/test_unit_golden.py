"""The golden scripts' runner (golden.py): what it reads of a script, and what a rewrite keeps."""

from __future__ import annotations

from pathlib import Path

import pytest
from golden import Case, parse, rewrite, run

SCRIPT = """# a comment
add a=1 b=(2,3) verbose
an input line
----
old

show
----

end
----
x
y
"""


def test_a_script_reads_as_commands_arguments_inputs_and_expected_texts() -> None:
    cases = parse(SCRIPT)
    assert [(c.command, c.args, c.input, c.expected) for c in cases] == [
        ("add", {"a": "1", "b": "(2,3)", "verbose": ""}, ["an input line"], "old"),
        ("show", {}, [], ""),
        ("end", {}, [], "x\ny")]
    assert (cases[0].number("a"), cases[0].items("b"), cases[0].line) == (1, ["2", "3"], 2)


def test_a_rewrite_replaces_only_the_expected_texts() -> None:
    cases = parse(SCRIPT)
    assert rewrite(SCRIPT, cases, ["new", "one\ntwo", ""]) == SCRIPT.replace("old", "new").replace(
        "show\n----\n", "show\n----\none\ntwo\n").replace("x\ny\n", "")


def test_a_case_whose_output_differs_fails_naming_its_line(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XCE_REWRITE", raising=False)
    script = tmp_path / "s.txt"
    script.write_text(SCRIPT)

    def echo(case: Case) -> str:
        return case.expected if case.command != "show" else "surprise"

    with pytest.raises(AssertionError, match=r"s.txt:7: show"):
        run(script, echo)
    monkeypatch.setenv("XCE_REWRITE", "1")
    run(script, echo)
    assert "show\n----\nsurprise\n" in script.read_text()
    monkeypatch.delenv("XCE_REWRITE")
    run(script, echo)
