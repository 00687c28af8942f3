"""The job writes: submit, control (kill, suspend, requeue, ...) and modify.

Each is checked against committed state before it is proposed: the caller
may see the job (private jobs are not found), may act on it (owner, queue
administrator, role), stays within its key's scope and limits and its pending
job limit; specs are checked as apply will check them, with the entry format in
use. Submits are group-committed (many requests, one entry); a control or
modify is one entry and is answered from the state its outcome left.

A scoped key's submits and requeues count toward its limits while they are in
flight too (`WriteState.hold_scoped`), so that requests checked while a batch
commits do not all pass the same limit.
"""

from __future__ import annotations

from controller import audit_trail, authz, fsm, proposals
from controller.authz import Principal
from controller.fsm import dependency_refs
from controller.fsm.versions import ARRAY_FORMAT
from controller.leader.context import LeaderContext, own_request_id
from controller.leader.leadership import Leadership, Submit
from controller.submit_rates import SubmitRates
from controller.tables import Tables
from xce.errors import ServiceError, invalid, unavailable
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log


class JobWrites:
    def __init__(self, ctx: LeaderContext) -> None:
        self.ctx = ctx
        policy = ctx.settings.policy
        self._submit_rates = SubmitRates(policy.submit_rate_per_user, policy.submit_burst_per_user)

    def submit(self, leadership: Leadership, token: int, request: api.SubmitJobsRequest,
               caller: Principal) -> None:
        ctx, policy = self.ctx, self.ctx.settings.policy
        with ctx.state.read() as tables:
            if request.request_id:
                own_request_id(tables, request, caller)
            ctx.ensure_request_id(request)
            earlier = fsm.read_result(tables, request.request_id)
            if earlier is not None:
                ctx.reply(token, submitted(tables, request.request_id, earlier))
                return
            wanted = self._check_count(leadership, tables, request, caller)
            meta = fsm.read_meta(tables)
            self._check_specs(tables, meta, request, caller)
            more_slots = sum((self._array_size(s) if s.HasField("array") else 1) * (s.slots or 1)
                             for s in request.jobs)
            self._check_scope_totals(leadership, tables, caller, wanted, more_slots)
            if request.HasField("audit") and request.audit.dry_run:
                shown = [_with_defaults(spec, meta) for spec in request.jobs]
                self._dry_run(token, request.audit, caller, api.SubmitJobsResponse(
                    jobs=[api.Job(spec=spec, state=api.PEND) for spec in shown], revision=meta.applied_index),
                    audit_trail.would_submit(shown))
                return
        if not policy.exempt(caller):
            wait_s = self._submit_rates.take(caller.name, wanted, ctx.clock.monotonic_s())
            if wait_s:
                raise ServiceError(log.RESOURCE_EXHAUSTED,
                                   f"{caller.name} submits faster than {policy.submit_rate_per_user:g} jobs "
                                   f"a second (at most {policy.submit_burst_per_user} at once: [auth] "
                                   f"submit_rate_per_user); {wanted} more fit in {wait_s:.1f} s")
        self._hold_scoped(leadership, token, caller, wanted, more_slots)
        writes = leadership.writes
        writes.submits.add((token, (request, caller.record())), request.ByteSize())
        ctx.flush(leadership, writes.submits, _submit_entry, self._submits_settled)

    def _check_count(self, leadership: Leadership, tables: Tables, request: api.SubmitJobsRequest,
                     caller: Principal) -> int:
        """How many jobs the request adds, if the request and the caller's pending limit allow them."""
        policy = self.ctx.settings.policy
        if not request.jobs:
            raise invalid("no jobs in the request")
        if len(request.jobs) > policy.max_jobs_per_request:
            raise invalid(f"{len(request.jobs)} jobs in one request; at most "
                          f"{policy.max_jobs_per_request} ([auth] max_jobs_per_request)")
        # An array counts as its elements (LSF counts each element toward MAX_PEND_JOBS).
        wanted = sum(self._array_size(spec) if spec.HasField("array") else 1 for spec in request.jobs)
        limit = 0 if policy.exempt(caller) else policy.max_pend_jobs_per_user
        pending = leadership.writes.pending.count(tables, caller.name) if limit else 0
        if limit and pending + wanted > limit:
            raise ServiceError(log.RESOURCE_EXHAUSTED,
                               f"{caller.name} has {pending} pending jobs; {wanted} more "
                               f"would pass {limit} ([auth] max_pend_jobs_per_user)")
        return wanted

    def _check_specs(self, tables: Tables, meta: log.Meta, request: api.SubmitJobsRequest,
                     caller: Principal) -> None:
        """Each spec as apply will check it, owned by the caller, in queues it may submit to."""
        policy, format_ = self.ctx.settings.policy, self.ctx.proposal_format()
        queues: dict[str, api.Queue | None] = {}
        for spec in request.jobs:
            spec.user = caller.name  # the owner is who proved it, never what the request says
            fsm.validation.check_nesting(spec.resource_req, spec.depend)
            fsm.check_spec(tables, meta, spec, format_)
            fsm.validation.check_min_slots_known(spec, format_)
            fsm.validation.check_lsf_options_known(spec, format_)
            if spec.depend and policy.private_jobs:
                # A job the caller may not see is unknown to it, in -w too: its end would leak.
                for named in dependency_refs.named(tables, spec):
                    if not authz.visible(policy, caller, named):
                        raise invalid(dependency_refs.UNKNOWN.format(named.id))
            name = spec.queue or meta.default_queue or fsm.DEFAULT_QUEUE
            if name not in queues:
                queues[name] = fsm.read_queue(tables, name)
                authz.check_submit_queue(policy, caller, queues[name])
            authz.check_priority(policy, caller, queues[name], spec.priority)
            authz.check_scope(caller, "submit", [name], caller.name)

    def _submits_settled(self, leadership: Leadership, batch: list[tuple[int, Submit]],
                         answers: list[log.Result | None]) -> None:
        # Answered even when the leadership ended meanwhile: the callers are waiting.
        with self.ctx.state.read() as tables:
            for (token, (request, _)), result in zip(batch, answers, strict=True):
                leadership.writes.release_scoped(token)  # applied (or not): the committed count says it now
                try:
                    self.ctx.reply(token, submitted(tables, request.request_id, result))
                except ServiceError as exc:
                    self.ctx.reply(token, exc)

    def control(self, leadership: Leadership, token: int, request: api.ControlJobRequest,
                caller: Principal) -> None:
        ctx = self.ctx
        ctx.ensure_request_id(request)
        with ctx.state.read() as tables:
            job, is_array = self._target_for(tables, request.job_id, caller)
            action = api.ControlAction.Name(request.action).lower() if request.action in \
                api.ControlAction.values() else "control"
            authz.check_job_action(ctx.settings.policy, caller, job, fsm.read_queue(tables, job.spec.queue),
                                   "jobs.control", action)
            authz.check_scope(caller, action, [job.spec.queue], job.spec.user)
            transition = None
            if fsm.read_result(tables, request.request_id) is None and not is_array:
                transition = fsm.jobs.check_control(job, request.action, ctx.proposal_format())
            # A requeue makes finished work unfinished again: it counts against the key's limits.
            revived = 0
            if request.action == api.REQUEUE and caller.scope is not None:
                revived = sum(job.array.counts[s] for s in fsm.FINISHED if s < len(job.array.counts)) \
                    if is_array else int(job.state in fsm.FINISHED)
                self._check_scope_totals(leadership, tables, caller, revived,
                                         revived * max(1, job.spec.slots))
            if request.HasField("audit") and request.audit.dry_run:
                words = audit_trail.would_control(job, action, transition.to if transition else None,
                                                  bool(transition and transition.kill_requested))
                self._dry_run(token, request.audit, caller, api.JobResponse(
                    job=job, revision=fsm.read_meta(tables).applied_index), words)
                return
        if revived:
            self._hold_scoped(leadership, token, caller, revived, revived * max(1, job.spec.slots))
        ctx.propose_request(leadership, token, log.Entry(control=request, by=caller.record()),
                            request.request_id, job_response)

    def modify(self, leadership: Leadership, token: int, request: api.ModifyJobRequest,
               caller: Principal) -> None:
        ctx = self.ctx
        ctx.ensure_request_id(request)
        fsm.validation.check_nesting(request.resource_req)
        policy = ctx.settings.policy
        with ctx.state.read() as tables:
            job, _ = self._target_for(tables, request.job_id, caller)
            queue = fsm.read_queue(tables, job.spec.queue)
            authz.check_job_action(policy, caller, job, queue, "jobs.modify", "modify")
            moved_to = [request.queue] if request.HasField("queue") else []
            authz.check_scope(caller, "modify", [job.spec.queue, *moved_to], job.spec.user)
            if request.HasField("queue") and request.queue != job.spec.queue:
                queue = fsm.read_queue(tables, request.queue)
                authz.check_submit_queue(policy, caller, queue)
                authz.check_priority(policy, caller, queue, request.priority if request.HasField("priority")
                                     else job.spec.priority)
            if request.HasField("priority"):
                authz.check_priority(policy, caller, queue, request.priority, current=job.spec.priority)
            if fsm.read_result(tables, request.request_id) is None:
                fsm.check_modify(tables, job, request, ctx.proposal_format())
            if request.HasField("audit") and request.audit.dry_run:
                self._dry_run(token, request.audit, caller, api.JobResponse(
                    job=job, revision=fsm.read_meta(tables).applied_index),
                    audit_trail.would_modify(job, request))
                return
        ctx.propose_request(leadership, token, log.Entry(modify=request, by=caller.record()),
                            request.request_id, job_response)

    # ------------------------------------------------------------ checks shared by the job writes

    def _check_scope_totals(self, leadership: Leadership, tables: Tables, caller: Principal, jobs: int,
                            slots: int) -> None:
        """A scoped key's limits, counting what is committed and what it has in flight."""
        scope = caller.scope
        if scope is None or not (scope.max_jobs or scope.max_slots):
            return
        now_jobs, now_slots = audit_trail.unfinished(tables, caller.name, scope.max_jobs)
        flying_jobs, flying_slots = leadership.writes.scoped(caller.name)
        authz.check_scope_totals(caller, now_jobs + flying_jobs, now_slots + flying_slots, jobs, slots)

    @staticmethod
    def _hold_scoped(leadership: Leadership, token: int, caller: Principal, jobs: int, slots: int) -> None:
        if caller.scope is not None and (caller.scope.max_jobs or caller.scope.max_slots):
            leadership.writes.hold_scoped(token, caller.name, jobs, slots)

    def _array_size(self, spec: api.JobSpec) -> int:
        if self.ctx.proposal_format() < ARRAY_FORMAT:
            raise ServiceError(log.FAILED_PRECONDITION, "job arrays wait until every replica runs code "
                                                        f"that understands them (format {ARRAY_FORMAT})")
        policy = self.ctx.settings.policy
        return fsm.arrays.check_submit(spec, policy.max_array_size, self.ctx.proposal_format())

    def _target_for(self, tables: Tables, job_id: str, caller: Principal) -> tuple[api.Job, bool]:
        """The job or array an action names (`17`, `17[1-100]`), if the caller may see it; and whether
        it is an array (whose elements apply decides on)."""
        job, wanted = fsm.arrays.find_target(tables, job_id, entry_format=self.ctx.proposal_format())
        if not authz.visible(self.ctx.settings.policy, caller, job):
            raise ServiceError(log.NOT_FOUND, f"no job {job_id}")
        array = wanted is not None or fsm.arrays.is_array(job)
        if array and self.ctx.proposal_format() < ARRAY_FORMAT:
            raise ServiceError(log.FAILED_PRECONDITION, "actions on job arrays wait until every replica "
                                                        f"understands them (format {ARRAY_FORMAT})")
        return job, fsm.arrays.is_array(job)

    def _dry_run(self, token: int, audit: api.AuditRequest, caller: Principal,
                 response: api.SubmitJobsResponse | api.JobResponse, words: str) -> None:
        """Answer what would happen, once its audit row is committed; nothing else is proposed."""
        response.dry_run = words

        def done(results: list[log.Result] | None) -> None:
            self.ctx.reply(token, response if results else unavailable(
                "the dry run's audit record was not committed (leadership changed); retry"))

        self.ctx.propose(audit_trail.entry(audit, caller, api.DRY_RUN, words), done)


