"""LSF options XCE does not carry out yet: each is known, and refused by name with nothing done."""

from __future__ import annotations

import argparse
from collections.abc import Iterable

from cli.parser import UsageError


class _NotYet(argparse.Action):
    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        raise UsageError(f"{option_string}: this option of LSF's is not carried out by XCE yet")


def declare(parser: argparse.ArgumentParser, with_value: Iterable[str], flags: Iterable[str] = ()) -> None:
    for flag in with_value:
        parser.add_argument(flag, action=_NotYet, help=argparse.SUPPRESS)
    for flag in flags:
        parser.add_argument(flag, action=_NotYet, nargs=0, help=argparse.SUPPRESS)
