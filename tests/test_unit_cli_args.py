"""The command line's arguments: every command and option says what it is, and a bad one is a one-line
error with exit status 2, never a traceback (issue 15)."""

from __future__ import annotations

import argparse

import pytest

from xce import cli


def _undocumented(parser: argparse.ArgumentParser, path: str) -> list[str]:
    missing = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, sub in action.choices.items():
                if not helps.get(name):
                    missing.append(f"{path} {name}")
                missing += _undocumented(sub, f"{path} {name}")
        elif not isinstance(action, argparse._HelpAction) and not action.help:
            missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")
    return missing


def test_every_command_and_option_has_a_help_line() -> None:
    assert _undocumented(cli.build_parser(), "xce") == []
    text = cli.build_parser()._subparsers._group_actions[0].choices["submit"].format_help()  # type: ignore[union-attr]
    for option, words in (("-R", "resource requirement"), ("-n", "slots"), ("-q", "queue")):
        assert option in text and words in text


@pytest.mark.parametrize("argv", [["submit", "--priority", "99999999999", "--", "true"], ["frob"], ["kill"],
                                  ["submit", "-n", "many", "--", "true"],
                                  ["modify", "1", "--priority", "1e3"]])
def test_bad_arguments_are_one_line_and_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
