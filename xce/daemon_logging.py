"""One log format for every daemon, fit for the journal and for grep.

Each line is `WHO LEVEL LOGGER: message`, WHO naming the daemon
(`replica-2`, `worker-n17`, `scheduler-sched-a`), so the logs of several
daemons grep alike. On a terminal or in a file the line starts with the
time. Under systemd, whose journal stamps every line itself
($JOURNAL_STREAM is set when stderr is the journal), it starts instead
with the syslog priority (`<4>` for a warning), which the journal takes as
the entry's priority: `journalctl -u xce-controller@1 -p warning` shows
warnings and worse.

Repeated warnings and errors are rate-limited (`RepeatFilter`): a flood of
the same complaint (a peer that keeps failing its handshake, accept() out of
descriptors) would otherwise fill the disk; each message template is let
through a few times a period, and the count of those dropped is said once
the period ends. Information (a job started, ended) is never dropped.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable

_PRIORITY = {logging.DEBUG: 7, logging.INFO: 6, logging.WARNING: 4, logging.ERROR: 3, logging.CRITICAL: 2}


class _JournalFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return f"<{_PRIORITY.get(record.levelno, 6)}>{super().format(record)}"


def _stderr_is_journal() -> bool:
    """$JOURNAL_STREAM names the journal's stream as DEVICE:INODE; inherited, so check it is stderr's."""
    try:
        device, inode = (int(part) for part in os.environ.get("JOURNAL_STREAM", "").split(":"))
        st = os.fstat(sys.stderr.fileno())
    except (ValueError, OSError):
        return False
    return (st.st_dev, st.st_ino) == (device, inode)


class RepeatFilter(logging.Filter):
    """Lets each message template (logger, level, format string) of a warning or worse through at most
    `burst` times per `period_s`; the first record of it after a period in which some were dropped
    says how many. Bounded: at most `max_keys` templates are tracked (the oldest period is forgotten
    first)."""

    def __init__(self, burst: int = 10, period_s: float = 10.0, max_keys: int = 1024,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.burst = burst
        self.period_s = period_s
        self.max_keys = max_keys
        self._clock = clock
        self._seen: dict[tuple[str, int, str], list[float]] = {}  # key -> [period start, passed, dropped]
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        key = (record.name, record.levelno, str(record.msg))
        now = self._clock()
        with self._lock:
            seen = self._seen.get(key)
            if seen is None or now - seen[0] >= self.period_s:
                dropped = int(seen[2]) if seen is not None else 0
                if seen is None and len(self._seen) >= self.max_keys:
                    del self._seen[min(self._seen, key=lambda k: self._seen[k][0])]
                self._seen[key] = [now, 1, 0]
                if dropped:
                    record.msg = f"{record.msg} [{dropped} more like this in the last " \
                                 f"{self.period_s:.0f} s were not logged]"
                return True
            if seen[1] < self.burst:
                seen[1] += 1
                return True
            seen[2] += 1
            return False


def setup(who: str, level: int = logging.INFO) -> None:
    """Log to stderr as `who`; replaces any handler set before (a daemon sets this up once, first)."""
    body = f"{who} %(levelname)s %(name)s: %(message)s"
    handler = logging.StreamHandler(sys.stderr)
    if _stderr_is_journal():
        handler.setFormatter(_JournalFormatter(body))
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s " + body))
    root = logging.getLogger()
    for old in root.handlers[:]:
        root.removeHandler(old)
    handler.addFilter(RepeatFilter())
    root.addHandler(handler)
    root.setLevel(level)
    logging.getLogger("pysyncobj").setLevel(logging.WARNING)
