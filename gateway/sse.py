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
"""

from __future__ import annotations

import json
import struct
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
                       job.spec.queue)


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
    and what it asked for (?user=, ?queue=, ?job=, repeatable)."""

    name: str
    jobs: bool                     # jobs.read
    every_job: bool                # every user's jobs, or only its own
    cluster: bool                  # cluster.read: hosts and queues
    users: frozenset[str] = frozenset()
    queues: frozenset[str] = frozenset()
    job_ids: frozenset[int] = frozenset()
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
                or self.job_ids and message.job_id not in self.job_ids:
            return False
        if self.users or self.queues or self.job_ids or not self.every_job:  # else every deletion passes
            self.sent.add(message.job_id)
        return True
