"""One log format for every daemon, fit for the journal and for grep.

Each line is `WHO LEVEL LOGGER: message`, WHO naming the daemon
(`replica-2`, `worker-n17`, `scheduler-sched-a`), so the logs of several
daemons grep alike. On a terminal or in a file the line starts with the
time. Under systemd, whose journal stamps every line itself
($JOURNAL_STREAM is set when stderr is the journal), it starts instead
with the syslog priority (`<4>` for a warning), which the journal takes as
the entry's priority: `journalctl -u xce-controller@1 -p warning` shows
warnings and worse.
"""

from __future__ import annotations

import logging
import os
import sys

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
    root.addHandler(handler)
    root.setLevel(level)
    logging.getLogger("pysyncobj").setLevel(logging.WARNING)
