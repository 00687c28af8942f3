"""Advance reservations (xce/rules/reservations.py, controller/fsm/reservations.py, the planner): brsvadd
takes slots from its hosts in order and refuses an overlap that over-books a host; while active, no
other job takes the kept slots, and a `-U` job runs only in them; the ticks begin and end them at the
entry's time; a job of the reservation gives its slots back to it, or to the host once it ended."""

from __future__ import annotations

import pytest

from controller import fsm
from controller.fsm.versions import RESERVATION_FORMAT
from scheduler import core
from scheduler.decisions import Dispatch
from tests.unit.test_unit_allocation import STAMP, State, accepted
from xce.rules import feasibility, reservations
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

FORMAT = RESERVATION_FORMAT
HOUR = 3_600_000


def test_take_fills_the_hosts_in_order_within_what_others_left() -> None:
    parts = reservations.take(6, ["h1", "h2", "h3"], {"h1": 4, "h2": 4, "h3": 4}, {"h1": 1})
    assert [(p.host, p.slots) for p in parts] == [("h1", 3), ("h2", 3)]
    with pytest.raises(reservations.ReservationError, match="have 4 slots left"):
        reservations.take(5, ["h1"], {"h1": 8}, {"h1": 4})
    with pytest.raises(reservations.ReservationError, match="no host"):
        reservations.take(1, ["nope"], {"h1": 8}, {})


def test_booked_counts_only_overlapping_windows_and_due_orders_begin_and_end() -> None:
    early = api.Reservation(name="a", hosts=[api.HostSlots(host="h1", slots=2)], begin_ms=0, end_ms=10)
    late = api.Reservation(name="b", hosts=[api.HostSlots(host="h1", slots=3)], begin_ms=10, end_ms=20)
    assert reservations.booked([early, late], 5, 10) == {"h1": 2}  # [5, 10) does not touch [10, 20)
    assert reservations.booked([early, late], 9, 11) == {"h1": 5}
    assert [reservations.due(late, t) for t in (9, 10, 20)] == ["", "begin", "end"]
    assert reservations.next_event_ms([early, late]) == 0
    late.active = True
    assert reservations.next_event_ms([late]) == 20
    assert reservations.free_in(8, 8, {"b": 3, "c": 2}, "b") == 3  # 3 used by others' jobs: 3 idle
    assert reservations.free_in(8, 10, {"b": 3}, "b") == 1  # began on a busy host: what is idle
    assert reservations.free_in(8, 4, {"b": 3}, "c") == 0


class Reserved(State):
    """h1 and h2 of 4 slots; entries at format 24."""

    def __init__(self) -> None:
        super().__init__((api.Queue(name="normal"),))
        self.join("h1", 4)
        self.join("h2", 4)

    def apply(self, entry: log.Entry, format_: int = FORMAT) -> log.Result:
        return super().apply(entry, format_)

    def add(self, name: str, slots: int, hosts: tuple[str, ...], begin: int, end: int,
            users: tuple[str, ...] = ("alice",)) -> log.Result:
        wanted = api.Reservation(name=name, users=users, begin_ms=begin, end_ms=end,
                                 hosts=[api.HostSlots(host=h) for h in hosts])
        request = api.PutReservationRequest(request_id=f"r{self.index}", slots=slots, reservation=wanted)
        return self.apply(log.Entry(reservation=request, by=log.Principal(name="admin")))

    def tick(self, at: int) -> log.Result:
        return self.apply(log.Entry(stamp_ms=at, reservation=api.PutReservationRequest(tick=True)))

    def submit_as(self, user: str, slots: int, reservation: str = "") -> log.Result:
        spec = api.JobSpec(command=["true"], slots=slots, user=user, reservation=reservation,
                           resource_req="span[hosts=1]")
        return self.apply(log.Entry(submit=log.SubmitBatch(requests=[
            api.SubmitJobsRequest(request_id=f"r{self.index}", jobs=[spec])])))

    def end(self, job_id: int) -> None:
        job = self.job(job_id)
        finished = api.JobReport(job_id=job_id, attempt=job.attempt, finished=api.JobFinished(exit_code=0))
        report = log.HostReport(host=job.host, generation=self.host(job.host).generation, report=finished)
        assert self.apply(log.Entry(report=report)).code == log.OK

    def held(self) -> dict[str, tuple[int, dict[str, int]]]:
        return {name: (self.host(name).slots_used, dict(self.host(name).rsv_free)) for name in ("h1", "h2")}


