"""Limits (xce/rules/limits.py, controller/fsm/limit_config.py): the configuration refused with the
limit and the key named, the pass keeping under every bound and naming the limit it reached, the commit
barrier re-checking with the committed counters, and exactly what was taken given back. Pure."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller import config
from controller.config import ConfigError
from scheduler import core
from scheduler.decisions import Decision, Dispatch, Pend
from tests.unit.test_unit_allocation import State, accepted
from tests.unit.test_unit_config import GOOD, load_error, write
from xce.rules import limits
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

FORMAT = 11

USERS_NORMAL = api.Limit(name="users_normal", queues=["normal"], per_user=True, slots=3)
GPUS = api.Limit(name="gpus", projects=["research"], resources={"gpu": 2})


class Limited(State):
    def __init__(self, *defs: api.Limit) -> None:
        super().__init__((api.Queue(name="normal"), api.Queue(name="low")))
        init = log.InitCluster(cluster_id="c", config_digest="d", limits=list(defs), limits_digest="x1",
                               queues=[api.Queue(name="normal"), api.Queue(name="low")])
        assert self.apply(init_entry(init)).code == log.OK

    def apply(self, entry: log.Entry, format_: int = FORMAT) -> log.Result:
        return super().apply(entry, format_)

    def submit_as(self, user: str, slots: int = 1, queue: str = "normal", req: str = "",
                  project: str = "") -> int:
        spec = api.JobSpec(command=["true"], slots=slots, queue=queue, user=user, resource_req=req,
                           project=project)
        result = self.apply(log.Entry(submit=log.SubmitBatch(requests=[
            api.SubmitJobsRequest(request_id=f"r{self.index}", jobs=[spec])])))
        assert result.code == log.OK, result.message
        return int(result.job_ids[0])

    def view(self) -> tuple[list[api.Job], list[api.Host], dict[str, int], list[api.Limit]]:
        jobs = [api.Job.FromString(raw) for _, raw in self.tables.scan("jobs")]
        hosts = [api.Host.FromString(raw) for _, raw in self.tables.scan("hosts")]
        counters = {k.decode(): int.from_bytes(v, "big", signed=True)
                    for k, v in self.tables.scan("counters")}
        defs = [api.Limit.FromString(raw) for _, raw in self.tables.scan("limits")]
        return jobs, hosts, counters, defs

    def run_pass(self) -> list[Decision]:
        jobs, hosts, counters, defs = self.view()
        return core.run_pass(jobs, [api.Queue(name="normal"), api.Queue(name="low")], hosts,
                             core.CoreConfig(), counters, limit_defs=defs).decisions


def init_entry(init: log.InitCluster) -> log.Entry:
    return log.Entry(init=init)


def test_the_pass_keeps_each_user_under_the_limit_and_names_it() -> None:
    state = Limited(USERS_NORMAL)
    state.join("h1", 16)
    alice = [state.submit_as("alice") for _ in range(5)]
    bob = [state.submit_as("bob") for _ in range(2)]
    other_queue = state.submit_as("alice", queue="low")
    decisions = state.run_pass()
    placed = {d.job_id for d in decisions if isinstance(d, Dispatch)}
    assert placed == {*alice[:3], *bob, other_queue}  # 3 of alice's in normal; low is not a consumer
    reasons = {d.job_id: (d.code, d.reason) for d in decisions if isinstance(d, Pend)}
    assert reasons[alice[3]] == (api.PEND_LIMIT_REACHED,
                                 'user alice at 3/3 slots in queue normal (limit "users_normal")')


def test_the_barrier_rechecks_every_limit_with_the_committed_counters() -> None:
    state = Limited(USERS_NORMAL)
    state.join("h1", 16)
    jobs = [state.submit_as("alice", slots=2) for _ in range(2)]
    assert accepted(state.dispatch(jobs[0], ("h1", 2)))
    # A second scheduler, or a stale view, sends the next one: 2 + 2 > 3.
    refused = state.dispatch(jobs[1], ("h1", 2))
    assert (refused.code, refused.reason) == (api.REJECT_INFEASIBLE, api.PEND_LIMIT_REACHED)
    assert 'user alice at 2/3 slots in queue normal (limit "users_normal")' in refused.message
    assert dict(state.job(jobs[0]).holds) == {"limit/users_normal/u=alice/slots": 2}
    state.finish(jobs[0], "h1")
    assert state.view()[2] == {}  # given back exactly: no counter left
    assert accepted(state.dispatch(jobs[1], ("h1", 2)))


def test_a_limit_changed_while_jobs_run_gives_back_what_was_taken() -> None:
    state = Limited(USERS_NORMAL)
    state.join("h1", 16)
    job = state.submit_as("alice")
    assert accepted(state.dispatch(job, ("h1", 1)))
    stricter = api.Limit(name="users_normal", queues=["normal"], per_user=True, slots=1, jobs=1)
    init = log.InitCluster(cluster_id="c", config_digest="d", limits=[stricter], limits_digest="x2",
                           queues=[api.Queue(name="normal"), api.Queue(name="low")])
    assert state.apply(init_entry(init)).code == log.OK
    second = state.submit_as("alice")
    refused = state.dispatch(second, ("h1", 1))
    assert refused.reason == api.PEND_LIMIT_REACHED
    state.finish(job, "h1")  # it held slots only: the new jobs bound does not take back what it never held
    assert state.view()[2] == {}
    assert accepted(state.dispatch(second, ("h1", 1)))
    assert dict(state.job(second).holds) == {"limit/users_normal/u=alice/slots": 1,
                                             "limit/users_normal/u=alice/jobs": 1}


def test_consumables_count_on_every_host_of_the_plan_and_projects_include_their_children() -> None:
    state = Limited(GPUS)
    for name in ("g1", "g2", "g3"):
        state.join(name, 4, gpu=2)
    wide = state.submit_as("carol", slots=2, req="rusage[gpu=1] span[ptile=1]", project="research/genomics")
    narrow = state.submit_as("dave", req="rusage[gpu=1]", project="research")
    outside = state.submit_as("erin", req="rusage[gpu=1]", project="physics")
    decisions = state.run_pass()
    placed = {d.job_id for d in decisions if isinstance(d, Dispatch)}
    assert placed == {wide, outside}  # wide holds 2 GPUs of research's 2
    reasons = {d.job_id: d.reason for d in decisions if isinstance(d, Pend)}
    assert reasons[narrow] == 'projects research at 2/2 gpu (limit "gpus")'


def test_a_user_limit_counts_jobs_too_and_the_room_of_n_min_max() -> None:
    state = Limited(api.Limit(name="per_user", per_user=True, slots=4))
    state.join("h1", 16)
    flexible = state.apply(log.Entry(submit=log.SubmitBatch(requests=[api.SubmitJobsRequest(
        request_id="flex", jobs=[api.JobSpec(command=["true"], slots=8, min_slots=2, user="alice")])])))
    decisions = state.run_pass()
    (dispatch,) = [d for d in decisions if isinstance(d, Dispatch)]
    assert dispatch.job_id == flexible.job_ids[0] and dispatch.hosts == (("h1", 4),)  # as many as the limit


@pytest.mark.parametrize("text, words", [
    ('[[limits]]\nname = "x"\nslot = 4\n', "limit 'x': slot: not a key of a limit"),
    ('[[limits]]\nname = "x"\nqueues = ["nope"]\nslots = 4\n', "limit 'x': queues: no queue 'nope'"),
    ('[[limits]]\nname = "x"\nslots = -1\n', "limit 'x': slots: a bound is a whole number"),
    ('[[limits]]\nname = "x"\n', "limit 'x': no bound"),
    ('[[limits]]\nname = "x"\nslots = 1\n[[limits]]\nname = "x"\njobs = 1\n',
     "limit 'x': name: defined twice"),
    ('[[limits]]\nname = "x"\nusers = ["@staff"]\nslots = 1\n', "user groups are not supported"),
    ('[[limits]]\nname = "x"\nper_user = "yes"\nslots = 1\n', "limit 'x': per_user: true or false"),
    ('[[limits]]\nname = "x"\nresources = { gpu = -2 }\n', "limit 'x': gpu: a bound is a whole number"),
])
def test_a_bad_limit_is_refused_at_load_naming_the_limit_and_the_key(tmp_path: Path, text: str,
                                                                      words: str) -> None:
    assert words in load_error(tmp_path, GOOD + text)


def test_a_good_limit_loads_and_moves_the_digest(tmp_path: Path) -> None:
    base = config.load(write(tmp_path, GOOD))
    assert base.limits == () and base.limits_digest() == ""
    text = GOOD + '[[limits]]\nname = "u"\nper_user = true\nslots = 8\n'
    loaded = config.load(write(tmp_path, text, "b.toml"))
    assert loaded.limits == (api.Limit(name="u", per_user=True, slots=8),)
    assert loaded.limits_digest() != ""
    with pytest.raises(ConfigError):
        config.load(write(tmp_path, GOOD + "[[limits]]\nslots = 8\n", "c.toml"))


def test_apply_refuses_a_bad_limit_and_changes_nothing() -> None:
    state = Limited(USERS_NORMAL)
    bad = log.InitCluster(cluster_id="c", config_digest="d", limits=[api.Limit(name="", slots=1)],
                          limits_digest="bad", queues=[api.Queue(name="normal")])
    result = state.apply(init_entry(bad))
    assert result.code == log.INVALID_ARGUMENT and "name" in result.message
    assert [api.Limit.FromString(raw).name for _, raw in state.tables.scan("limits")] == ["users_normal"]


def test_the_words_say_who_and_where() -> None:
    job = api.Job(spec=api.JobSpec(user="alice", queue="normal", project="research/x"))
    demand = limits.Demand("c", 1, 10, api.Limit(name="l", users=["alice", "bob"], queues=["normal", "low"]),
                           "jobs")
    assert limits.words(demand, 10, job) == 'users alice, bob at 10/10 jobs in queues normal, low (limit "l")'
    demand = limits.Demand("c", 1, 5, api.Limit(name="p", per_project=True, per_queue=True), "slots")
    assert limits.words(demand, 5, job) == 'project research/x at 5/5 slots in queue normal (limit "p")'


@pytest.mark.parametrize("project", ["a//b", "/a", "a/", "a b", "x" * 300])
def test_a_bad_project_is_refused_at_submit(project: str) -> None:
    state = Limited()
    result = state.apply(log.Entry(submit=log.SubmitBatch(requests=[api.SubmitJobsRequest(
        request_id="p", jobs=[api.JobSpec(command=["true"], project=project)])])))
    assert result.code == log.INVALID_ARGUMENT and "-P" in result.message
    assert not list(state.tables.scan("jobs"))


def test_jobs_alike_but_for_their_job_group_are_refused_apart() -> None:
    """A pass keeps a limit's refusal for every job whose limits read the same of it (its digest's
    `limits`): a job of a group at its limit does not refuse a job of another group, ordered before or
    after it."""
    full = api.Limit(name="g1", groups=["/g1"], slots=1)
    counters = {limits.counter("g1", limits.ALL, "slots"): 1}
    hosts = [api.Host(spec=api.HostSpec(name="h1", slots=4), status=api.HOST_OK)]
    for first, second in (("/g1", "/g2"), ("/g2", "/g1")):
        jobs = [api.Job(id=n, state=api.PEND, submit_time_ms=n, spec=api.JobSpec(
                    command=["true"], queue="normal", user="u", slots=1, job_group=group))
                for n, group in ((1, first), (2, second))]
        decisions = core.run_pass(jobs, [api.Queue(name="normal")], hosts, core.CoreConfig(), counters,
                                  limit_defs=[full]).decisions
        placed = {d.job_id for d in decisions if isinstance(d, Dispatch)}
        refused = {d.job_id: d.code for d in decisions if isinstance(d, Pend)}
        g1 = 1 if first == "/g1" else 2
        assert placed == {3 - g1} and refused == {g1: api.PEND_LIMIT_REACHED}


def test_a_job_a_limit_refuses_still_says_first_what_its_queue_or_itself_waits_for() -> None:
    """A job refused by a limit all through the pass gets the reason its first gate gives: its queue's if
    inactive, its begin time if not reached, else the limit."""
    full = api.Limit(name="one", per_user=True, slots=1)
    counters = {limits.counter("one", "u=u", "slots"): 1}
    queues = [api.Queue(name="normal"), api.Queue(name="off", inactive=True)]
    jobs = [api.Job(id=n, state=api.PEND, submit_time_ms=n, spec=api.JobSpec(
                command=["true"], queue=queue, user="u", slots=1, begin_time_ms=begin))
            for n, queue, begin in ((1, "normal", 0), (2, "off", 0), (3, "normal", 10**13))]
    hosts = [api.Host(spec=api.HostSpec(name="h1", slots=4), status=api.HOST_OK)]
    decisions = core.run_pass(jobs, queues, hosts, core.CoreConfig(), counters, limit_defs=[full]).decisions
    assert {d.job_id: d.code for d in decisions if isinstance(d, Pend)} == {
        1: api.PEND_LIMIT_REACHED, 2: api.PEND_QUEUE_INACTIVE, 3: api.PEND_BEGIN_TIME}
