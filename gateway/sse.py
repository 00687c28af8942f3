"""The event stream's messages (`GET /xce/v1/events`): what each committed change becomes, who may
see it, and where a resumed stream starts. Pure: events in, messages out.

Each change of the jobs, hosts or queues table in a committed event is one message, in the order of
the events table. Its id is the event's revision, made `REV.N` for all but the last of a revision's
messages (N counts that revision's job, host and queue changes from 0), so that `Last-Event-ID`
names a place exactly: a stream resumed after `REV` starts at the next revision, one resumed after
`REV.N` at the change after N. Types:
- `job.created`: the job's first record (a job, an array's record, or an array's element, made a job
  of its own when it is needed);
- `job.finished`: the record that ended it (DONE or EXIT);
- `job.updated`: any other change of a job; `job.deleted`: cleaned from the live tables (in history);
- `host.updated`, `host.deleted`, `queue.updated`, `queue.deleted`.
A job's type needs its record before the change. A `Classifier` that started from a snapshot (or from
the empty state at revision 0) knows every live job, and types exactly. One that replays the events
after an older revision (a client resuming from before this gateway started) meets jobs it has not
seen: it types a job's first record from the event alone, `job.created` if the entry was a submit,
`job.finished` if the job is DONE or EXIT (a part's late report on a finished job is then typed
finished again), else `job.updated`; every later record of it exactly.
A job message carries the job's summary (no command, environment or paths: GET the job for those,
authorized as every read is); host and queue messages carry the record, as GET /hosts and /queues.

A client's `Cursor` is where it is (the last message it was sent or passed over) and how long it has
been sent nothing. After `interval_s` of its own silence it is sent a `bookmark`: an id, like any
message's, that resumes where it is. It is sent only between revisions (never inside a revision it
is part way through), so a bookmark never passes a message the client is still owed, and never
names a place before one it was sent. A driver that knows the client was given or passed over
every message through a revision (the buffer held nothing more; a catch-up between events) says so
with `reached`, and the bookmark moves there: a filtered client's resume point follows the cluster,
not its own last matching message.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway import render
from gateway.problems import Problem
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

TABLES = ("jobs", "hosts", "queues")
FINISHED = (api.DONE, api.EXIT)
SUMMARY_FIELDS = ("id", "readable_id", "state", "submit_time_ms", "modify_time_ms", "attempt",
                  "pending_reason", "exit_code", "start_time_ms", "end_time_ms", "host", "term_signal",
                  "pending_code", "array_id", "array_index", "exit_reason", "preempted_by", "start_error")
SPEC_FIELDS = ("name", "queue", "slots", "priority", "user", "project")
MAX_ID = (1 << 63) - 1
BOOKMARK_S = 15.0                          # a client sent nothing for this long is sent a bookmark
BOOKMARK_ENV = "XCE_GATEWAY_BOOKMARK_S"    # read when the gateway starts (tests shorten it)
MAX_BOOKMARK_S = 3600.0
MAX_JOB_FILTERS = 100                      # ?job= values in one request


@dataclass(frozen=True, order=True)
class Position:
    """Where a stream is: after change `index` of `revision` (index -1: after the whole revision)."""

    revision: int
    index: int = -1

    def covers(self, revision: int, index: int) -> bool:
        """Whether the message at (revision, index) is at or before this position (already sent)."""
        return revision < self.revision or (
            revision == self.revision and (self.index < 0 or index <= self.index))

    def __str__(self) -> str:
        return str(self.revision) if self.index < 0 else f"{self.revision}.{self.index}"


def parse_position(text: str) -> Position:
    """A Last-Event-ID (or ?since=): "REV" or "REV.N"; a malformed one is a 400."""
    revision, dot, index = text.strip().partition(".")
    digits = revision.isascii() and revision.isdigit() and (not dot or (index.isascii() and index.isdigit()))
    if not digits or len(revision) > 19 or len(index) > 9 or int(revision) > MAX_ID:
        raise Problem(400, f"bad event id {text[:40]!r}: a revision, or REVISION.N")
    return Position(int(revision), int(index) if dot else -1)


@dataclass(frozen=True)
class Message:
    revision: int
    index: int
    last: bool                     # the revision's last job, host or queue change
    type: str
    data: dict[str, Any]
    job_id: int = 0                # for filters and visibility (jobs only)
    user: str = ""
    queue: str = ""
    readable_id: str = ""

    @property
    def id(self) -> str:
        return str(self.revision) if self.last else f"{self.revision}.{self.index}"

    def after(self, position: Position) -> bool:
        return not position.covers(self.revision, self.index)

    def frame(self) -> bytes:
        data = json.dumps(self.data, separators=(",", ":"), sort_keys=True)
        return f"id: {self.id}\nevent: {self.type}\ndata: {data}\n\n".encode()


def resync(reason: str, revision: int) -> bytes:
    """A gap the stream cannot fill (events compacted): the client lists again, then follows."""
    data = json.dumps({"reason": reason, "revision": str(revision)}, separators=(",", ":"))
    return f"id: {revision}\nevent: resync\ndata: {data}\n\n".encode()


def bookmark(revision: int) -> bytes:
    """Everything through `revision` this client may see was sent: its id resumes after it."""
    data = json.dumps({"revision": str(revision)}, separators=(",", ":"))
    return f"id: {revision}\nevent: bookmark\ndata: {data}\n\n".encode()


def bookmark_interval(environ: Mapping[str, str]) -> float:
    """Seconds of a client's silence before its bookmark: $XCE_GATEWAY_BOOKMARK_S, else 15."""
    text = environ.get(BOOKMARK_ENV, "").strip()
    if not text:
        return BOOKMARK_S
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not 0 < seconds <= MAX_BOOKMARK_S:  # also refuses nan
        raise ValueError(f"${BOOKMARK_ENV} wants seconds, more than 0 and at most {MAX_BOOKMARK_S:.0f}, "
                         f"not {text[:40]!r}")
    return seconds


