"""A recording of a cluster's committed history: what `xce record` writes and `xce sim` reads.

Theory of operation. A recording is the scheduler's view at one revision
(the baseline) and every committed event after it, as JSON lines
(docs/recording.md documents each field):
- a header: `{"recording": "xce", "version": 1, "from_revision": R, ...}`;
- the baseline, a row a line: `{"baseline": TABLE, "key": K, "value": V}`,
  where TABLE is one of the tables a scheduler's view holds (TABLES), K the
  row's key (a job id, else a name) and V the record as JSON (protobuf's
  mapping, field names as in proto/xce/v1/api.proto), or a counter's value;
- the events: `{"revision": N, "kind": ..., "by": [...], "changes": [...]}`,
  each change `{"table", "key", "value"}` or `{"table", "key", "deleted":
  true}`, and for a decisions entry its `batch`: the pass's decisions with
  the inputs that let it be re-run (view revision, planner state, settings);
- an end: `{"end": {"revision": N, "events": M}}`. A recording without it
  was cut short (the recorder was killed, the disk filled) and is refused.

Only the view's tables are kept: a replay needs what a pass read, nothing
more. Pure: reading and writing text; no I/O but the file given.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from google.protobuf import json_format
from google.protobuf.message import Message

from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

VERSION = 1
MAGIC = "xce"
TABLES = ("jobs", "queues", "hosts", "counters", "shared", "limits", "share_usage")  # scheduler/view.py
_RECORDS: dict[str, type[Message]] = {"jobs": api.Job, "queues": api.Queue, "hosts": api.Host,
                                      "shared": api.SharedResource, "limits": api.Limit,
                                      "share_usage": api.ShareUsage}

Rows = dict[str, dict[bytes, bytes]]


class RecordingError(ValueError):
    """A file that is not a whole recording this code reads: the message names the file and line."""


@dataclass
class Recording:
    from_revision: int
    baseline: Rows = field(default_factory=lambda: {t: {} for t in TABLES})
    events: list[log.Event] = field(default_factory=list)
    header: dict[str, Any] = field(default_factory=dict)

    @property
    def last_revision(self) -> int:
        return self.events[-1].revision if self.events else self.from_revision


# ---------------------------------------------------------------- writing

def header_line(from_revision: int, **more: Any) -> str:
    return _line({"recording": MAGIC, "version": VERSION, "from_revision": from_revision, **more})


def baseline_lines(rows: Rows) -> Iterator[str]:
    for table in TABLES:
        for key, value in sorted(rows.get(table, {}).items()):
            yield _line({"baseline": table, "key": _key_out(table, key), "value": _value_out(table, value)})


def event_line(event: log.Event) -> str:
    out: dict[str, Any] = {"revision": event.revision, "kind": event.kind}
    if event.by:
        out["by"] = list(event.by)
    changes = []
    for change in event.changes:
        if change.table not in TABLES:
            continue
        one: dict[str, Any] = {"table": change.table, "key": _key_out(change.table, change.key)}
        if change.deleted:
            one["deleted"] = True
        else:
            one["value"] = _value_out(change.table, change.value)
        changes.append(one)
    out["changes"] = changes
    if event.HasField("rejected"):
        out["rejected"] = as_json(event.rejected)
    if event.HasField("batch"):
        out["batch"] = as_json(event.batch)
    return _line(out)


def end_line(revision: int, events: int) -> str:
    return _line({"end": {"revision": revision, "events": events}})


# ---------------------------------------------------------------- reading

def read(path: Path) -> Recording:
    """The whole recording; RecordingError (file:line, what is wrong) for anything else."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RecordingError(f"{path}: cannot read it: {exc}") from None
    return parse(text.splitlines(keepends=True), str(path))


def parse(lines: Iterable[str], name: str) -> Recording:
    recording: Recording | None = None
    ended = False
    number = 0
    for number, line in enumerate(lines, 1):
        record = _json_line(line, name, number)
        if recording is None:
            recording = _header(record, name)
            continue
        if ended:
            raise RecordingError(f"{name}:{number}: a line after the end record")
        try:
            ended = _take(recording, record)
        except (KeyError, TypeError, ValueError, json_format.ParseError) as exc:
            what = f"missing {exc}" if isinstance(exc, KeyError) else str(exc)
            raise RecordingError(f"{name}:{number}: {what}") from None
    if recording is None:
        raise RecordingError(f"{name}: empty: not a recording")
    if not ended:
        raise RecordingError(f"{name}: truncated recording: no end record after line {number} (revision "
                             f"{recording.last_revision}); the recorder stopped before it finished")
    return recording


