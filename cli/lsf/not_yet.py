"""LSF's (and Slurm's) options XCE does not carry out yet: each is known, and refused by name with
nothing done."""

from __future__ import annotations

import argparse
from collections.abc import Iterable

from cli.parser import UsageError


class _NotYet(argparse.Action):
    system = "LSF"

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        raise UsageError(f"{option_string}: this option of {self.system}'s is not carried out by XCE yet")


class _SlurmNotYet(_NotYet):
    system = "Slurm"


def declare(parser: argparse.ArgumentParser, with_value: Iterable[str], flags: Iterable[str] = (),
            system: str = "LSF") -> None:
    action = _SlurmNotYet if system == "Slurm" else _NotYet
    for flag in with_value:
        parser.add_argument(flag, action=action, help=argparse.SUPPRESS)
    for flag in flags:
        parser.add_argument(flag, action=action, nargs=0, help=argparse.SUPPRESS)
