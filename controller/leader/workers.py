"""Worker streams: joins, sessions, relayed reports, and what passes between workers unlogged.

A worker's stream opens (`opened`), and its first message must be a join for
the host its credential proves. Joins are group-committed; once a join's entry
applied, the stream gets a `WorkerSession` (worker_session.py), which derives
everything it sends from committed state: commit before send. Messages that
arrive while the join commits wait and are taken in order after it.

Sessions are stepped when an applied entry changed something on their host
(`applied`, routed by the entry's event), and in a periodic sweep for their
full look; at most SESSION_STEPS_PER_TURN a turn, since after a failover every
worker re-joins at once and deriving all their jobs in one go would hold the
driver's event loop for seconds (the rest wait for the next turn, which the
driver takes at once: `busy`).

Reports from workers (job started, ended, ...) are group-committed; each
stream hears of its reports' outcomes in order. Heartbeats feed the host's
liveness (the watchdog's) and its load indices (committed by upkeep.py).

Two things pass through the leader without the log: a job's output tail
(GetJobOutput, output_relay.py: asked of the job's worker, answered to the
caller or timed out), and the tasks `xce launch` asks for on a job's other
hosts, checked against committed state and the job credential, then passed on.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

from controller import authz, fsm, job_credential, output_relay
from controller.authz import Principal
from controller.fsm import reports as fsm_reports
from controller.leader.context import LeaderContext, logger
from controller.leader.effects import EndStream, Send
from controller.leader.job_writes import visible_job
from controller.leader.leadership import Leadership, WorkerStream
from controller.worker_session import SessionOver, WorkerSession, route
from controller.worker_session import hosts_of as worker_hosts_of
from xce.errors import ServiceError, failed_precondition, invalid, unavailable
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

SESSION_SWEEP_S = 0.25  # how often sessions are checked for their periodic full look
SESSION_STEPS_PER_TURN = 32
RESTATED = log.Result(code=log.OK)  # a report's outcome when it restated the committed state


class Workers:
    def __init__(self, ctx: LeaderContext) -> None:
        self.ctx = ctx

    # ------------------------------------------------------------ the stream

    def opened(self, stream: int, host: str | None) -> None:
        """A worker's stream opened; `host` is the host its credential proves (it may join only as that)."""
        leadership = self.ctx.leadership
        if leadership is None or not leadership.configured or not self.ctx.consensus.caught_up():
            self.ctx.emit(EndStream(stream, self.ctx.refusal()))
            return
        leadership.workers.streams[stream] = WorkerStream(host=host)

    def message(self, stream: int, message: api.WorkerMessage) -> None:
        leadership = self.ctx.leadership
        state = leadership.workers.streams.get(stream) if leadership is not None else None
        if leadership is None or state is None:
            return
        if state.phase == "join":
            self._join(leadership, stream, state, message)
        elif state.phase == "joining":
            state.early.append(message)
        else:
            assert state.session is not None
            self._session_message(leadership, stream, state.session, message)
            self.send(leadership, stream)

    def closed(self, stream: int) -> None:
        leadership = self.ctx.leadership
        if leadership is None:
            return
        workers = leadership.workers
        state = workers.streams.pop(stream, None)
        for waiting in workers.outputs.closed(stream):
            self.ctx.reply(waiting.token, failed_precondition(
                f"host {waiting.host}'s worker disconnected before it answered; retry"))
        session = state.session if state is not None else None
        if session is not None and workers.sessions.get(session.name) == stream:
            del workers.sessions[session.name]
            leadership.upkeep.loads.forget(session.name)

    def send(self, leadership: Leadership, stream: int) -> None:
        state = leadership.workers.streams.get(stream)
        if state is not None and state.session is not None and state.session.outbox:
            self.ctx.emit(Send(stream, tuple(state.session.take())))

    def end(self, stream: int, error: ServiceError | None) -> None:
        self.closed(stream)
        self.ctx.emit(EndStream(stream, error))

    def fence_s(self) -> float:
        """The worker-side fence, once every member applies a fenced end as a requeue (entry
        format 2); before that a fenced job would end EXIT, so workers are told none."""
        return self.ctx.settings.fence_s if self.ctx.proposal_format() >= fsm_reports.FENCE_FORMAT else 0.0

    # ------------------------------------------------------------ joining

    def _join(self, leadership: Leadership, stream: int, state: WorkerStream,
              message: api.WorkerMessage) -> None:
        if message.WhichOneof("body") != "join":
            self.end(stream, invalid("the first message must be a join"))
            return
        try:
            fsm.check_host_spec(message.join)
            if state.host is not None and message.join.name != state.host:
                raise ServiceError(log.PERMISSION_DENIED, f"the credential is host {state.host!r}'s; "
                                                          f"it cannot join as {message.join.name!r}")
        except ServiceError as exc:
            self.end(stream, exc)
            return
        state.phase = "joining"
        state.parts = "parts" in message.join.capabilities
        state.output = "output" in message.join.capabilities
        message.join.ClearField("capabilities")  # the stream's, not the host record's
        message.join.ClearField("metrics_address")  # Status's (grpc_api takes it first), not the record's
        if self.ctx.proposal_format() < fsm.versions.RECOVERY_FORMAT:
            message.join.ClearField("running")  # older replicas would store it in the host record
        joins = leadership.workers.joins
        joins.add((stream, message.join), message.join.ByteSize())
        self.ctx.flush(leadership, joins, _joins_entry, self._joins_settled)

    def _joins_settled(self, leadership: Leadership, batch: list[tuple[int, api.HostSpec]],
                       answers: list[log.Result | None]) -> None:
        if self.ctx.leadership is not leadership:
            return
        for (stream, spec), result in zip(batch, answers, strict=True):
            if stream not in leadership.workers.streams:
                continue  # the worker hung up meanwhile
            if result is None or result.code != log.OK:
                error = unavailable("the join's outcome is not known; join again") if result is None \
                    else ServiceError(result.code, result.message)
                self.end(stream, error)
                continue
            self._joined(leadership, stream, spec, result.generation)
        self.step_sessions(leadership, ())

    def _joined(self, leadership: Leadership, stream: int, spec: api.HostSpec, generation: int) -> None:
        ctx, settings, workers = self.ctx, self.ctx.settings, leadership.workers
        workers.liveness.seen(spec.name, generation, ctx.clock.monotonic_s())
        logger.info("host %s joined, generation %d", spec.name, generation)
        state = workers.streams[stream]
        session = WorkerSession(ctx.state, spec.name, generation, settings.session_full_look_s,
                                functools.partial(job_credential.credential, settings.credential_key),
                                parts=state.parts and ctx.proposal_format() >= fsm_reports.PART_FORMAT)
        state.phase, state.session = "session", session
        workers.sessions[spec.name] = stream
        session.outbox.append(api.ControllerMessage(joined=api.Joined(
            generation=generation, heartbeat_s=settings.heartbeat_s, fence_s=self.fence_s(),
            unknown_timeout_s=settings.unknown_timeout_s)))
        early, state.early = state.early, []
        for message in early:
            self._session_message(leadership, stream, session, message)
        self.send(leadership, stream)  # joined at once; the derivation may wait for its turn
        workers.to_step[stream] = None

    # ------------------------------------------------------------ a session's messages

    def _session_message(self, leadership: Leadership, stream: int, session: WorkerSession,
                         message: api.WorkerMessage) -> None:
        kind = message.WhichOneof("body")
        if kind == "heartbeat" and message.heartbeat.generation == session.generation:
            self._heartbeat(leadership, stream, session, message.heartbeat)
        reports = list(message.reports.reports) if kind == "reports" else [message.report] \
            if kind == "report" else []
        if reports:
            self._relay(leadership, stream, session, reports)
        if kind == "output":
            answered = leadership.workers.outputs.answered(stream, message.output)
            if answered is not None:
                self.ctx.reply(answered[0].token, answered[1])
        if kind == "launch":
            self._launch(leadership, session, message.launch)
        elif kind == "task" and message.task.host == session.name:  # a worker speaks for its own host
            self._task_state(leadership, message.task)

    def _heartbeat(self, leadership: Leadership, stream: int, session: WorkerSession,
                   heartbeat: api.Heartbeat) -> None:
        if leadership.workers.sessions.get(session.name) == stream:  # a superseded stream's do not count
            leadership.workers.liveness.seen(session.name, session.generation, self.ctx.clock.monotonic_s())
            if heartbeat.load:
                leadership.upkeep.loads.heard(session.name, session.generation, heartbeat.load)
        # Answered, so a worker cut off from a leader that cannot tell it
        # so (a partition) notices the silence and looks for the new one.
        session.outbox.append(api.ControllerMessage(heartbeat=api.Heartbeat(
            generation=session.generation, fence_s=self.fence_s(),
            unknown_timeout_s=self.ctx.settings.unknown_timeout_s)))

    def _relay(self, leadership: Leadership, stream: int, session: WorkerSession,
               reports: list[api.JobReport]) -> None:
        restated = session.restated(reports)
        if any(restated):  # acknowledged from the committed state: no entry
            held = [r for r, again in zip(reports, restated, strict=True) if again]
            reports = [r for r, again in zip(reports, restated, strict=True) if not again]
            session.relayed(held, [RESTATED] * len(held))
            self.send(leadership, stream)
            if not reports:
                return
        group = leadership.workers.reports
        for report in reports:
            relayed = log.HostReport(host=session.name, generation=session.generation, report=report)
            group.add((stream, relayed), relayed.ByteSize())
        self.ctx.flush(leadership, group, _reports_entry, self._reports_settled)

    def _reports_settled(self, leadership: Leadership, batch: list[tuple[int, log.HostReport]],
                         answers: list[log.Result | None]) -> None:
        if self.ctx.leadership is not leadership:
            return
        by_stream: dict[int, tuple[list[api.JobReport], list[log.Result | None]]] = {}
        for (stream, relayed), result in zip(batch, answers, strict=True):
            reports, outcomes = by_stream.setdefault(stream, ([], []))
            reports.append(relayed.report)
            outcomes.append(result)
        for stream, (reports, outcomes) in by_stream.items():
            state = leadership.workers.streams.get(stream)
            if state is None or state.session is None:
                continue
            if state.session.relayed(reports, outcomes):
                self.send(leadership, stream)
            else:
                self.send(leadership, stream)
                self.end(stream, None)

    # ------------------------------------------------------------ stepping sessions

    def applied(self, leadership: Leadership, events: list[tuple[int, log.Event | None]]) -> None:
        """Entries applied: each session hears of the jobs they changed on its host."""
        workers = leadership.workers
        if not workers.sessions:
            return
        woken: set[int] = set()
        if any(event is None for _, event in events):  # pruned already: everyone derives from the state
            for stream in workers.sessions.values():
                self._session(leadership, stream).changed_unknown()
                woken.add(stream)
        else:
            for index, event in events:
                assert event is not None
                routed = route(event)
                for name in routed.jobs.keys() | routed.hosts:
                    listener = workers.sessions.get(name)
                    if listener is not None:
                        self._session(leadership, listener).changed(index, routed.jobs.get(name, []),
                                                                    host_record=name in routed.hosts)
                        woken.add(listener)
        self.step_sessions(leadership, sorted(woken))

    def sweep(self, leadership: Leadership, now: float) -> None:
        """The periodic look: sessions due for their full derivation join the queue."""
        workers = leadership.workers
        if now >= workers.next_sweep_s:
            workers.next_sweep_s = now + SESSION_SWEEP_S
            self.step_sessions(leadership, [s for s, st in workers.streams.items()
                                            if st.session is not None and st.session.due(now)])
        else:
            self.step_sessions(leadership, ())

    def step_sessions(self, leadership: Leadership, streams: Iterable[int]) -> None:
        """Queue these sessions for a step, then step up to SESSION_STEPS_PER_TURN of the queue."""
        to_step = leadership.workers.to_step
        for stream in streams:
            to_step[stream] = None
        now = self.ctx.clock.monotonic_s()
        for _ in range(min(SESSION_STEPS_PER_TURN, len(to_step))):
            stream = next(iter(to_step))
            del to_step[stream]
            state = leadership.workers.streams.get(stream)
            if state is None or state.session is None:
                continue
            try:
                state.session.step(now)
            except SessionOver as exc:
                logger.info("worker stream of %s ends: %s", state.session.name, exc)
                self.send(leadership, stream)
                self.end(stream, None)
                continue
            except Exception:  # a bug: end the stream, so the worker re-joins and all is derived anew
                logger.exception("the session of %s failed; ending its stream", state.session.name)
                self.end(stream, None)
                continue
            self.send(leadership, stream)

    @staticmethod
    def _session(leadership: Leadership, stream: int) -> WorkerSession:
        session = leadership.workers.streams[stream].session
        assert session is not None
        return session

    # ------------------------------------------------------------ relayed, not committed: output and tasks

    def ask_output(self, leadership: Leadership, token: int, request: api.JobOutputRequest,
                   caller: Principal) -> None:
        """Ask the worker of the job's host for its output's tail (output_relay.py); the owner's, or
        any with jobs.env.all (what may see a job's environment may see what it printed)."""
        policy = self.ctx.settings.policy
        tail = output_relay.tail_of(request)
        with self.ctx.state.read() as tables:
            def seen(record: api.Job) -> None:  # another's array is not found, whatever its elements
                visible_job(tables, policy, str(record.id), caller)

            job = visible_job(tables, policy, fsm.arrays.one_job(tables, request.job_id, seen), caller)
        if not authz.owns(caller, job) and not policy.allows(caller, "jobs.env.all"):
            raise authz.denied(caller, "jobs.env.all", f"read the output of job {job.id} of {job.spec.user}")
        authz.check_scope(caller, "", [job.spec.queue], job.spec.user)  # a scoped key: its queues and users
        if not job.host:
            raise failed_precondition(f"job {job.id} has not run: it has no output yet")
        workers = leadership.workers
        stream = workers.sessions.get(job.host)
        state = workers.streams.get(stream) if stream is not None else None
        if stream is None or state is None or state.session is None:
            raise failed_precondition(f"host {job.host} is not connected: its output cannot be read now")
        if not state.output:
            raise failed_precondition(f"the worker of host {job.host} does not relay output (older code)")
        number = workers.outputs.ask(token, stream, job.host, self.ctx.clock.monotonic_s())
        state.session.outbox.append(output_relay.asked(number, job, request, tail))
        self.send(leadership, stream)

    def expire_outputs(self, leadership: Leadership, now: float) -> None:
        for waiting in leadership.workers.outputs.expired(now):
            self.ctx.reply(waiting.token, failed_precondition(
                f"host {waiting.host} did not answer within {output_relay.TIMEOUT_S:.0f} s"))

    def _launch(self, leadership: Leadership, origin: WorkerSession, launch: api.LaunchTask) -> None:
        """A task `xce launch` asked for on the origin's host: checked against committed state and
        the credential, then passed to the target host's worker; a refusal goes back at once."""
        launch.origin = origin.name
        refusal, retry = self._launch_refusal(origin, launch)
        if refusal is None:
            stream = leadership.workers.sessions.get(launch.host)
            if stream is None:
                refusal, retry = f"host {launch.host} is not connected", True
            else:
                self._session(leadership, stream).outbox.append(api.ControllerMessage(launch=launch))
                self.send(leadership, stream)
                return
        self._task_state(leadership, api.TaskState(
            job_id=launch.job_id, attempt=launch.attempt, task_id=launch.task_id, host=launch.host,
            phase=api.TASK_REFUSED, reason=refusal, retry=retry, origin=origin.name))

    def _launch_refusal(self, origin: WorkerSession, launch: api.LaunchTask) -> tuple[str | None, bool]:
        """Why the task may not start (None: it may), and whether to ask again later."""
        if not launch.command or not 0 < len(launch.task_id) <= 64 or launch.ByteSize() > 1 << 20:
            return "a task needs a command and a task id, and at most 1 MiB", False
        with self.ctx.state.read() as tables:
            job = fsm.read_job(tables, launch.job_id)
        if job is not None and job.attempt == launch.attempt and job.state == api.UNKWN:
            return f"job {job.id}'s host {job.host} is not answering", True  # it may come back
        if job is None or job.attempt != launch.attempt or job.state != api.RUN:
            return f"job {launch.job_id} is not running at attempt {launch.attempt}", False
        hosts = worker_hosts_of(job)
        if origin.name not in hosts or launch.host not in hosts:
            return f"{launch.host} and {origin.name} must both be hosts of job {job.id}'s allocation " \
                   f"({' '.join(hosts)})", False
        if not job_credential.matches(self.ctx.settings.credential_key, job, launch.credential):
            return "the job credential does not match", False
        return None, False

    def _task_state(self, leadership: Leadership, state: api.TaskState) -> None:
        """What became of a task, to the worker whose `xce launch` waits for it."""
        stream = leadership.workers.sessions.get(state.origin)
        if stream is not None:
            self._session(leadership, stream).outbox.append(api.ControllerMessage(task=state))
            self.send(leadership, stream)


def _joins_entry(joins: list[api.HostSpec]) -> log.Entry:
    return log.Entry(joins=log.HostJoins(joins=joins))


def _reports_entry(reports: list[log.HostReport]) -> log.Entry:
    return log.Entry(reports=log.HostReports(reports=reports))
