"""One LSF command's run: its parser, its session with the cluster, LSF's exit statuses.

LSF's commands exit 255 when they refuse or fail (a bad option, a job not
found, the cluster refusing) and print why in LSF's words; a command that
got no answer says so as `xce` does (EX_TEMPFAIL). Like `xce`'s client
commands, each ends with os._exit once its output is flushed.
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
        """A module of cli/lsf/. It may also have `prepare(args) -> bool`, run before connecting (False:
        nothing to ask the cluster); a UsageError or ValueError there is refused in LSF's words."""

        def declare(self, parser: argparse.ArgumentParser, name: str) -> None: ...
        def run(self, client: Client, args: argparse.Namespace) -> int: ...
        def refused(self, args: argparse.Namespace, exc: XceError) -> str: ...

FAILED = 255  # what LSF's commands exit with when they fail (-1)
# Commands and the module of cli/lsf/ that runs them (several LSF commands share one).
MODULES = {"bsub": "bsub", "bjobs": "bjobs", "bkill": "bkill", "bstop": "bkill", "bresume": "bkill",
           "brequeue": "bkill", "bpeek": "bpeek", "bqueues": "bqueues", "bhosts": "bhosts", "lsid": "lsid",
           "blaunch": "blaunch", "lsclusters": "lsclusters", "badmin": "badmin", "bhist": "bhist",
           "bmod": "bmod", "bswitch": "bmod", "brun": "bmod", "btop": "bmod", "bbot": "bmod",
           **dict.fromkeys(("lshosts", "lsload", "bmgroup", "bugroup", "bresources", "blimits", "bacct"),
                           "cluster_info"),
           **dict.fromkeys(("bgadd", "bgmod", "bgdel", "bjgroup"), "bgroups"),
           **dict.fromkeys(("brsvadd", "brsvdel", "brsvs"), "brsv")}
# Whether each changes the cluster (an unanswered one may still take effect).
WRITES = frozenset({"bsub", "bkill", "bstop", "bresume", "brequeue", "badmin", "bmod", "bswitch", "brun",
                    "btop", "bbot", "bgadd", "bgmod", "bgdel", "brsvadd", "brsvdel"})


class LsfParser(Parser):
    """As strict as `xce`'s (no abbreviation, no value run into an option), in LSF's words."""

    def error(self, message: str) -> NoReturn:
        if message.startswith("unknown option "):
            message = f"illegal option -- {message.removeprefix('unknown option ').lstrip('-')}"
        print(f"{self.prog}: {shown(message)}", file=sys.stderr)
        print("Usage: " + self.format_usage().removeprefix("usage: ").rstrip(), file=sys.stderr)
        raise SystemExit(FAILED)


def parse(name: str, words: Sequence[str]) -> tuple[Command, argparse.Namespace]:
    module: Command = importlib.import_module(f"cli.lsf.{MODULES[name]}")
    parser = LsfParser(prog=name, add_help=False)
    parser.add_argument("-h", action="help", help="this help")
    module.declare(parser, name)
    bundled = getattr(module, "GETOPT", None)
    if bundled is not None:  # a query command reads letters as getopt does: -aJ name
        from cli.lsf.getopt import expand

        words = expand(words, *bundled)
    args = parser.parse_args(list(words))
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
        print(f"{name}: {shown(said(str(exc), name))}", file=sys.stderr)
        return FAILED
    except SystemExit as exc:  # the parser's refusal, said already (or -h)
        return exc.code if isinstance(exc.code, int) else FAILED

    def refused(exc: XceError) -> int:
        print(module.refused(args, exc), file=sys.stderr)
        return FAILED

    if getattr(module, "LOCAL", False):  # needs no connection of its own (blaunch: the worker's)
        no_client: Any = None
        return module.run(no_client, args)
    return session.connected(args, module.run, words, name in WRITES, refused)


def said(message: str, name: str) -> str:
    """bsub ends a refusal saying nothing was submitted, as LSF's does."""
    if name == "bsub" and not message.endswith("Job not submitted."):
        return f"{message.rstrip('.')}. Job not submitted."
    return message


def main(name: str) -> NoReturn:
    """The script's body (xce/lsf_bin.py): run the command, flush, and leave at once."""
    proto_load.without_well_known_types()
    try:
        code: object = run(name, sys.argv[1:])
    except SystemExit as exc:
        code = exc.code
    leave(code, FAILED)


def leave(code: object, failed: int) -> NoReturn:
    """Exit with `code` (None: 0; not a number: printed, then `failed`) once the output is flushed,
    at once (os._exit: no interpreter teardown after a command's work is done)."""
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = failed
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
