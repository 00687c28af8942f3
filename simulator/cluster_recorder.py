"""`xce record`: a cluster's committed history, written as a recording (simulator/recording_file.py).

Theory of operation. The recorder reads the leader's Sync stream, as a
scheduler does, and writes what it reads:
- the whole history (the default) or from a revision (`--from REV`): a
  recorder's stream (`history`) sends every event from the first; those up
  to REV make the baseline (the view at REV), the later ones are the
  recording, up to where the leader had applied when it was asked (its first
  progress mark). The state at REV is rebuilt from every event before it, so
  once events were compacted (the events floor is past 0) only `--follow`
  records; the refusal names the floor.
- `--follow`: the view now (a snapshot) is the baseline, and every event
  after it is written as it commits, until the recorder is stopped (SIGINT,
  SIGTERM) or `--until REV` is reached. A broken stream (a leader killed) is
  resumed after the last event written, from whichever replica leads.
Every recording ends with its end record; one without it was cut short.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TextIO

from client.channel import Client, XceError
from client.sync_follow import GIVE_UP_S, sync_messages
from scheduler.view import View
from simulator import recording_file
from xce.v1 import log_pb2 as log


@dataclass
class Recorded:
    from_revision: int
    last_revision: int
    events: int


class Recorder:
    def __init__(self, client: Client, out: TextIO, stop: threading.Event | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.out = out
        self.stop = stop or threading.Event()
        self.clock = clock
        self.revision = 0  # the last revision read (and written, once the baseline is)
        self.events = 0

    def history(self, from_revision: int = 0) -> Recorded:
        """Every event up to the leader's applied revision, the baseline folded to `from_revision`."""
        baseline = View()  # the events up to from_revision, folded as a scheduler's view folds them
        started = False
        for message in self._messages(history=True):
            kind = message.WhichOneof("body")
            if kind == "event":
                event = message.event
                if event.revision <= from_revision:
                    baseline.apply(message)
                    self.revision = event.revision
                    continue
                if not started:
                    self._begin(from_revision, baseline.tables)
                    started = True
                self._write(event)
            elif kind == "progress":
                if message.progress < from_revision:
                    raise XceError("OUT_OF_RANGE", f"revision {from_revision} is ahead of the cluster's "
                                                   f"({message.progress})")
                break
        if not started:
            self._begin(from_revision, baseline.tables)
        return self._end(from_revision)

    def follow(self, until: int = 0) -> Recorded:
        """The view now, then every event as it commits, until stopped (or past `until`)."""
        rows: recording_file.Rows = {t: {} for t in recording_file.TABLES}
        start = -1
        for message in self._messages(history=False):
            kind = message.WhichOneof("body")
            if start < 0:
                if kind == "snapshot_begin":  # (again, if the stream broke in the middle of one)
                    rows = {t: {} for t in recording_file.TABLES}
                elif kind == "snapshot_chunk":
                    for change in message.snapshot_chunk.records:
                        if change.table in rows:
                            rows[change.table][change.key] = change.value
                elif kind == "snapshot_end":
                    start = self.revision = message.snapshot_end.revision
                    self._begin(start, rows)
                continue
            if kind == "event":
                self._write(message.event)
            if until and self.revision >= until:
                break
        return self._end(max(start, 0))

    # -------------------------------------------------------------- the stream

    def _messages(self, history: bool) -> Iterator[log.SyncMessage]:
        """The stream's messages, resumed after the last event read when it breaks (until stopped)."""
        return sync_messages(self.client, history, lambda: self.revision, self.stop, self.clock, GIVE_UP_S)

    # -------------------------------------------------------------- the file

    def _begin(self, from_revision: int, rows: recording_file.Rows) -> None:
        self.out.write(recording_file.header_line(from_revision, recorded_by="xce record"))
        for line in recording_file.baseline_lines(rows):
            self.out.write(line)
        self.revision = from_revision

    def _write(self, event: log.Event) -> None:
        self.out.write(recording_file.event_line(event))
        self.revision = event.revision
        self.events += 1

    def _end(self, from_revision: int) -> Recorded:
        last = self.revision if self.events else from_revision
        self.out.write(recording_file.end_line(last, self.events))
        self.out.flush()
        return Recorded(from_revision, last, self.events)
