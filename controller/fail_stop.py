"""Stopping a replica that must not carry on: the Raft adapter's one exit.

An entry this code cannot apply, a bug in apply, storage failing, or an applied entry about to be
replaced: the replica logs why and exits with FAIL_STOP_EXIT at once (no cleanup that could write),
its WAL and state as they were. Callers look `fail_stop` up on this module at each call, so a test
can replace it in one place.
"""

from __future__ import annotations

import logging
import os
from typing import NoReturn

log = logging.getLogger(__name__)

FAIL_STOP_EXIT = 70  # EX_SOFTWARE


class LogRemovalRefused(RuntimeError):
    """pysyncobj was about to remove log entries that Raft's rule keeps (raft_append.py)."""


def fail_stop(exc: BaseException, doing: str = "writing the Raft log") -> NoReturn:
    log.critical("FATAL: %s failed; stopping this replica (exit %d): %r", doing, FAIL_STOP_EXIT, exc,
                 exc_info=exc)
    logging.shutdown()
    os._exit(FAIL_STOP_EXIT)