def test_an_active_reservation_keeps_its_slots_from_others_and_lets_its_users_in() -> None:
    state = Reserved()
    assert state.add("alice#0", 6, ("h1", "h2"), STAMP, STAMP + HOUR).code == log.OK  # begun: active at once
    record = fsm.reservations.read(state.tables, "alice#0")
    assert record is not None and record.active and record.owner == "admin"
    assert [(p.host, p.slots) for p in record.hosts] == [("h1", 4), ("h2", 2)]
    assert state.held() == {"h1": (4, {"alice#0": 4}), "h2": (2, {"alice#0": 2})}
    assert fsm.read_meta(state.tables).next_reservation_ms == STAMP + HOUR
    other = int(state.submit_as("bob", 2).job_ids[0])
    refused = state.dispatch(other, ("h1", 2), format_=FORMAT)
    assert refused.code == api.REJECT_INFEASIBLE and "h1 has 0 free slots" in refused.message
    assert accepted(state.dispatch(other, ("h2", 2), format_=FORMAT))  # the 2 h2 does not keep
    assert state.held()["h2"] == (4, {"alice#0": 2})
    assert "User not in the advance reservation's user list" in state.submit_as("bob", 1, "alice#0").message
    assert "does not exist" in state.submit_as("alice", 1, "nope").message
    mine = int(state.submit_as("alice", 4, "alice#0").job_ids[0])
    assert not accepted(state.dispatch(mine, ("h2", 4), format_=FORMAT))  # it keeps 2 on h2
    assert accepted(state.dispatch(mine, ("h1", 4), format_=FORMAT))
    assert state.held()["h1"] == (4, {"alice#0": 0})  # its slots, not more of the host's
    state.end(mine)
    assert state.held()["h1"] == (4, {"alice#0": 4})  # back to the reservation


def test_an_overlap_that_over_books_a_host_is_refused_and_changes_nothing() -> None:
    state = Reserved()
    assert state.add("a", 4, ("h1",), STAMP + HOUR, STAMP + 2 * HOUR).code == log.OK
    refused = state.add("b", 1, ("h1",), STAMP + HOUR + 1, STAMP + 3 * HOUR)
    assert (refused.code, "1 slots left" in refused.message or "0 slots left" in refused.message) == (
        log.INVALID_ARGUMENT, True), refused.message
    assert fsm.reservations.read(state.tables, "b") is None
    assert state.add("b", 4, ("h1",), STAMP + 2 * HOUR, STAMP + 3 * HOUR).code == log.OK  # after it: fine
    assert state.add("a", 1, ("h2",), STAMP + 5 * HOUR, STAMP + 6 * HOUR).code == log.ALREADY_EXISTS
    assert state.held() == {"h1": (0, {}), "h2": (0, {})}  # none began


def test_ticks_begin_and_end_it_and_a_running_job_keeps_its_slots_past_the_end() -> None:
    state = Reserved()
    begin, end = STAMP + HOUR, STAMP + 2 * HOUR
    assert state.add("w", 4, ("h1",), begin, end).code == log.OK
    assert state.tick(begin - 1).code == log.OK and state.held()["h1"] == (0, {})
    state.tick(begin)
    assert state.held()["h1"] == (4, {"w": 4})
    assert fsm.read_meta(state.tables).next_reservation_ms == end
    job = int(state.submit_as("alice", 3, "w").job_ids[0])
    assert accepted(state.dispatch(job, ("h1", 3), format_=FORMAT))
    state.tick(end)
    assert state.held()["h1"] == (3, {})  # its unused slot given back; the job's held
    assert fsm.reservations.read(state.tables, "w") is None
    assert fsm.read_meta(state.tables).next_reservation_ms == 0
    state.end(job)
    assert state.held()["h1"] == (0, {})


