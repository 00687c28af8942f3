"""What one leadership keeps: a small record per concern, each owned by one part of the leader.

A leadership starts when the consensus says this replica leads in a Raft term,
and is dropped whole when it no longer does (or leads in another term): its
worker streams end, its waiters are told UNAVAILABLE, and the next leadership
starts afresh; workers re-join and everything is derived again. Nothing here
outlives it, so nothing needs undoing at a step down beyond telling waiters.

- `WriteState` (writes.py, job_writes.py): client submits being group-committed,
  pending counts, a scoped key's work in flight;
- `WorkerState` (workers.py): worker streams and sessions, joins and reports
  being group-committed, host liveness, output requests in flight;
- `UpkeepState` (upkeep.py): the configuration push, the host watchdog, load commits;
- `MemberState` (membership.py): announcements and the membership step in flight.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from controller.group_commit import GroupCommit
from controller.host_liveness import Liveness
from controller.load_commits import LoadCommits
from controller.output_relay import OutputRelay
from controller.pending_counts import PendingCounts
from controller.watchdog import Watchdog
from controller.worker_session import WorkerSession
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

MAX_REPORTS_PER_ENTRY = 4096

Submit = tuple[api.SubmitJobsRequest, log.Principal]  # a submit request and who sent it


@dataclass
class WriteState:
    submits: GroupCommit[tuple[int, Submit]]  # (call token, request)
    pending: PendingCounts = field(default_factory=PendingCounts)  # per user, for MAX_PEND_JOBS
    # A scoped key's submits and requeues proposed but not yet applied: (jobs, slots) per user, so that
    # requests checked while a batch commits all count (authz.check_scope_totals); and per call token.
    scoped_in_flight: dict[str, tuple[int, int]] = field(default_factory=dict)
    scoped_tokens: dict[int, tuple[str, int, int]] = field(default_factory=dict)

    def scoped(self, user: str) -> tuple[int, int]:
        """The (jobs, slots) this user's scoped calls have in flight."""
        return self.scoped_in_flight.get(user, (0, 0))

    def hold_scoped(self, token: int, user: str, jobs: int, slots: int) -> None:
        held_jobs, held_slots = self.scoped(user)
        self.scoped_in_flight[user] = (held_jobs + jobs, held_slots + slots)
        self.scoped_tokens[token] = (user, jobs, slots)

    def release_scoped(self, token: int) -> None:
        held = self.scoped_tokens.pop(token, None)
        if held is None:
            return
        user, jobs, slots = held
        left = self.scoped(user)
        remaining = (left[0] - jobs, left[1] - slots)
        if remaining[0] <= 0 and remaining[1] <= 0:
            self.scoped_in_flight.pop(user, None)
        else:
            self.scoped_in_flight[user] = remaining


@dataclass
class WorkerStream:
    phase: str = "join"  # join -> joining -> session
    host: str | None = None  # the host its credential proves (None: an in-process caller, tests)
    session: WorkerSession | None = None
    early: list[api.WorkerMessage] = field(default_factory=list)  # arrived while the join commits
    parts: bool = False  # its worker keeps parts of jobs whose first host is another (the join said)
    output: bool = False  # its worker reads job output for the leader (OutputRequest; the join said)


@dataclass
class WorkerState:
    liveness: Liveness
    outputs: OutputRelay = field(default_factory=OutputRelay)  # output requests in flight (output_relay.py)
    reports: GroupCommit[tuple[int, log.HostReport]] = field(
        default_factory=lambda: GroupCommit(MAX_REPORTS_PER_ENTRY))
    joins: GroupCommit[tuple[int, api.HostSpec]] = field(
        default_factory=lambda: GroupCommit(MAX_REPORTS_PER_ENTRY))
    streams: dict[int, WorkerStream] = field(default_factory=dict)
    sessions: dict[str, int] = field(default_factory=dict)  # host -> its current stream
    to_step: dict[int, None] = field(default_factory=dict)  # streams whose sessions have work, in order
    next_sweep_s: float = 0.0


@dataclass
class UpkeepState:
    watchdog: Watchdog
    loads: LoadCommits = field(default_factory=lambda: LoadCommits(0.0))
    configured: bool = False
    config_in_flight: bool = False
    config_retry_s: float = 0.0
    reconfigure: bool = False  # an announcement committed: settings of a newer format may apply now
    reservation_tick_in_flight: bool = False  # a tick of the reservations proposed, not settled


@dataclass
class MemberState:
    announcing: set[int] = field(default_factory=set)
    next_poll_s: float = 0.0
    step: str = ""  # the membership step in progress (a proposal or Raft change); "": none
    retry_s: float = 0.0
    next: tuple[object, float] | None = None  # the next step, and when it was first seen


@dataclass
class Leadership:
    number: int
    raft_term: int
    writes: WriteState
    workers: WorkerState
    upkeep: UpkeepState
    membership: MemberState = field(default_factory=MemberState)

    @property
    def configured(self) -> bool:
        """Its configuration push is done: it serves (once caught up)."""
        return self.upkeep.configured