def job_ids(texts: Iterable[str]) -> frozenset[str]:
    """?job= values as a filter matches them: numeric ids in their plain form, readable ids
    (cluster-replica-time-seq, an array's element made a job with [index]) as given; else a 400."""
    out = set()
    for text in texts:
        text = text.strip()
        if _number(text):
            out.add(str(int(text)))
        elif _readable(text):
            out.add(text)
        else:
            raise Problem(400, f"bad job id {text[:80]!r} in ?job=: a number, or cluster-replica-time-seq")
    if len(out) > MAX_JOB_FILTERS:
        raise Problem(400, f"{len(out)} jobs in ?job=: at most {MAX_JOB_FILTERS}")
    return frozenset(out)


def _number(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) <= 19 and int(text) <= MAX_ID


def _readable(text: str) -> bool:
    head, bracket, index = text.partition("[")
    if bracket and not (index.endswith("]") and _number(index[:-1])):
        return False
    parts = head.rsplit("-", 3)
    return (len(parts) == 4 and len(text) <= 200 and text.isprintable() and " " not in parts[0]
            and bool(parts[0]) and _number(parts[1]) and len(parts[2]) == 14 and _number(parts[2])
            and _number(parts[3]))


class Classifier:
    """Types each job change by the record before it: whether each live job is finished now."""

    def __init__(self, complete: bool) -> None:
        """`complete`: it knows every live job (seeded from a snapshot, or at revision 0)."""
        self.complete = complete
        self.finished: dict[int, bool] = {}

    def seed(self, job: api.Job) -> None:
        self.finished[job.id] = job.state in FINISHED

    def messages(self, event: log.Event) -> list[Message]:
        """The messages of one committed event: its job, host and queue changes, in order."""
        changes = [c for c in event.changes if c.table in TABLES]
        out = []
        for index, change in enumerate(changes):
            last = index == len(changes) - 1
            if change.table == "jobs":
                out.append(self._job(event, change, index, last))
                continue
            kind, revision = change.table[:-1], str(event.revision)
            if change.deleted:
                out.append(Message(event.revision, index, last, f"{kind}.deleted",
                                   {"name": change.key.decode(errors="replace"), "revision": revision}))
            else:
                record = (api.Host if kind == "host" else api.Queue).FromString(change.value)
                out.append(Message(event.revision, index, last, f"{kind}.updated",
                                   {kind: render.message(record), "revision": revision}))
        return out

    def _job(self, event: log.Event, change: log.Change, index: int, last: bool) -> Message:
        job_id = struct.unpack(">Q", change.key)[0] if len(change.key) == 8 else 0
        if change.deleted:
            self.finished.pop(job_id, None)
            return Message(event.revision, index, last, "job.deleted",
                           {"id": str(job_id), "revision": str(event.revision)}, job_id)
        job = api.Job.FromString(change.value)
        now = job.state in FINISHED
        before = self.finished.get(job.id)
        self.finished[job.id] = now
        if before is None:
            if self.complete or event.kind == "submit":
                kind = "job.created"
            else:
                kind = "job.finished" if now else "job.updated"
        else:
            kind = "job.finished" if now and not before else "job.updated"
        return Message(event.revision, index, last, kind,
                       {"job": summary(job), "revision": str(event.revision)}, job.id, job.spec.user,
                       job.spec.queue, job.readable_id)


