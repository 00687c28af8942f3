"""One Slurm command's run: its parser, its session with the cluster, Slurm's exit statuses.

Slurm's commands exit 1 when they refuse or fail and say why as
`sbatch: error: ...`. Options are read as getopt_long reads them (a short
option's value may follow it in the same word: `-n4`, `-pdebug`; a long
one's after `=`), but never guessed: a prefix of a long option is refused
(`--nta`), as XCE's other commands refuse it, so nothing is submitted that
the user did not write. A command that got no answer says so as `xce` does.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn, Protocol, cast

from cli import session
from cli.parser import Parser, UsageError
from client.channel import Client, XceError
from xce.printable import shown

FAILED = 1  # what Slurm's commands exit with when they fail
MODULES = {"sbatch": "sbatch", "squeue": "squeue", "scancel": "scancel", "sacct": "sacct", "sinfo": "sinfo",
           "scontrol": "scontrol"}
WRITES = frozenset({"sbatch", "scancel", "scontrol"})


class Command(Protocol):
    """A module of cli/slurm/: `declare`, `run`, and optionally `prepare(args) -> bool` (before
    connecting; False: nothing to ask the cluster) and SHORT_WITH_VALUE (its short options that take
    a value, for getopt's `-n4`)."""

    def declare(self, parser: argparse.ArgumentParser, name: str) -> None: ...
    def run(self, client: Client, args: argparse.Namespace) -> int: ...


class SlurmParser(Parser):
    """As strict as `xce`'s, in Slurm's words."""

    def error(self, message: str) -> NoReturn:
        if message.startswith("unknown option "):
            option = message.removeprefix("unknown option ")
            message = f"unrecognized option '{option}'"
        print(f"{self.prog}: {shown(message)}", file=sys.stderr)
        print(f'Try "{self.prog} --help" for more information', file=sys.stderr)
        raise SystemExit(FAILED)


def split_short(words: Sequence[str], with_value: str) -> list[str]:
    """getopt's reading of `-n4` (a short option taking a value, its value run in): `-n 4`. Stops at
    the first word that is not an option (a command's own arguments follow it)."""
    out: list[str] = []
    for position, word in enumerate(words):
        if word == "--" or not word.startswith("-") or word == "-":
            return [*out, *words[position:]]
        if not word.startswith("--") and len(word) > 2 and word[1] in with_value:
            out += [word[:2], word[2:]]
        else:
            out.append(word)
    return out


def parse(name: str, words: Sequence[str]) -> tuple[Command, argparse.Namespace]:
    module = cast(Command, importlib.import_module(f"cli.slurm.{MODULES[name]}"))
    parser = SlurmParser(prog=name, add_help=False)
    # (squeue's -h is --noheader)
    help_flags = ("--help",) if name in ("squeue", "sinfo") else ("-h", "--help")
    parser.add_argument(*help_flags, action="help", help="this help")
    module.declare(parser, name)
    words = split_short(list(words), getattr(module, "SHORT_WITH_VALUE", ""))
    args = parser.parse_args(words)
    args.command = name
    args.controllers = None
    return module, args


def run(name: str, words: Sequence[str]) -> int:
    try:
        module, args = parse(name, words)
        prepare = getattr(module, "prepare", None)
        if prepare is not None and not prepare(args):
            return 0
    except (UsageError, ValueError, argparse.ArgumentError) as exc:
        print(f"{name}: error: {shown(str(exc))}", file=sys.stderr)
        return FAILED
    except SystemExit as exc:  # the parser's refusal, said already (or --help)
        return exc.code if isinstance(exc.code, int) else FAILED

    def refused(exc: XceError) -> int:
        print(f"{name}: error: {shown(exc.message)}", file=sys.stderr)
        return FAILED

    return session.connected(args, module.run, words, name in WRITES, refused)


def main(name: str) -> NoReturn:
    """The script's body (xce/slurm_bin.py): run the command, flush, and leave at once."""
    try:
        code: object = run(name, sys.argv[1:])
    except SystemExit as exc:
        code = exc.code
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = FAILED
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        code = 141
    except (OSError, ValueError):
        code = 120
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os._exit(code)
