"""A client's write: the door every one goes through, and the handlers of the smaller ones.

`Writes.call(token, method, request, caller)` refuses unless this replica
serves (it leads, caught up, configured), then applies the checks every write
shares: the audit trail's readiness, what a scoped key may call at all, the
permissions the gRPC layer left to the leader (so that a denial is recorded),
and the caller's own request id. It then dispatches through a typed table:
each method names its request type and a handler taking exactly that type.

A handler checks against committed state and proposes; the call is answered
from the state its entry's outcome left (`LeaderContext.propose_request`). A
denied action is recorded in the audit trail before the caller hears of it;
bad input changes nothing, the trail included.

The job writes (submit, control, modify) are in job_writes.py; GetJobOutput is
the worker relay's (workers.py), AddMember and RemoveMember the membership's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple, TypeVar

from google.protobuf.message import Message

from controller import audit_trail, authz, fsm
from controller.authz import Principal
from controller.fsm.versions import KEYED_AUDIT_FORMAT
from controller.leader.context import LeaderContext, WithRequestId, logger, own_request_id
from controller.leader.job_writes import JobWrites, job_response, visible_job
from controller.leader.leadership import Leadership
from controller.submit_rates import SubmitRates
from controller.tables import Tables
from xce import cluster_names
from xce.errors import ServiceError, failed_precondition, invalid, unavailable
from xce.host_spec import check_text
from xce.rules import job_groups
from xce.rules import reservations as reservation_rules
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

if TYPE_CHECKING:
    from controller.leader.membership import Membership
    from controller.leader.workers import Workers

MAX_DECISIONS = 10_000

RECORD_RATE, RECORD_BURST = 5.0, 50  # RecordAudit rows a second per principal, and at once
# Denials recorded a second per principal, and at once: past that, a denial is still answered, its row
# left out (and counted in the log). Anyone may be denied as often as they like; each row costs a
# committed entry, and refusals' rows push out older refusals.
REFUSAL_RATE, REFUSAL_BURST = 5.0, 100

# What a scoped key may call at all (its scope then decides on each job).
SCOPED_METHODS = frozenset({"SubmitJobs", "ControlJob", "ModifyJob", "GetJobOutput", "RecordAudit"})

R = TypeVar("R", bound=Message)


class Route(NamedTuple):
    """A table entry: the request type a method takes, and its handler."""

    kind: type[Message]
    handle: Callable[[Leadership, int, Message, Principal], None]


def route(kind: type[R], handle: Callable[[Leadership, int, R, Principal], None]) -> Route:
    def checked(leadership: Leadership, token: int, request: Message, caller: Principal) -> None:
        assert isinstance(request, kind)  # (Writes.call looked)
        handle(leadership, token, request, caller)

    return Route(kind, checked)


class Writes:
    def __init__(self, ctx: LeaderContext, jobs: JobWrites, workers: Workers, membership: Membership) -> None:
        self.ctx = ctx
        self._audit_rates = SubmitRates(RECORD_RATE, RECORD_BURST)
        self._refusal_rates = SubmitRates(REFUSAL_RATE, REFUSAL_BURST)
        self.table: dict[str, Route] = {
            "SubmitJobs": route(api.SubmitJobsRequest, jobs.submit),
            "ControlJob": route(api.ControlJobRequest, jobs.control),
            "ModifyJob": route(api.ModifyJobRequest, jobs.modify),
            "RunJob": route(api.RunJobRequest, self._run),
            "GetJobOutput": route(api.JobOutputRequest, workers.ask_output),
            "CreateQueue": route(api.PutQueueRequest, self._create_queue),
            "UpdateQueue": route(api.PutQueueRequest, self._update_queue),
            "AcquireLease": route(api.LeaseRequest, self._lease),
            "SubmitDecisions": route(api.DecisionBatch, self._decisions),
            "CreateToken": route(api.CreateTokenRequest, self._create_token),
            "RevokeToken": route(api.RevokeTokenRequest, self._revoke_token),
            "AddMember": route(api.AddMemberRequest, membership.add_member),
            "RemoveMember": route(api.RemoveMemberRequest, membership.remove_member),
            "ControlHost": route(api.ControlHostRequest, self._control_host),
            "PutJobGroup": route(api.PutJobGroupRequest, self._job_group),
            "PutReservation": route(api.PutReservationRequest, self._reservation),
            "RecordAudit": route(api.RecordAuditRequest, self._record_audit),
        }

    def call(self, token: int, method: str, request: Message, caller: Principal) -> None:
        """A client's write, from an authenticated `caller` (the gRPC layer checked the method's
        permission; what needs state, ownership and queues, is checked here)."""
        handler = self.table.get(method)
        if handler is None:
            self.ctx.reply(token, invalid(f"unknown method {method}"))
            return
        if not isinstance(request, handler.kind):
            self.ctx.reply(token, invalid(f"{method} takes a {handler.kind.__name__}, "
                                          f"not a {type(request).__name__}"))
            return
        note: api.AuditRequest | None = None
        try:
            leadership = self._serving()
            format_ = self.ctx.proposal_format()
            note = audit_trail.prepare(method, request, caller, format_)
            # (from format 27 every replica applies `audit` entries: no state to read)
            if note is not None and format_ < KEYED_AUDIT_FORMAT and not self.audit_ready():
                note = None
                raise failed_precondition("the audit trail (and scoped keys) wait until every replica runs "
                                          f"entry format {fsm.versions.AUDIT_FORMAT} (xce status)")
            self._check_caller(method, caller)
            # (a submit's id is made the caller's in the submit's own read; the method is tested first:
            # a runtime Protocol's isinstance costs ~10 us, 3 % of a leader's CPU on submits)
            if method != "SubmitJobs" and isinstance(request, WithRequestId) and request.request_id:
                with self.ctx.state.read() as tables:
                    own_request_id(tables, request, caller)
            if note is not None and method in audit_trail.NOTED and format_ >= KEYED_AUDIT_FORMAT:
                self.ctx.audit_notes[token] = note  # the handler's entry carries it (propose_request)
            handler.handle(leadership, token, request, caller)
        except ServiceError as exc:
            self._refused(token, exc, note, caller)
        finally:
            self.ctx.audit_notes.pop(token, None)  # proposed with its entry, or refused, or not audited

    def _serving(self) -> Leadership:
        leadership = self.ctx.leadership
        if leadership is None or not leadership.configured or not self.ctx.consensus.caught_up():
            raise self.ctx.refusal()
        return leadership

    def _check_caller(self, method: str, caller: Principal) -> None:
        if caller.scope is not None and method not in SCOPED_METHODS:
            raise authz.out_of_scope(caller, f"a scoped key only submits and acts on jobs, not {method}")
        # The gRPC layer left these to the leader, so that a denial is recorded (grpc_api._authorized).
        permission = authz.METHOD_PERMISSION.get(method)
        if permission is not None and (permission in authz.LEADER_CHECKED or caller.scope is not None):
            self.ctx.settings.policy.require(caller, permission)

    def _refused(self, token: int, refusal: ServiceError, note: api.AuditRequest | None,
                 caller: Principal) -> None:
        """A denied action (permission, scope) is recorded before the caller hears of it; bad
        input changes nothing, the trail included."""
        if note is None or refusal.code != log.PERMISSION_DENIED:
            self.ctx.reply(token, refusal)
            return
        if self._refusal_rates.take(caller.name, 1, self.ctx.clock.monotonic_s()):
            logger.warning("%s is denied faster than %g a second: its denials go unrecorded in the audit "
                           "trail for now", caller.name, REFUSAL_RATE)
            self.ctx.reply(token, refusal)
            return
        words = f"{log.Code.Name(refusal.code)}: {refusal.message}"
        self.ctx.propose(audit_trail.entry(note, caller, api.REFUSED, words),
                         lambda _: self.ctx.reply(token, refusal))

    def audit_ready(self) -> bool:
        if self.ctx.proposal_format() < fsm.versions.AUDIT_FORMAT:
            return False
        with self.ctx.state.read() as tables:
            return self.ctx.enabled(tables, "audit")

    # ------------------------------------------------------------ handlers

    def _run(self, leadership: Leadership, token: int, request: api.RunJobRequest, caller: Principal) -> None:
        """Like LSF brun: a DISPATCH through the committed path, with the same host checks."""
        ctx = self.ctx
        ctx.ensure_request_id(request)
        with ctx.state.read() as tables:
            job = visible_job(tables, ctx.settings.policy, request.job_id, caller)
            fsm.decisions.check_dispatch(fsm.CommittedUsage(tables), job, request.host, job.attempt,
                                         ctx.proposal_format())
        dispatch = log.Dispatch(job_id=job.id, host=request.host, attempt=job.attempt,
                                request_id=request.request_id)
        ctx.propose_request(leadership, token, log.Entry(dispatch=dispatch, by=caller.record()),
                            request.request_id, job_response)

    def _create_queue(self, leadership: Leadership, token: int, request: api.PutQueueRequest,
                      caller: Principal) -> None:
        self._put_queue(leadership, token, request, True, caller)

    def _update_queue(self, leadership: Leadership, token: int, request: api.PutQueueRequest,
                      caller: Principal) -> None:
        self._put_queue(leadership, token, request, False, caller)

    def _put_queue(self, leadership: Leadership, token: int, request: api.PutQueueRequest, create: bool,
                   caller: Principal) -> None:
        self.ctx.ensure_request_id(request)
        fsm.validation.check_nesting(request.queue.res_req)
        fsm.check_queue(request.queue)
        with self.ctx.state.read() as tables:
            current = fsm.read_queue(tables, request.queue.name)
        if create and current is not None:
            raise ServiceError(log.ALREADY_EXISTS, f"queue {request.queue.name!r} exists")
        if not create and current is None:
            raise ServiceError(log.NOT_FOUND, f"no queue {request.queue.name!r}")
        if current is not None:
            authz.check_queue_update(self.ctx.settings.policy, caller, current, request.queue)
        entry = log.Entry(put_queue=log.PutQueueEntry(queue=request.queue, request_id=request.request_id,
                                                      create=create), by=caller.record())
        self.ctx.propose_request(leadership, token, entry, request.request_id,
                                 lambda _, settled: api.QueueResponse(queue=request.queue,
                                                                      revision=settled.revision))

    def _job_group(self, leadership: Leadership, token: int, request: api.PutJobGroupRequest,
                   caller: Principal) -> None:
        """bgadd, bgmod, bgdel: anyone who may submit makes a group; its owner (or who may control
        every job) changes or deletes it."""
        self.ctx.ensure_request_id(request)
        try:
            job_groups.check_path(request.path)
        except job_groups.JobGroupError as exc:
            raise invalid(str(exc)) from None
        with self.ctx.state.read() as tables:
            if not self.ctx.enabled(tables, "job_group"):
                raise failed_precondition("not every replica has announced code that keeps job groups yet "
                                          "(xce status: entry kinds in use); retry once they have")
            raw = tables.get("limits", job_groups.limit_name(request.path).encode())
        current = api.Limit.FromString(raw) if raw is not None else None
        if current is not None and not request.create and current.owner != caller.name:
            self.ctx.settings.policy.require(caller, "jobs.control.all",
                                             f"change job group {request.path} of {current.owner}")
        entry = log.Entry(job_group=request, by=caller.record())
        self.ctx.propose_request(leadership, token, entry, request.request_id,
                                 lambda tables, settled: api.JobGroupResponse(
                                     group=job_groups.limit_of(request.path, request.limit, caller.name),
                                     revision=settled.revision))

    def _record_audit(self, leadership: Leadership, token: int, request: api.RecordAuditRequest,
                      caller: Principal) -> None:
        """The gateway's row of what `caller` did through it on another of its clusters (gateway/
        clusters/): the principal is the caller's proven identity, the rest the gateway's report.
        A row that says an action was done or tried needs the permission the action needs here; a
        refusal's row anyone may leave (it records a denial)."""
        ctx = self.ctx
        if ctx.proposal_format() < fsm.versions.FOREIGN_AUDIT_FORMAT or not self.audit_ready():
            raise failed_precondition("rows of other clusters wait until every replica runs entry format "
                                      f"{fsm.versions.FOREIGN_AUDIT_FORMAT} (xce status)")
        cluster = request.cluster
        if not cluster_names.valid(cluster):
            raise invalid(f"cluster: {cluster_names.RULE}")
        if cluster.lower() == ctx.settings.init.cluster_id.lower():
            raise invalid(f"{cluster} is this cluster: its own writes are audited as they are made")
        if request.action not in authz.SCOPE_ACTIONS:
            raise invalid(f"action: one of {', '.join(authz.SCOPE_ACTIONS)}, not {request.action[:40]!r}")
        if request.outcome not in (api.CONFIRMED, api.DRY_RUN, api.REFUSED):
            raise invalid("outcome: CONFIRMED, DRY_RUN or REFUSED")
        if caller.role in ("worker", "scheduler", "replica"):
            raise authz.denied(caller, "jobs.submit", "record a row of another cluster")
        wait_s = self._audit_rates.take(caller.name, 1, ctx.clock.monotonic_s())
        if wait_s:  # the trail is bounded: one principal's rows must not push everyone's out
            raise ServiceError(log.RESOURCE_EXHAUSTED, f"{caller.name} records rows of other clusters "
                                                       f"faster than {RECORD_RATE:g} a second; retry in "
                                                       f"{wait_s:.1f} s")
        check_text("params", request.params)
        check_text("result", request.result)
        if request.outcome != api.REFUSED:
            needed = {"submit": "jobs.submit", "modify": "jobs.modify"}.get(request.action, "jobs.control")
            ctx.settings.policy.require(caller, needed, f"{request.action} on cluster {cluster}")
            authz.check_scope(caller, request.action)
        if caller.scope is not None and caller.scope.clusters and cluster not in caller.scope.clusters:
            raise authz.out_of_scope(caller, f"cluster {cluster!r} is not among its clusters")
        record = api.AuditRecord(via=audit_trail.via_of(caller), action=request.action,
                                 params=request.params[:fsm.audit.MAX_PARAMS], outcome=request.outcome,
                                 result=request.result[:1000], cluster=cluster)
        if ctx.proposal_format() >= KEYED_AUDIT_FORMAT:
            record.key_id = caller.key_id
            record.key_description = caller.key_description[:fsm.audit.MAX_KEY_DESCRIPTION]

        def done(results: list[log.Result] | None) -> None:
            if not results or results[0].code != log.OK:
                ctx.reply(token, unavailable("the row was not committed (leadership changed); retry"))
                return
            with ctx.state.read() as tables:
                revision = fsm.records.read_meta(tables).applied_index
            ctx.reply(token, api.RecordAuditResponse(revision=revision))

        ctx.propose(log.Entry(audit=log.AuditEntry(record=record), by=caller.record()), done)

    def _reservation(self, leadership: Leadership, token: int, request: api.PutReservationRequest,
                     caller: Principal) -> None:
        """brsvadd, brsvdel: who may close hosts (the gRPC layer checked hosts.control) keeps their
        slots for some users; apply checks the hosts and the overlaps at the entry's time."""
        self.ctx.ensure_request_id(request)
        if request.tick:
            raise invalid("a tick of the reservations is the leader's own entry")
        name = request.reservation.name
        try:
            reservation_rules.check_name(name)
        except reservation_rules.ReservationError as exc:
            raise invalid(str(exc)) from None
        with self.ctx.state.read() as tables:
            if not self.ctx.enabled(tables, "reservation"):
                raise failed_precondition("not every replica has announced code that keeps advance "
                                          "reservations yet (xce status: entry kinds in use); retry once "
                                          "they have")
        entry = log.Entry(reservation=request, by=caller.record())
        self.ctx.propose_request(leadership, token, entry, request.request_id,
                                 lambda tables, settled: api.ReservationResponse(
                                     reservation=fsm.reservations.read(tables, name) or api.Reservation(
                                         name=name), revision=settled.revision))

    def _control_host(self, leadership: Leadership, token: int, request: api.ControlHostRequest,
                      caller: Principal) -> None:
        """`xce host close|open` (LSF badmin hclose/hopen): committed, kept across re-joins."""
        self.ctx.ensure_request_id(request)
        check_text("reason", request.reason)
        with self.ctx.state.read() as tables:
            if not self.ctx.enabled(tables, "host_control"):
                raise failed_precondition("not every replica has announced code that closes hosts yet "
                                          "(xce status: entry kinds in use); retry once they have")
            known = fsm.read_host(tables, request.name) is not None
            if not known and fsm.read_result(tables, request.request_id) is None:
                raise ServiceError(log.NOT_FOUND, f"no host {request.name[:80]!r}")
        entry = log.Entry(host_control=request, by=caller.record())
        self.ctx.propose_request(leadership, token, entry, request.request_id,
                                 lambda tables, settled: api.HostResponse(
                                     host=fsm.read_host(tables, request.name), revision=settled.revision))

    def _lease(self, leadership: Leadership, token: int, request: api.LeaseRequest,
               caller: Principal) -> None:
        if not request.scheduler_id or not 0 < request.duration_s <= 3600:
            raise invalid("a scheduler id and 0 < duration_s <= 3600")
        _same_scheduler(caller, request.scheduler_id)
        entry = log.Entry(lease=log.LeaseEntry(scheduler_id=request.scheduler_id[:128],
                                               duration_ms=int(request.duration_s * 1000)),
                          by=caller.record())

        def done(results: list[log.Result] | None) -> None:
            if not results:
                self.ctx.reply(token, unavailable("the lease request's outcome is unknown; retry"))
                return
            result = results[0]
            if result.code not in (log.OK, log.FAILED_PRECONDITION):
                self.ctx.reply(token, ServiceError(result.code, result.message))
                return
            self.ctx.reply(token, api.LeaseResponse(
                granted=result.code == log.OK, epoch=result.lease_epoch, holder=result.lease_holder,
                expires_ms=result.lease_expires_ms, revision=result.revision))

        self.ctx.propose(entry, done)

    def _decisions(self, leadership: Leadership, token: int, batch: api.DecisionBatch,
                   caller: Principal) -> None:
        """One pass's decisions as one entry; outcomes are hints, the view is the truth."""
        if len(batch.decisions) > MAX_DECISIONS:
            raise invalid(f"at most {MAX_DECISIONS} decisions per batch")
        _same_scheduler(caller, batch.scheduler_id)
        with self.ctx.state.read() as tables:
            meta = fsm.read_meta(tables)
        if (batch.lease_epoch, batch.scheduler_id) != (meta.lease_epoch, meta.lease_holder):
            # Refused before the log (apply would refuse it too, after it took space there).
            why = f"stale lease: epoch {batch.lease_epoch} of {batch.scheduler_id!r}; current " \
                  f"{meta.lease_epoch} of {meta.lease_holder!r}"
            outcome = api.DecisionOutcome(code=api.REJECT_STALE_LEASE, message=why)
            self.ctx.reply(token, api.DecisionBatchResponse(
                rejections=[why] * len(batch.decisions), revision=meta.applied_index,
                outcomes=[outcome] * len(batch.decisions)))
            return

        def done(results: list[log.Result] | None) -> None:
            if not results:
                self.ctx.reply(token, unavailable("the batch's outcome is unknown; the view will tell"))
                return
            result = results[0]
            self.ctx.reply(token, api.DecisionBatchResponse(
                rejections=result.rejections, revision=result.revision, outcomes=result.outcomes))

        self.ctx.propose(log.Entry(decisions=batch, by=caller.record()), done)

    def _create_token(self, leadership: Leadership, token: int, request: api.CreateTokenRequest,
                      caller: Principal) -> None:
        self.ctx.ensure_request_id(request)
        fsm.tokens.check_create(request)
        roles = self.ctx.settings.policy.roles
        if request.role not in roles:
            raise invalid(f"unknown role {request.role!r} (roles: {', '.join(sorted(roles))})")
        info = api.TokenInfo(user=request.user, role=request.role, expires_ms=request.expires_ms,
                             created_by=caller.name, description=request.description)
        if request.HasField("scope"):
            authz.check_scope_spec(request.scope)
            if not self.audit_ready():
                raise failed_precondition("scoped keys wait until every replica runs entry format "
                                          f"{fsm.versions.AUDIT_FORMAT} (xce status)")
            info.scope.CopyFrom(request.scope)
        entry = log.Entry(token=log.TokenEntry(sha256=request.sha256, info=info,
                                               request_id=request.request_id), by=caller.record())
        self.ctx.propose_request(leadership, token, entry, request.request_id, _token_response)

    def _revoke_token(self, leadership: Leadership, token: int, request: api.RevokeTokenRequest,
                      caller: Principal) -> None:
        self.ctx.ensure_request_id(request)
        with self.ctx.state.read() as tables:
            if fsm.read_result(tables, request.request_id) is None and \
                    fsm.tokens.find_by_id(tables, request.id) is None:
                raise ServiceError(log.NOT_FOUND, f"no token {request.id!r}")
        entry = log.Entry(token=log.TokenEntry(revoke=True, revoke_id=request.id,
                                               request_id=request.request_id), by=caller.record())
        self.ctx.propose_request(leadership, token, entry, request.request_id,
                                 lambda _, settled: api.TokenResponse(token=api.TokenInfo(id=request.id),
                                                                      revision=settled.revision))


def _same_scheduler(caller: Principal, scheduler_id: str) -> None:
    """The lease and decisions are bound to the authenticated scheduler: it acts only under its own name."""
    if scheduler_id != caller.name:
        raise ServiceError(log.PERMISSION_DENIED, f"{caller.name} may not act as scheduler {scheduler_id!r}")


def _token_response(tables: Tables, result: log.Result) -> api.TokenResponse:
    info = fsm.tokens.read_token(tables, result.message)
    if info is None:
        raise invalid("request id already used by another request")
    return api.TokenResponse(token=info, revision=result.revision)
