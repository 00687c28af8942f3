"""The leader core (controller/leader/) driven by hand: inputs in, effects out.

The state is the real state machine over MemoryTables; the consensus and the
clock are stand-ins the tests move. Commit happens only when a test says so,
so "commit before send" and "unknown outcome" can be seen step by step.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field

from memory_state import MemoryState

from controller import authz, fsm, request_ids
from controller.authz import Principal
from controller.leader import (
    AskPeers,
    Effect,
    EndStream,
    LeaderCore,
    LeaderSettings,
    Propose,
    Reply,
    Send,
)
from xce.clock import ManualClock
from xce.errors import ServiceError
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

INIT = log.InitCluster(cluster_id="c", default_queue="normal", max_slots_per_job=8, config_digest="d1",
                       queues=[api.Queue(name="normal", priority=30)])
MEMBERS = (1, 2, 3)


ADMIN = Principal("admin", "cluster_admin")


@dataclass
class Consensus:
    lead: bool = True
    caught: bool = True
    leader: str | None = None
    term: int = 1

    def leader_term(self) -> int | None:
        return self.term if self.lead else None

    def caught_up(self) -> bool:
        return self.lead and self.caught

    def leader_address(self) -> str | None:
        return self.leader


@dataclass
class Harness:
    store: MemoryState = field(default_factory=MemoryState)
    consensus: Consensus = field(default_factory=Consensus)
    clock: ManualClock = field(default_factory=ManualClock)
    kinds: frozenset[str] = frozenset(fsm.HANDLERS)
    proposed: list[Propose] = field(default_factory=list)  # not yet committed
    replies: dict[int, object] = field(default_factory=dict)
    sent: dict[int, list[api.ControllerMessage]] = field(default_factory=dict)
    ended: dict[int, ServiceError | None] = field(default_factory=dict)
    asked: int = 0

    def __post_init__(self) -> None:
        settings = LeaderSettings(replica_id=1, members=MEMBERS, init=INIT, kinds=self.kinds,
                                  heartbeat_s=1.0, heartbeat_timeout_s=3.0, unknown_timeout_s=10.0)
        self.core = LeaderCore(settings, self.store, self.consensus, self.clock, random.Random(7))

    def effects(self) -> list[Effect]:
        effects = self.core.take()
        for effect in effects:
            if isinstance(effect, Propose):
                self.proposed.append(effect)
            elif isinstance(effect, Reply):
                self.replies[effect.token] = effect.response
            elif isinstance(effect, Send):
                self.sent.setdefault(effect.stream, []).extend(effect.messages)
            elif isinstance(effect, EndStream):
                self.ended[effect.stream] = effect.error
            elif isinstance(effect, AskPeers):
                self.asked += 1
        return effects

    def commit(self, count: int | None = None, answer: bool = True) -> list[log.Entry]:
        """Apply the oldest proposals; tell the core (answer=False: the callback is lost)."""
        done = self.proposed[:count] if count is not None else list(self.proposed)
        del self.proposed[:len(done)]
        for proposal in done:
            results = self.store.apply_all(proposal.entry)
            self.core.applied([self.store.index])
            if answer:
                self.core.proposal_done(proposal.token, results)
            self.effects()
        return [p.entry for p in done]

    def serve(self) -> None:
        """Become leader, push the configuration, announce: a serving leader with no backlog."""
        self.core.tick()
        self.effects()
        self.commit()  # the configuration push
        self.core.tick()
        self.effects()
        for replica in (2, 3):
            self.core.peer_answered(replica, self.kinds, fsm.ENTRY_FORMAT)
        self.effects()
        self.commit()  # the announcements
        assert self.core.serving_term() is not None

    def call(self, token: int, method: str, request: object, caller: Principal = ADMIN) -> None:
        self.core.call(token, method, request, caller)
        self.effects()


def submit(request_id: str, jobs: int = 1) -> api.SubmitJobsRequest:
    return api.SubmitJobsRequest(request_id=request_id, jobs=[api.JobSpec(command=["true"])] * jobs)


def kinds(entries: list[log.Entry]) -> list[str]:
    return [e.WhichOneof("body") or "" for e in entries]


def test_a_new_leader_serves_only_once_caught_up_and_configured() -> None:
    h = Harness()
    h.consensus.caught = False
    h.core.tick()
    h.effects()
    h.call(1, "SubmitJobs", submit("r1"))
    assert isinstance(h.replies[1], ServiceError) and h.replies[1].code == log.UNAVAILABLE
    assert h.proposed == []
    h.consensus.caught = True
    h.core.tick()
    h.effects()
    assert kinds(h.commit()) == ["init"]
    assert h.core.serving_term() is not None


def test_a_configuration_already_committed_is_not_proposed_again() -> None:
    h = Harness()
    h.serve()
    revision = h.store.index
    h.consensus.lead = False
    h.core.tick()
    h.consensus.lead, h.consensus.term = True, 2  # leads again (a new term): nothing to push
    h.core.tick()
    h.effects()
    h.core.tick()
    h.effects()
    assert h.proposed == [] and h.store.index == revision and h.core.serving_term() is not None


def test_submits_arriving_together_share_one_entry_each_answered_with_its_jobs() -> None:
    h = Harness()
    h.serve()
    h.call(1, "SubmitJobs", submit("a"))  # proposed at once: nothing in flight
    h.call(2, "SubmitJobs", submit("b", jobs=2))
    h.call(3, "SubmitJobs", submit("c"))
    assert [len(p.entry.submit.requests) for p in h.proposed] == [1]
    h.commit()
    assert [len(p.entry.submit.requests) for p in h.proposed] == [2]  # b and c waited, together
    h.commit()
    answers = [h.replies[t] for t in (1, 2, 3)]
    assert all(isinstance(a, api.SubmitJobsResponse) for a in answers)
    assert [[j.id for j in a.jobs] for a in answers] == [[1], [2, 3], [4]]  # type: ignore[attr-defined]


def test_entries_are_stamped_with_the_leader_s_clock_id_and_format() -> None:
    h = Harness()
    h.serve()
    h.clock.advance(1234)
    h.call(1, "SubmitJobs", submit("a"))
    entry = h.proposed[0].entry
    assert (entry.stamp_ms, entry.proposer, entry.format) == (h.clock.now_ms(), 1, fsm.ENTRY_FORMAT)


def test_a_lost_callback_is_settled_from_the_committed_result() -> None:
    h = Harness()
    h.serve()
    h.call(1, "SubmitJobs", submit("a"))
    token = h.proposed[0].token
    h.commit(answer=False)
    assert 1 not in h.replies
    h.core.proposal_done(token, None)  # LEADER_CHANGED: the entry committed anyway
    h.effects()
    reply = h.replies[1]
    assert isinstance(reply, api.SubmitJobsResponse) and [j.id for j in reply.jobs] == [1]


def test_an_unknown_outcome_without_a_committed_result_asks_for_a_retry() -> None:
    h = Harness()
    h.serve()
    h.call(1, "SubmitJobs", submit("a"))
    token = h.proposed.pop().token
    h.core.proposal_done(token, None)
    h.effects()
    reply = h.replies[1]
    assert isinstance(reply, ServiceError) and reply.code == log.UNAVAILABLE
    assert "same request id" in reply.message


def test_a_proposal_that_never_settles_times_out_into_an_unknown_outcome() -> None:
    h = Harness()
    h.serve()
    h.call(1, "ControlJob", api.ControlJobRequest(job_id="1", action=api.KILL, request_id="k"))
    assert isinstance(h.replies[1], ServiceError) and h.replies[1].code == log.NOT_FOUND  # pre-check
    h.call(2, "SubmitJobs", submit("a"))
    h.proposed.clear()  # lost with a dead connection: no callback will ever come
    h.clock.advance(9_000)
    h.core.tick()
    h.effects()
    assert 2 not in h.replies
    h.clock.advance(1_500)
    h.core.tick()
    h.effects()
    assert isinstance(h.replies[2], ServiceError) and h.replies[2].code == log.UNAVAILABLE


def test_a_step_down_and_back_up_unseen_between_two_ticks_still_ends_the_old_leadership() -> None:
    h = Harness()
    h.serve()
    h.core.worker_opened(5, None)
    h.effects()
    first = h.core.serving_term()
    h.consensus.term = 2  # deposed and elected again, in another term
    h.core.tick()
    h.effects()
    assert 5 in h.ended and h.core.serving_term() != first


def test_a_follower_refuses_writes_naming_the_leader() -> None:
    h = Harness(consensus=Consensus(lead=False, leader="10.0.0.2:7101"))
    h.core.tick()
    h.call(1, "SubmitJobs", submit("a"))
    reply = h.replies[1]
    assert isinstance(reply, ServiceError)
    assert (reply.code, reply.leader) == (log.FAILED_PRECONDITION, "10.0.0.2:7101")
    h.consensus.leader = None
    h.call(2, "SubmitJobs", submit("a"))
    assert isinstance(h.replies[2], ServiceError) and h.replies[2].code == log.UNAVAILABLE


def test_stepping_down_answers_every_waiter_and_ends_every_worker_stream() -> None:
    h = Harness()
    h.serve()
    h.call(1, "SubmitJobs", submit("a"))
    h.call(2, "SubmitJobs", submit("b"))  # queued behind the first
    h.core.worker_opened(77, None)
    h.effects()
    h.consensus.lead, h.consensus.leader = False, "10.0.0.3:7101"
    h.core.tick()
    h.effects()
    assert all(isinstance(h.replies[t], ServiceError) for t in (1, 2))
    assert h.ended[77] is not None and h.ended[77].leader == "10.0.0.3:7101"
    assert h.core.serving_term() is None


def join(h: Harness, stream: int, name: str = "n1", slots: int = 4) -> int:
    h.core.worker_opened(stream, None)
    h.core.worker_message(stream, api.WorkerMessage(join=api.HostSpec(name=name, slots=slots)))
    h.effects()
    h.commit()
    joined = [m for m in h.sent.get(stream, []) if m.HasField("joined")]
    assert joined, h.ended.get(stream)
    return joined[0].joined.generation


def test_a_worker_gets_joined_then_only_committed_dispatches() -> None:
    h = Harness()
    h.serve()
    assert join(h, 5) == 1
    h.call(1, "SubmitJobs", submit("a"))
    h.commit()
    h.call(2, "RunJob", api.RunJobRequest(job_id="1", host="n1", request_id="run-1"))
    assert kinds([p.entry for p in h.proposed]) == ["dispatch"]
    assert not any(m.HasField("run") for m in h.sent[5])  # proposed, not committed: nothing sent
    h.commit()
    runs = [m.run.job for m in h.sent[5] if m.HasField("run")]
    assert [(j.id, j.attempt, j.host) for j in runs] == [(1, 0, "n1")]
    assert isinstance(h.replies[2], api.JobResponse) and h.replies[2].job.state == api.RUN


def test_reports_are_relayed_with_the_connection_s_generation_and_acked_after_commit() -> None:
    h = Harness()
    h.serve()
    join(h, 5)
    h.call(1, "SubmitJobs", submit("a"))
    h.commit()
    h.call(2, "RunJob", api.RunJobRequest(job_id="1", host="n1", request_id="run-1"))
    h.commit()
    finished = api.JobReport(job_id=1, attempt=0, finished=api.JobFinished(exit_code=0))
    h.core.worker_message(5, api.WorkerMessage(reports=api.Reports(reports=[
        api.JobReport(job_id=1, attempt=0, started=api.JobStarted(pid=9)), finished])))
    h.effects()
    [proposal] = h.proposed
    assert [(r.host, r.generation) for r in proposal.entry.reports.reports] == [("n1", 1), ("n1", 1)]
    assert not any(m.HasField("ack") for m in h.sent[5])
    h.commit()
    assert [m.ack.kind for m in h.sent[5] if m.HasField("ack")] == ["started", "finished"]
    with h.store.read() as tables:
        job = fsm.read_job(tables, 1)
    assert job is not None and job.state == api.DONE


def test_a_start_said_again_as_committed_is_acknowledged_without_an_entry() -> None:
    """A re-joined worker restates every instance it runs: what the state holds already takes no
    entry (a failover's 40,000 of them delayed the new leader's first dispatch); news still does."""
    h = Harness()
    h.serve()
    join(h, 5)
    h.call(1, "SubmitJobs", submit("a", jobs=2))
    h.commit()
    for job in (1, 2):
        h.call(2 + job, "RunJob", api.RunJobRequest(job_id=str(job), host="n1", request_id=f"run-{job}"))
        h.commit()
    h.core.worker_message(5, api.WorkerMessage(reports=api.Reports(reports=[
        api.JobReport(job_id=1, attempt=0, started=api.JobStarted(pid=9, time_ms=1_000))])))
    h.effects()
    h.commit()
    before = len(h.sent[5])
    again = [api.JobReport(job_id=1, attempt=0, started=api.JobStarted(pid=9, time_ms=1_000, again=True)),
             api.JobReport(job_id=2, attempt=0, started=api.JobStarted(pid=10, time_ms=1_000, again=True))]
    h.core.worker_message(5, api.WorkerMessage(reports=api.Reports(reports=again)))
    h.effects()
    # Job 1's start is committed as said: acknowledged now. Job 2's was never committed: relayed.
    assert [(m.ack.job_id, m.ack.kind) for m in h.sent[5][before:] if m.HasField("ack")] == [(1, "started")]
    [proposal] = h.proposed
    assert [r.report.job_id for r in proposal.entry.reports.reports] == [2]
    h.commit()
    with h.store.read() as tables:
        job = fsm.read_job(tables, 2)
    assert job is not None and job.pid == 10 and job.start_time_ms == 1_000


def test_a_malformed_first_message_ends_the_stream_with_invalid_argument() -> None:
    h = Harness()
    h.serve()
    h.core.worker_opened(5, None)
    h.core.worker_message(5, api.WorkerMessage(heartbeat=api.Heartbeat(generation=1)))
    h.effects()
    assert h.ended[5] is not None and h.ended[5].code == log.INVALID_ARGUMENT
    h.core.worker_opened(6, None)
    h.core.worker_message(6, api.WorkerMessage(join=api.HostSpec(name="bad name", slots=1)))
    h.effects()
    assert h.ended[6] is not None and h.ended[6].code == log.INVALID_ARGUMENT and h.proposed == []


def test_silent_hosts_go_unavailable_one_entry_each_until_every_member_knows_host_statuses() -> None:
    h = Harness(kinds=frozenset(fsm.HANDLERS) - {"host_statuses"})
    h.serve()
    join(h, 5, "n1")
    join(h, 6, "n2")
    h.clock.advance(3_500)  # past the heartbeat timeout (3 s) with no heartbeat
    h.core.tick()
    h.effects()
    assert sorted(kinds([p.entry for p in h.proposed])) == ["host_status", "host_status"]
    h.commit()
    with h.store.read() as tables:
        assert {fsm.read_host(tables, n).status for n in ("n1", "n2")} == {api.HOST_UNAVAIL}  # type: ignore[union-attr]


def test_silent_hosts_go_unavailable_in_one_entry_once_host_statuses_is_enabled() -> None:
    h = Harness()
    h.serve()
    with h.store.read() as tables:
        assert "host_statuses" in fsm.versions.enabled(fsm.read_meta(tables), MEMBERS)
    join(h, 5, "n1")
    join(h, 6, "n2")
    h.clock.advance(3_500)
    h.core.tick()
    h.effects()
    [proposal] = h.proposed
    assert sorted(c.name for c in proposal.entry.host_statuses.changes) == ["n1", "n2"]
    h.core.tick()
    h.effects()
    assert len(h.proposed) == 1  # in flight: not proposed again


def test_a_peer_that_does_not_know_a_kind_keeps_it_off() -> None:
    h = Harness()
    h.core.tick()
    h.effects()
    h.commit()
    h.core.tick()
    h.effects()
    assert h.asked == 1
    h.core.peer_answered(2, frozenset(fsm.HANDLERS), 1)
    h.core.peer_answered(3, frozenset(fsm.HANDLERS) - {"host_statuses"}, 1)
    h.effects()
    h.commit()
    with h.store.read() as tables:
        meta = fsm.read_meta(tables)
    assert sorted(meta.members) == [1, 2, 3]
    assert fsm.versions.enabled(meta, MEMBERS) == frozenset(fsm.HANDLERS) - fsm.versions.BASELINE_KINDS - {
        "host_statuses"}
    h.core.peer_answered(3, frozenset(fsm.HANDLERS), 1)  # upgraded
    h.effects()
    h.commit()
    with h.store.read() as tables:
        enabled = fsm.versions.enabled(fsm.read_meta(tables), MEMBERS)
        assert enabled == frozenset(fsm.HANDLERS) - fsm.versions.BASELINE_KINDS
    h.core.peer_answered(3, frozenset(fsm.HANDLERS), 1)  # the same again: nothing to commit
    h.effects()
    assert h.proposed == []


def test_many_joins_at_once_are_derived_a_turn_at_a_time_each_joined_at_once() -> None:
    from controller.leader import SESSION_STEPS_PER_TURN

    h = Harness()
    h.serve()
    hosts = SESSION_STEPS_PER_TURN + 8
    for stream in range(100, 100 + hosts):  # after a failover every worker re-joins together
        h.core.worker_opened(stream, None)
        h.core.worker_message(stream, api.WorkerMessage(join=api.HostSpec(name=f"n{stream}", slots=1)))
    h.effects()
    h.commit()  # the first join alone (nothing was in flight), then one entry for the others
    assert [len(p.entry.joins.joins) for p in h.proposed] == [hosts - 1]
    h.commit()
    assert all(any(m.HasField("joined") for m in h.sent[s]) for s in range(100, 100 + hosts))
    assert h.core.busy() and h.core.next_wakeup_s() <= h.clock.monotonic_s()
    leadership = h.core.leadership
    waiting = [s for s in range(100, 100 + hosts) if leadership and s in leadership.workers.to_step]
    assert len(waiting) == hosts - 1 - SESSION_STEPS_PER_TURN  # the rest wait for the next turn
    h.core.tick()
    h.effects()
    assert not h.core.busy()


def test_a_session_that_fails_ends_its_stream_so_the_worker_re_joins() -> None:
    h = Harness()
    h.serve()
    join(h, 5)
    term = h.core.leadership
    assert term is not None
    session = term.workers.streams[5].session
    assert session is not None

    def broken(now_s: float) -> None:
        raise KeyError("a bug")

    session.step = broken  # type: ignore[method-assign]
    h.clock.advance(6_000)  # its periodic full look is due
    h.core.tick()
    h.effects()
    assert 5 in h.ended and h.ended[5] is None and 5 not in term.workers.streams


def test_a_heartbeat_on_a_superseded_stream_does_not_make_the_current_one_look_silent() -> None:
    h = Harness()
    h.serve()
    join(h, 5)  # generation 1
    term = h.core.leadership
    assert term is not None
    old_stream = term.workers.streams[5]
    h.clock.advance(3_500)  # the leadership is older than the heartbeat timeout (3 s)
    assert join(h, 6) == 2  # the host re-joins on another stream
    # The old stream ends at its session's next step; with many sessions to step that can
    # be a turn later, and a heartbeat may still arrive on it meanwhile.
    term.workers.streams[5] = old_stream
    h.clock.advance(500)
    h.core.worker_message(5, api.WorkerMessage(heartbeat=api.Heartbeat(generation=1)))  # late, old stream
    h.core.tick()
    h.effects()
    statuses = [p.entry for p in h.proposed if p.entry.WhichOneof("body") in ("host_status", "host_statuses")]
    assert statuses == []  # generation 2 was heard 0.5 s ago: not late


# ---------------------------------------------------------------- authorization (controller/authz.py)

ALICE = Principal("alice", "user")
MALLORY = Principal("mallory", "user")
SCHED = Principal("sched-1", "scheduler", "certificate")


def test_a_request_of_another_type_than_its_method_takes_is_refused_and_changes_nothing() -> None:
    h = Harness()
    h.serve()
    h.call(1, "ControlJob", submit("a"), ADMIN)
    refused = h.replies[1]
    assert isinstance(refused, ServiceError) and refused.code == log.INVALID_ARGUMENT
    assert h.proposed == []


def test_the_owner_is_the_caller_and_the_entry_records_who_asked() -> None:
    h = Harness()
    h.serve()
    request = submit("a")
    request.jobs[0].user = "root"  # claimed; never believed
    h.call(1, "SubmitJobs", request, ALICE)
    entry = h.commit()[0]
    assert entry.submit.requests[0].jobs[0].user == "alice"
    assert [(p.name, p.role) for p in entry.submit.by] == [("alice", "user")]
    with h.store.read() as tables:
        assert fsm.read_job(tables, 1).spec.user == "alice"  # type: ignore[union-attr]


def test_another_users_job_is_refused_before_the_log_an_operator_may() -> None:
    """Refused before the write reaches the log; only its audit row does, before the answer."""
    h = Harness()
    h.serve()
    h.call(1, "SubmitJobs", submit("a"), ALICE)
    h.commit()
    for token, method, request in ((2, "ControlJob", api.ControlJobRequest(job_id="1", action=api.HOLD)),
                                   (3, "ModifyJob", api.ModifyJobRequest(job_id="1", priority=5))):
        h.call(token, method, request, MALLORY)
        assert token not in h.replies
        [row] = h.commit()
        assert row.audit.record.outcome == api.REFUSED and row.by.name == MALLORY.name
        refused = h.replies[token]
        assert isinstance(refused, ServiceError) and refused.code == log.PERMISSION_DENIED
        assert "jobs." in refused.message and "alice" in refused.message
    assert h.proposed == []
    h.call(4, "ControlJob", api.ControlJobRequest(job_id="1", action=api.HOLD), Principal("op", "operator"))
    assert kinds(h.commit()) == ["control"]


def test_a_scheduler_acts_only_under_its_own_name_and_a_stale_batch_never_reaches_the_log() -> None:
    h = Harness()
    h.serve()
    h.call(1, "AcquireLease", api.LeaseRequest(scheduler_id="other", duration_s=10), SCHED)
    assert isinstance(h.replies[1], ServiceError) and h.replies[1].code == log.PERMISSION_DENIED
    h.call(2, "AcquireLease", api.LeaseRequest(scheduler_id="sched-1", duration_s=10), SCHED)
    h.commit()
    epoch = h.replies[2].epoch  # type: ignore[attr-defined]
    junk = api.DecisionBatch(lease_epoch=epoch + 7, scheduler_id="sched-1",
                             decisions=[api.Decision(pend=api.PendDecision(job_id=1, reason="x" * 999))] * 50)
    h.call(3, "SubmitDecisions", junk, SCHED)
    assert h.proposed == []  # refused by the leader: the log does not grow
    reply = h.replies[3]
    assert isinstance(reply, api.DecisionBatchResponse)
    assert {o.code for o in reply.outcomes} == {api.REJECT_STALE_LEASE}
    h.call(4, "SubmitDecisions", api.DecisionBatch(lease_epoch=epoch, scheduler_id="sched-1"), SCHED)
    assert kinds(h.commit()) == ["decisions"]


def test_a_worker_joins_only_as_the_host_its_credential_proves() -> None:
    h = Harness()
    h.serve()
    h.core.worker_opened(5, "n2")
    h.core.worker_message(5, api.WorkerMessage(join=api.HostSpec(name="n1", slots=1)))
    h.effects()
    assert isinstance(h.ended[5], ServiceError) and h.ended[5].code == log.PERMISSION_DENIED
    assert h.proposed == []


def test_with_private_jobs_another_users_job_is_not_found() -> None:
    h = Harness()
    h.core.settings = dataclasses.replace(h.core.settings, policy=authz.Policy(private_jobs=True))
    h.serve()
    h.call(1, "SubmitJobs", submit("a"), ALICE)
    h.commit()
    h.call(2, "ControlJob", api.ControlJobRequest(job_id="1", action=api.HOLD), MALLORY)
    refused = h.replies[2]
    assert isinstance(refused, ServiceError) and refused.code == log.NOT_FOUND  # not even "alice's"
    # Nor through a dependency: mallory's job would learn how alice's ended.
    h.proposed.clear()
    waits = api.SubmitJobsRequest(request_id="m", jobs=[api.JobSpec(command=["x"], depend="done(1)")])
    h.call(3, "SubmitJobs", waits, MALLORY)
    refused = h.replies[3]
    assert isinstance(refused, ServiceError) and refused.code == log.INVALID_ARGUMENT
    assert str(refused) == "-w: job 1 is not known (neither live nor in history)"  # as for no job at all
    assert h.proposed == []
    h.call(4, "SubmitJobs", api.SubmitJobsRequest(request_id="a2", jobs=[
        api.JobSpec(command=["x"], depend="done(1)")]), ALICE)
    assert not isinstance(h.replies.get(4), ServiceError)  # her own: fine


def test_a_malformed_token_request_is_invalid_and_nothing_is_proposed() -> None:
    h = Harness()
    h.serve()
    for token, request in enumerate([
            api.CreateTokenRequest(sha256="not-hex", user="alice", role="user"),
            api.CreateTokenRequest(sha256="a" * 64, user="bad name", role="user"),
            api.CreateTokenRequest(sha256="a" * 64, user="alice", role="no-such-role"),
            api.CreateTokenRequest(sha256="a" * 64, user="alice", role="user", expires_ms=-1)], start=1):
        h.call(token, "CreateToken", request)
        refused = h.replies[token]
        assert isinstance(refused, ServiceError) and refused.code == log.INVALID_ARGUMENT, refused
    h.call(9, "RevokeToken", api.RevokeTokenRequest(id="0123456789abcdef"))
    assert isinstance(h.replies[9], ServiceError) and h.replies[9].code == log.NOT_FOUND
    assert h.proposed == []


def test_workers_are_told_the_fence_only_once_every_member_applies_fenced_ends() -> None:
    h = Harness()
    h.core.settings = dataclasses.replace(h.core.settings, fence_s=5.0)
    h.core.tick()
    h.effects()
    h.commit()  # the configuration push; no member has announced format 2 yet
    join(h, 5)
    assert [m.joined.fence_s for m in h.sent[5] if m.HasField("joined")] == [0.0]
    h.core.tick()
    h.effects()
    for replica in (2, 3):
        h.core.peer_answered(replica, h.kinds, fsm.ENTRY_FORMAT)
    h.effects()
    h.commit()  # the announcements: format 2 in use
    join(h, 6, name="n2")
    assert [(m.joined.fence_s, m.joined.unknown_timeout_s) for m in h.sent[6] if m.HasField("joined")] == [
        (5.0, 10.0)]


def test_a_request_id_is_the_caller_s_own() -> None:
    """Another caller's use of an id finds nothing of the first's (its own job is made); the same
    caller retrying finds its result; the same caller with another request is refused."""
    h = Harness()
    h.serve()
    ann, bob = Principal("ann", "user"), Principal("bob", "user")
    h.call(1, "SubmitJobs", submit("shared"), ann)
    h.commit()
    h.call(2, "SubmitJobs", submit("shared"), bob)
    h.commit()
    first, second = h.replies[1], h.replies[2]
    assert isinstance(first, api.SubmitJobsResponse) and isinstance(second, api.SubmitJobsResponse)
    assert [(j.id, j.spec.user) for j in first.jobs] == [(1, "ann")]
    assert [(j.id, j.spec.user) for j in second.jobs] == [(2, "bob")]
    h.call(3, "SubmitJobs", submit("shared"), ann)  # a retry: answered from the stored result
    assert not h.proposed
    retried = h.replies[3]
    assert isinstance(retried, api.SubmitJobsResponse) and [j.id for j in retried.jobs] == [1]
    h.call(4, "SubmitJobs", submit("shared", jobs=2), ann)
    refused = h.replies[4]
    assert isinstance(refused, ServiceError) and refused.code == log.ALREADY_EXISTS
    assert "'shared' was used by ann for another request" in refused.message and not h.proposed


def test_a_request_id_is_printable_and_short_enough_to_store_beside_its_owner() -> None:
    h = Harness()
    h.serve()
    for bad in ("x" * (request_ids.MAX_CLIENT_ID_BYTES + 1), "a\x1fb", "new\nline"):
        h.call(1, "SubmitJobs", submit(bad))
        refused = h.replies.pop(1)
        assert isinstance(refused, ServiceError) and refused.code == log.INVALID_ARGUMENT, bad
    assert not h.proposed


def test_users_are_held_to_the_default_pending_limit_and_submit_rate_and_admins_are_not() -> None:
    h = Harness()  # the defaults: 10,000 pending a user, 1,000 jobs a second (20,000 at once)
    h.serve()
    ann = Principal("ann", "user")
    h.call(1, "SubmitJobs", submit("a", jobs=10_000), ann)
    h.commit()
    h.call(2, "SubmitJobs", submit("b"), ann)
    refused = h.replies[2]
    assert isinstance(refused, ServiceError) and refused.code == log.RESOURCE_EXHAUSTED
    assert "max_pend_jobs_per_user" in refused.message
    h.call(3, "SubmitJobs", submit("c", jobs=10_000))  # the admin: exempt from both
    h.commit()
    assert isinstance(h.replies[3], api.SubmitJobsResponse)
    bob = Principal("bob", "user")
    h.call(4, "SubmitJobs", submit("d", jobs=10_000), bob)
    h.commit()
    h.call(5, "SubmitJobs", submit("e", jobs=10_000), bob)
    h.commit()
    assert isinstance(h.replies[4], api.SubmitJobsResponse) and isinstance(h.replies[5], ServiceError)


def test_a_user_who_submits_faster_than_the_rate_waits_for_the_bucket() -> None:
    h = Harness()
    h.core.settings = dataclasses.replace(h.core.settings, policy=authz.Policy(max_pend_jobs_per_user=0))
    h.serve()
    ann = Principal("ann", "user")
    for token in range(1, 3):  # 20,000 at once: the default burst
        h.call(token, "SubmitJobs", submit(f"r{token}", jobs=10_000), ann)
        h.commit()
        assert isinstance(h.replies[token], api.SubmitJobsResponse)
    h.call(3, "SubmitJobs", submit("r3", jobs=1_000), ann)
    limited = h.replies[3]
    assert isinstance(limited, ServiceError) and limited.code == log.RESOURCE_EXHAUSTED
    assert "ann submits faster than 1000 jobs a second" in limited.message
    assert "1000 more fit in 1.0 s" in limited.message
    assert not h.proposed
    h.clock.advance(1_000)
    h.call(4, "SubmitJobs", submit("r3", jobs=1_000), ann)
    h.commit()
    assert isinstance(h.replies[4], api.SubmitJobsResponse)


def test_every_write_carries_its_audit_note_in_its_own_entry() -> None:
    """From entry format 27 a plain client's writes are audited too: a job write's note in its
    request, another write's in its entry, each naming the caller's key and how the call came."""
    h = Harness()
    h.serve()
    ann = Principal("ann", "user", key_id="0123456789abcdef", key_description="laptop", route="cli")
    h.call(1, "SubmitJobs", submit("a", jobs=3), ann)
    [batch] = h.commit()
    note = batch.submit.requests[0].audit
    assert (note.via, note.action, note.key_id, note.key_description) == \
        ("cli", "submit", ann.key_id, "laptop")
    admin = dataclasses.replace(ADMIN, key_id="fedcba9876543210", route="rest")
    h.call(2, "CreateQueue", api.PutQueueRequest(queue=api.Queue(name="short")), admin)
    [made] = h.commit()
    assert (made.audit_note.via, made.audit_note.action, made.audit_note.key_id) == \
        ("rest", "createqueue", "fedcba9876543210")
    assert not h.core.ctx.audit_notes  # none left behind for a later call
    with h.store.read() as tables:
        rows = fsm.audit.read(tables, "", 0, 10, "")[0]
    assert [(r.principal, r.action, r.via) for r in rows] == [("admin", "createqueue", "rest"),
                                                             ("ann", "submit", "cli")]


def test_a_caller_denied_in_a_loop_leaves_rows_only_at_a_bounded_rate() -> None:
    """Each denial is answered at once; past REFUSAL_BURST at once (then REFUSAL_RATE a second) its row
    is left out, so a flood of denied writes costs no committed entry and pushes no row out."""
    from controller.leader.writes import REFUSAL_BURST

    h = Harness()
    h.serve()
    h.call(1, "SubmitJobs", submit("a"), ALICE)
    h.commit()
    rows = 0
    for token in range(2, REFUSAL_BURST + 22):
        h.call(token, "ControlJob", api.ControlJobRequest(job_id="1", action=api.HOLD), MALLORY)
        rows += len(h.commit())
        refused = h.replies[token]
        assert isinstance(refused, ServiceError) and refused.code == log.PERMISSION_DENIED
    assert rows == REFUSAL_BURST  # the rest were answered without a row (the clock did not move)
    h.call(999, "ControlJob", api.ControlJobRequest(job_id="1", action=api.HOLD), Principal("op", "operator"))
    assert kinds(h.commit()) == ["control"]  # another caller is not held back