def summary(job: api.Job) -> dict[str, Any]:
    shown = api.Job()
    for name in SUMMARY_FIELDS:
        setattr(shown, name, getattr(job, name))
    for name in SPEC_FIELDS:
        if name != "slots" or job.spec.HasField("slots"):
            setattr(shown.spec, name, getattr(job.spec, name))
    return render.message(shown)


@dataclass
class Audience:
    """One client of the stream: what it may see (from its key, as the controllers answered WhoAmI)
    and what it asked for (?user=, ?queue=, ?job=, repeatable; jobs as `job_ids` makes them)."""

    name: str
    jobs: bool                     # jobs.read
    every_job: bool                # every user's jobs, or only its own
    cluster: bool                  # cluster.read: hosts and queues
    users: frozenset[str] = frozenset()
    queues: frozenset[str] = frozenset()
    job_ids: frozenset[str] = frozenset()
    sent: set[int] = field(default_factory=set)  # jobs it was sent a record of (and not their deletion)

    def admits(self, message: Message) -> bool:
        if not message.type.startswith("job."):
            return self.cluster and not self.users and not self.job_ids and (
                not self.queues or message.type.startswith("queue.") and message.data.get("queue", {})
                .get("name") in self.queues)
        if not self.jobs:
            return False
        if message.type == "job.deleted":  # no record left to judge by: whatever was sent of it
            if message.job_id in self.sent:
                self.sent.discard(message.job_id)
                return True
            return not (self.users or self.queues or self.job_ids) and self.every_job
        if not self.every_job and message.user != self.name:
            return False
        if self.users and message.user not in self.users or self.queues and message.queue not in self.queues \
                or self.job_ids and str(message.job_id) not in self.job_ids \
                and message.readable_id not in self.job_ids:
            return False
        if self.users or self.queues or self.job_ids or not self.every_job:  # else every deletion passes
            self.sent.add(message.job_id)
        return True


class Cursor:
    """One client's place in the stream and its silence: which messages it is sent, and when and
    where its bookmarks are. Times are the driver's monotonic clock, in seconds."""

    def __init__(self, audience: Audience, place: Position, interval_s: float, now_s: float) -> None:
        self.audience = audience
        self.place = place              # the last message it was sent or passed over
        self.interval_s = interval_s
        self.quiet_since_s = now_s      # when it was last sent anything

    def give(self, message: Message, now_s: float) -> bytes | None:
        """The frame of `message` if this client is sent it; either way it is past it now."""
        self.place = Position(message.revision, -1 if message.last else message.index)
        if not self.audience.admits(message):
            return None
        return self._sent(message.frame(), now_s)

    def resync(self, reason: str, place: Position, now_s: float) -> bytes:
        """A gap: the stream goes on after `place`."""
        self.place = place
        return self._sent(resync(reason, place.revision), now_s)

    def reached(self, revision: int) -> None:
        """Every message through `revision` was given or passed over: the place moves there."""
        if revision >= self.place.revision:
            self.place = Position(revision)

    def wait_s(self, now_s: float) -> float:
        """How long until a bookmark is due."""
        return max(0.0, self.quiet_since_s + self.interval_s - now_s)

    def bookmark(self, now_s: float) -> bytes | None:
        """A bookmark, if one is due and the place is between revisions (else at the next one)."""
        if self.wait_s(now_s) > 0 or self.place.index >= 0:
            return None
        return self._sent(bookmark(self.place.revision), now_s)

    def _sent(self, frame: bytes, now_s: float) -> bytes:
        self.quiet_since_s = now_s
        return frame
