"""One Slurm command's run: its parser, its session with the cluster, Slurm's exit statuses.

Slurm's commands exit 1 when they refuse or fail and say why as
`sbatch: error: ...`. Options are read as getopt_long reads them (a short
option's value may follow it in the same word: `-n4`, `-pdebug`; a long
one's after `=` or as the next word, whatever it looks like; bundled flags
`-XPn`), but never guessed: a prefix of a long option is refused (`--nta`),
as XCE's other commands refuse it, so nothing is submitted that the user did
not write. A command that got no answer says so as `xce` does.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from cli import session
from cli.parser import Parser, UsageError
from client.channel import Client, XceError
from xce import proto_load
from xce.printable import shown

TYPE_CHECKING = False  # not typing's: importing it is ~2 ms of every command's start
if TYPE_CHECKING:
    from typing import Any, NoReturn, Protocol

    class Command(Protocol):
        """A module of cli/slurm/: `declare`, `run`, and optionally `prepare(args) -> bool` (before
        connecting; False: nothing to ask the cluster)."""

        def declare(self, parser: argparse.ArgumentParser, name: str) -> None: ...
        def run(self, client: Client, args: argparse.Namespace) -> int: ...

FAILED = 1  # what Slurm's commands exit with when they fail
MODULES = {"sbatch": "sbatch", "squeue": "squeue", "scancel": "scancel", "sacct": "sacct", "sinfo": "sinfo",
           "scontrol": "scontrol", "srun": "srun", "salloc": "salloc"}
WRITES = frozenset({"sbatch", "scancel", "scontrol", "srun", "salloc"})


class SlurmParser(Parser):
    """As strict as `xce`'s, in Slurm's words."""

    def error(self, message: str) -> NoReturn:
        if message.startswith("unknown option "):
            option = message.removeprefix("unknown option ")
            message = f"unrecognized option '{option}'"
        print(f"{self.prog}: {shown(message)}", file=sys.stderr)
        print(f'Try "{self.prog} --help" for more information', file=sys.stderr)
        raise SystemExit(255 if self.prog == "sbatch" else FAILED)  # (Slurm 22.05's sbatch: 255)


def getopt_words(parser: argparse.ArgumentParser, words: Sequence[str], stop_at_argument: bool) -> list[str]:
    """The words as getopt_long reads them, made plain for argparse: an option's value is taken
    whatever it looks like (`-J -foo`, `--job-name -foo`), run into a short one (`-n4`, `-o%i`) or
    after `=`, and bundled letters are flags apart (`-XPn`). Each option and its value come out as
    one word (`-n=4`, `--job-name=-foo`). `stop_at_argument` (sbatch: its script's own arguments
    follow the script): options end at the first word that is not one; else (getopt's permuting)
    arguments may come among options."""
    takes = {option for action in parser._actions if action.nargs != 0 and action.option_strings
             for option in action.option_strings}
    out: list[str] = []
    position = 0
    while position < len(words):
        word = words[position]
        position += 1
        if word == "--":
            return [*out, *words[position - 1:]]
        if not word.startswith("-") or word == "-":
            if stop_at_argument:
                return [*out, "--", *words[position - 1:]]
            out.append(word)
            continue
        if word.startswith("--"):
            if "=" not in word and word in takes and position < len(words):
                word, position = f"{word}={words[position]}", position + 1
            out.append(word)
            continue
        letters = word[1:]
        for index, letter in enumerate(letters):
            if f"-{letter}" not in takes:
                out.append(f"-{letter}")
                continue
            value = letters[index + 1:]
            if not value and position < len(words):
                value, position = words[position], position + 1
            out.append(f"-{letter}={value}")
            break
    return out


def parse(name: str, words: Sequence[str]) -> tuple[Command, argparse.Namespace]:
    module: Command = importlib.import_module(f"cli.slurm.{MODULES[name]}")
    parser = SlurmParser(prog=name, add_help=False)
    # (squeue's -h is --noheader)
    help_flags = ("--help",) if name in ("squeue", "sinfo") else ("-h", "--help")
    parser.add_argument(*help_flags, action="help", help="this help")
    module.declare(parser, name)
    args = parser.parse_args(getopt_words(parser, list(words), name in ("sbatch", "srun", "salloc")))
    args.command = name
    args.controllers = None
    return module, args


def run(name: str, words: Sequence[str]) -> int:
    from cli.slurm import formats

    formats.use_time_format(os.environ.get("SLURM_TIME_FORMAT"))
    try:
        module, args = parse(name, words)
        prepare = getattr(module, "prepare", None)
        if prepare is not None and not prepare(args):
            return 0
    except (UsageError, ValueError, argparse.ArgumentError) as exc:
        for line in str(exc).splitlines():  # each line of a message Slurm prints on several
            print(f"{name}: error: {shown(line)}", file=sys.stderr)
        return FAILED
    except SystemExit as exc:  # the parser's refusal, said already (or --help)
        return exc.code if isinstance(exc.code, int) else FAILED

    def refused(exc: XceError) -> int:
        print(f"{name}: error: {shown(exc.message)}", file=sys.stderr)
        return FAILED

    local = getattr(module, "local", None)
    if local is not None and local(args):  # (srun inside an allocation: the worker carries it)
        try:
            no_client: Any = None
            return module.run(no_client, args)
        except UsageError as exc:
            print(f"{name}: error: {shown(str(exc))}", file=sys.stderr)
            return FAILED
    return session.connected(args, module.run, words, name in WRITES, refused)


def main(name: str) -> NoReturn:
    """The script's body (xce/slurm_bin.py): run the command, flush, and leave at once."""
    from cli.lsf.entry import leave

    proto_load.without_well_known_types()
    try:
        code: object = run(name, sys.argv[1:])
    except SystemExit as exc:
        code = exc.code
    leave(code, FAILED)