def test_brsvdel_gives_back_what_it_kept() -> None:
    state = Reserved()
    assert state.add("d", 2, ("h2",), STAMP, STAMP + HOUR).code == log.OK
    request = api.PutReservationRequest(request_id="del", delete=True, reservation=api.Reservation(name="d"))
    assert state.apply(log.Entry(reservation=request)).code == log.OK
    assert state.held()["h2"] == (0, {})
    assert state.apply(log.Entry(reservation=api.PutReservationRequest(
        request_id="del2", delete=True, reservation=api.Reservation(name="d")))).code == log.NOT_FOUND


def test_the_pass_places_a_reservation_s_jobs_in_it_and_others_beside_it() -> None:
    state = Reserved()
    assert state.add("r", 4, ("h2",), STAMP, STAMP + HOUR).code == log.OK
    inside = [int(state.submit_as("alice", 2, "r").job_ids[0]) for _ in range(3)]
    outside = [int(state.submit_as("bob", 2).job_ids[0]) for _ in range(3)]
    jobs = [fsm.read_job(state.tables, i) for i in (*inside, *outside)]
    hosts = [state.host("h1"), state.host("h2")]
    decisions = core.run_pass([j for j in jobs if j is not None], [api.Queue(name="normal")], hosts,
                              core.CoreConfig(), {}).decisions
    placed = {d.job_id: d.host for d in decisions if isinstance(d, Dispatch)}
    assert placed == {inside[0]: "h2", inside[1]: "h2", outside[0]: "h1", outside[1]: "h1"}
    for job_id, host in placed.items():  # the barrier takes every one of them
        assert accepted(state.dispatch(job_id, (host, 2), format_=FORMAT)), job_id
    assert state.held() == {"h1": (4, {}), "h2": (4, {"r": 0})}


def test_a_job_of_a_reservation_is_no_preemption_victim() -> None:
    from xce.rules import preemption

    queues = {"low": api.Queue(name="low", preemptable=True)}
    victim = api.Job(id=1, state=api.RUN, start_time_ms=1, spec=api.JobSpec(queue="low", reservation="r"))
    assert not preemption.eligible(victim, queues, 10**9)
    victim.spec.reservation = ""
    assert preemption.eligible(victim, queues, 10**9)


def test_host_refusal_reads_the_reservation_s_free_slots() -> None:
    host = feasibility.HostState(8, True, 8, held={"r": 3})
    need = feasibility.Need(feasibility.NO_NEED.requirement, reservation="r")
    assert feasibility.host_refusal("h", host, 3, need) is None
    assert feasibility.host_refusal("h", host, 4, need).check == "host_has_free_slots"  # type: ignore[union-attr]
    assert feasibility.host_refusal("h", host, 1).check == "host_has_free_slots"  # type: ignore[union-attr]
    other = feasibility.Need(feasibility.NO_NEED.requirement, reservation="s")
    assert feasibility.host_refusal("h", host, 1, other).check == "host_in_reservation"  # type: ignore[union-attr]


def test_an_exclusive_host_keeps_nothing_idle_for_a_reservation_and_x_with_u_is_refused() -> None:
    state = Reserved()
    spec = api.JobSpec(command=["true"], slots=1, user="bob", exclusive=True)
    state.apply(log.Entry(put_queue=log.PutQueueEntry(queue=api.Queue(name="normal", exclusive=True))))
    result = state.apply(log.Entry(submit=log.SubmitBatch(requests=[
        api.SubmitJobsRequest(request_id="x1", jobs=[spec])])))
    exclusive = int(result.job_ids[0])
    assert accepted(state.dispatch(exclusive, ("h1", 1), format_=FORMAT))
    assert state.add("r", 4, ("h1",), STAMP, STAMP + HOUR).code == log.OK  # begins on the busy host
    mine = int(state.submit_as("alice", 4, "r").job_ids[0])
    refused = state.dispatch(mine, ("h1", 4), format_=FORMAT)  # refused, not placed past the host
    assert refused.code == api.REJECT_INFEASIBLE and "0 free slots in reservation r" in refused.message
    spec = api.JobSpec(command=["true"], user="alice", exclusive=True, reservation="r")
    both = state.apply(log.Entry(submit=log.SubmitBatch(requests=[
        api.SubmitJobsRequest(request_id="x2", jobs=[spec])])))
    assert both.code == log.INVALID_ARGUMENT and "with -x" in both.message