def _json_line(line: str, name: str, number: int) -> dict[str, Any]:
    if not line.endswith("\n"):
        raise RecordingError(f"{name}:{number}: truncated recording: the last line is incomplete")
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise RecordingError(f"{name}:{number}: not a JSON line ({exc.msg})") from None
    if not isinstance(record, dict):
        raise RecordingError(f"{name}:{number}: not a JSON object")
    return record


def _take(recording: Recording, record: dict[str, Any]) -> bool:
    """One line after the header into the recording; whether it was the end record."""
    if "baseline" in record:
        if recording.events:
            raise ValueError("a baseline row after the events")
        table = _table(record["baseline"])
        recording.baseline[table][_key_in(table, record["key"])] = _value_in(table, record["value"])
        return False
    if "revision" in record:
        event = _event(record)
        last = recording.last_revision
        if event.revision <= last:
            raise ValueError(f"revision {event.revision} is not after {last}")
        recording.events.append(event)
        return False
    if "end" in record:
        end = record["end"]
        count = len(recording.events)
        if end.get("revision") != recording.last_revision or end.get("events") != count:
            raise ValueError(f"the end record says revision {end.get('revision')} and "
                             f"{end.get('events')} events; the file holds {len(recording.events)} "
                             f"events to revision {recording.last_revision}")
        return True
    raise ValueError(f"neither a baseline row, an event nor the end: keys {sorted(record)}")


def _header(record: dict[str, Any], name: str) -> Recording:
    if record.get("recording") != MAGIC:
        raise RecordingError(f"{name}:1: not an XCE recording (its first line is no recording header)")
    version = record.get("version")
    if version != VERSION:
        raise RecordingError(f"{name}:1: recording version {version!r}; this xce reads version {VERSION} "
                             "(record again, or read it with the xce that wrote it)")
    start = record.get("from_revision")
    if not isinstance(start, int) or start < 0:
        raise RecordingError(f"{name}:1: from_revision must be a revision (a whole number), not {start!r}")
    return Recording(start, header=record)


def _event(record: dict[str, Any]) -> log.Event:
    revision = record["revision"]
    if not isinstance(revision, int) or revision <= 0:
        raise ValueError(f"revision must be a positive whole number, not {revision!r}")
    event = log.Event(revision=revision, kind=str(record.get("kind", "")), by=record.get("by", []))
    for change in record["changes"]:
        table = _table(change["table"])
        key = _key_in(table, change["key"])
        if change.get("deleted"):
            event.changes.add(table=table, key=key, deleted=True)
        else:
            event.changes.add(table=table, key=key, value=_value_in(table, change["value"]))
    if "rejected" in record:
        json_format.ParseDict(record["rejected"], event.rejected)
    if "batch" in record:
        json_format.ParseDict(record["batch"], event.batch)
    return event


def _table(name: object) -> str:
    if name not in TABLES:
        raise ValueError(f"unknown table {name!r} (known: {', '.join(TABLES)})")
    return str(name)


def _key_out(table: str, key: bytes) -> int | str:
    return struct.unpack(">Q", key)[0] if table == "jobs" else key.decode()


def _key_in(table: str, key: object) -> bytes:
    if table == "jobs":
        if not isinstance(key, int) or key < 0:
            raise ValueError(f"a job's key is its id, not {key!r}")
        return struct.pack(">Q", key)
    if not isinstance(key, str):
        raise ValueError(f"a {table} key is a name, not {key!r}")
    return key.encode()


def _value_out(table: str, value: bytes) -> Any:
    if table == "counters":
        return struct.unpack(">q", value)[0]
    return as_json(_RECORDS[table].FromString(value))


def _value_in(table: str, value: object) -> bytes:
    if table == "counters":
        if not isinstance(value, int):
            raise ValueError(f"a counter's value is a whole number, not {value!r}")
        return struct.pack(">q", value)
    if not isinstance(value, dict):
        raise ValueError(f"a {table} value is a JSON object, not {value!r}")
    return json_format.ParseDict(value, _RECORDS[table]()).SerializeToString(deterministic=True)


def as_json(message: Message) -> dict[str, Any]:
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def _line(record: dict[str, Any]) -> str:
    return json.dumps(record, separators=(",", ":"), sort_keys=True) + "\n"


def write_all(out: TextIO, recording: Recording) -> None:
    """A whole recording (tests, and a recording cut from another)."""
    out.write(header_line(recording.from_revision))
    for line in baseline_lines(recording.baseline):
        out.write(line)
    for event in recording.events:
        out.write(event_line(event))
    out.write(end_line(recording.last_revision, len(recording.events)))
