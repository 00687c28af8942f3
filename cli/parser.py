"""The `xce` command line's parser, built from the command table.

Only the parser of the command a line names is built (argparse looks up
gettext catalogues on disk for every option: building all forty costs ~10 ms
of every command); a line naming none plainly (-h, an unknown option) or
naming an unknown command gets the full parser. A bad argument is one line
on stderr and exit status 2, from the parser or, past it, as a UsageError.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from cli.table import BY_NAME, COMMANDS
from xce.printable import shown

TYPE_CHECKING = False  # not typing's: importing it is ~2 ms of every command's start
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any, NoReturn

STALE_HELP = "any replica answers from its own state, saying its revision (default: the leader, linearizable)"
GLOBAL_OPTIONS = ("--controllers", "--cluster")


class UsageError(Exception):
    """A bad argument found past the parser: the CLI prints it on one line and exits 2."""


def path_arg(text: str) -> Path:
    """An argument naming a file, as a Path: pathlib (~5 ms to import) only for the commands that
    take one, none of them a client command's."""
    from pathlib import Path

    return Path(text)


class _Formatter(argparse.HelpFormatter):
    """argparse's, sized without importing shutil (~3 ms, with bz2 and lzma) for every parser: the
    terminal's width as shutil.get_terminal_size finds it ($COLUMNS, else stdout's, else 80)."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None) -> None:
        if width is None:
            try:
                columns = int(os.environ.get("COLUMNS", "0"))
            except ValueError:
                columns = 0
            if columns <= 0:
                try:
                    columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
                except (AttributeError, ValueError, OSError):
                    columns = 80
            width = (columns or 80) - 2
        super().__init__(prog, indent_increment, max_help_position, width)


class Parser(argparse.ArgumentParser):
    """A bad argument is one line on stderr and exit status 2 (usage is what --help is for).

    An option is taken only as written: no abbreviation of a long one (`--req` is not
    `--request-id`) and no value run into a short one (`-R1`; `-env` read as `-e nv`). LSF's
    single-dash words (`-env all`, `-outdir /tmp`) would otherwise become a job with a stderr file
    named `nv` and a command `all`; refused, nothing is submitted."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def _get_option_tuples(self, option_string: str) -> list[tuple[argparse.Action, str, str | None]]:
        return []  # argparse's guesses: prefixes of long options and short options with a value run in

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        """As argparse's, but a word no option or argument takes is refused here, by the parser of
        the command it was given to (`xce submit: unknown option -env`), not passed up."""
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            word = extras[0]
            self.error(f"unknown option {word}" if word.startswith("-") else f"unexpected argument {word!r}")
        return parsed, extras

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: {shown(message)} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


def command_word(words: Sequence[str]) -> str | None:
    """The subcommand a command line names, past the global options; None when unsure (an
    abbreviated option, -h), which builds every parser."""
    i = 0
    while i < len(words):
        word = words[i]
        if word in GLOBAL_OPTIONS:
            i += 2
        elif word.startswith(tuple(f"{option}=" for option in GLOBAL_OPTIONS)):
            i += 1
        else:
            return None if word.startswith("-") else word
    return None


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser; with `command`, only that subcommand's parser is built (the
    others are not needed to parse its line); every one if it names none, or one there is not."""
    if command not in BY_NAME:  # no such command: the full parser lists them
        command = None
    parser = Parser(prog="xce", description="XCE batch workload manager")
    parser.add_argument("--controllers", help="host:port,... of the controller replicas")
    parser.add_argument("--cluster", help="the cluster file (replicas, TLS); default $XCE_CLUSTER or "
                                          "the local cluster's")
    sub = parser.add_subparsers(dest="command", required=True)
    for each in COMMANDS:
        if command in (None, each.name):
            each.add_arguments(sub.add_parser(each.name, help=each.help))
    return parser