def visible_job(tables: Tables, policy: authz.Policy, job_id: str, caller: Principal) -> api.Job:
    """The job, if the caller may see it (with private_jobs, others' jobs are not found)."""
    job = fsm.find_job(tables, job_id)
    if not authz.visible(policy, caller, job):
        raise ServiceError(log.NOT_FOUND, f"no job {job_id}")
    return job


def submitted(tables: Tables, request_id: str, result: log.Result | None) -> api.SubmitJobsResponse:
    settled = proposals.settle(tables, request_id, result)
    jobs = [fsm.read_job(tables, job_id) for job_id in settled.job_ids]
    return api.SubmitJobsResponse(jobs=[j for j in jobs if j is not None], revision=settled.revision)


def job_response(tables: Tables, result: log.Result) -> api.JobResponse:
    job = fsm.read_job(tables, result.job_ids[0]) if result.job_ids else None
    # One job, or an array's record first and the elements the action reached after it; else the
    # id was first used by another kind of request.
    if not result.job_ids or (len(result.job_ids) > 1 and not (job and fsm.arrays.is_array(job))):
        raise invalid("request id already used by another request")
    return api.JobResponse(job=job, revision=result.revision)


def _with_defaults(spec: api.JobSpec, meta: log.Meta) -> api.JobSpec:
    """The spec as apply would store it: its queue and slot count filled in."""
    shown = api.JobSpec()
    shown.CopyFrom(spec)
    if not shown.queue:
        shown.queue = meta.default_queue or fsm.DEFAULT_QUEUE
    if not shown.HasField("slots"):
        shown.slots = 1
    return shown


def _submit_entry(requests: list[Submit]) -> log.Entry:
    return log.Entry(submit=log.SubmitBatch(requests=[r for r, _ in requests], by=[by for _, by in requests]))