def test_a_name_made_anew_is_another_reservation() -> None:
    state = Reserved()
    assert state.add("r", 2, ("h1",), STAMP, STAMP + HOUR, users=("alice", "bob")).code == log.OK
    old = int(state.submit_as("alice", 2, "r").job_ids[0])
    assert accepted(state.dispatch(old, ("h1", 2), format_=FORMAT))
    waiting = int(state.submit_as("bob", 1, "r").job_ids[0])
    delete = api.PutReservationRequest(request_id="d", delete=True, reservation=api.Reservation(name="r"))
    assert state.apply(log.Entry(reservation=delete)).code == log.OK
    assert state.add("r", 2, ("h1",), STAMP, STAMP + HOUR).code == log.OK  # alice's alone now
    assert state.add("s", 2, ("h1",), STAMP, STAMP + HOUR, users=("carol",)).code == log.OK
    assert state.held()["h1"] == (6, {"r": 2, "s": 2})  # old's 2, and what r and s keep
    fresh = int(state.submit_as("alice", 2, "r").job_ids[0])
    assert accepted(state.dispatch(fresh, ("h1", 2), format_=FORMAT))
    state.end(old)  # its slots go back to the host, not to the new r
    assert state.held()["h1"] == (4, {"r": 0, "s": 2})
    again = int(state.submit_as("alice", 2, "r").job_ids[0])
    assert not accepted(state.dispatch(again, ("h1", 2), format_=FORMAT))
    carol = int(state.submit_as("carol", 2, "s").job_ids[0])
    assert accepted(state.dispatch(carol, ("h1", 2), format_=FORMAT))  # s keeps what it was given
    bob = state.dispatch(waiting, ("h1", 1), format_=FORMAT)  # r no longer lists him
    assert bob.code == api.REJECT_INFEASIBLE and "not there for its owner" in bob.message


def test_a_job_waiting_for_its_reservation_holds_no_queue() -> None:
    state = Reserved()
    queue = api.Queue(name="normal", backfill="none")
    assert state.add("r", 2, ("h2",), STAMP, STAMP + HOUR).code == log.OK
    waiting = int(state.submit_as("alice", 4, "r").job_ids[0])  # more than r keeps free: it waits
    plain = int(state.submit_as("bob", 2).job_ids[0])
    jobs = [state.job(waiting), state.job(plain)]
    decisions = core.run_pass(jobs, [queue], [state.host("h1"), state.host("h2")], core.CoreConfig(),
                              {}).decisions
    assert {d.job_id: d.host for d in decisions if isinstance(d, Dispatch)} == {plain: "h1"}


@pytest.mark.parametrize("words, said", [
    (["-n", "1", "-m", "w1", "-u", "", "-b", "5:00", "-e", "6:00"], "-u: at least one user"),
    (["-n", "1", "-m", " ", "-u", "a", "-b", "5:00", "-e", "6:00"], "-m: at least one host"),
    (["-n", "1", "-m", "w1", "-u", "a", "-b", "5:00", "-e", "5:00"], "the end time must come after"),
    (["-n", "0", "-m", "w1", "-u", "a", "-b", "5:00", "-e", "6:00"], "at least one slot"),
])
def test_brsvadd_refuses_before_it_asks_the_cluster(words: list[str], said: str) -> None:
    from cli.lsf import entry

    module, args = entry.parse("brsvadd", words)
    with pytest.raises(ValueError, match=said):
        module.prepare(args)  # type: ignore[attr-defined]


def test_a_window_past_the_year_9999_is_refused() -> None:
    state = Reserved()
    refused = state.add("far", 1, ("h1",), 2**62, 2**62 + HOUR)
    assert refused.code == log.INVALID_ARGUMENT and "year 10000" in refused.message
