"""Fair share (xce/rules/fairshare.py, scheduler/picker.py FairShare, controller/fsm/shares.py): slots
go in the ratio of the shares on a saturated queue, recent usage decays with the half-life, projects nest,
apply's credit is integer arithmetic, and a bad configuration is refused naming the queue and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler import core, picker
from scheduler.decisions import Dispatch
from tests.unit.test_unit_config import GOOD, load_error
from tests.unit.test_unit_limits import Limited
from xce.rules import fairshare
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

HALF = 60_000  # a minute's half-life, in ms


def job(job_id: int, user: str, state: int = api.PEND, slots: int = 1, project: str = "",
        submit: int = 0) -> api.Job:
    return api.Job(id=job_id, state=state, submit_time_ms=submit or job_id,
                   spec=api.JobSpec(command=["x"], queue="q", user=user, slots=slots, project=project))


def test_credit_is_integer_and_halves_in_a_half_life() -> None:
    assert fairshare.credit(1 << 40, 0, HALF, HALF, 0) == (1 << 39, HALF)
    assert fairshare.credit(1 << 40, 0, 3 * HALF, HALF, 7) == ((1 << 37) + 7, 3 * HALF)
    value, stamp = fairshare.credit(1_000_000, 0, HALF // 2 + 1, HALF, 0)  # 8 steps of 16 and a little
    assert stamp == HALF // 2 and value == (1_000_000 * 759250125) >> 30  # 2^(-1/2), the stamp not past it
    assert abs(fairshare.decayed(1_000_000, 0, HALF // 2, HALF) - value) <= 1
    assert fairshare.credit(5, 0, 10**12, HALF, 3) == (3, 10**12)  # decayed to nothing, then credited


def simulate(users: dict[str, tuple[float, str]], config: api.FairShare, slots: int, seconds: float,
             usage: dict[tuple[str, str], tuple[int, int]] | None = None) -> dict[str, float]:
    """A saturated queue: every user always has jobs pending (each user's jobs run its `length`
    seconds, in its project); whenever slots are free, the fair-share order fills them. The
    slot-seconds each user got."""
    now, next_id, used = 0.0, 1, dict.fromkeys(users, 0.0)
    running: list[tuple[float, api.Job]] = []
    while now < seconds:
        waiting = []
        for user, (_, project) in users.items():
            for _ in range(slots):
                waiting.append(job(next_id, user, project=project))
                next_id += 1
        ordered = fairshare.order(config, "q", [*waiting, *(j for _, j in running)], usage or {},
                                  int(now * 1000))
        for chosen in ordered[:slots - len(running)]:
            chosen.state = api.RUN
            running.append((now + users[chosen.spec.user][0], chosen))
        later = min(end for end, _ in running)
        for _, running_job in running:
            used[running_job.spec.user] += later - now
        running = [(end, j) for end, j in running if end > later]
        now = later
    return used


def test_a_saturated_queue_shares_slots_three_to_one() -> None:
    config = api.FairShare(half_life_s=60, users={"a": 3, "b": 1})
    used = simulate({"a": (1.0, ""), "b": (3.0, "")}, config, slots=8, seconds=300)
    assert used["a"] / used["b"] == pytest.approx(3.0, rel=0.10)


def test_projects_nest_and_share_first_then_their_users() -> None:
    config = api.FairShare(users={"a": 1, "b": 1, "c": 1}, projects={"research": 3, "physics": 1})
    used = simulate({"a": (2.0, "research/genomics"), "b": (2.0, "research/rna"), "c": (2.0, "physics")},
                    config, slots=8, seconds=300)
    assert (used["a"] + used["b"]) / used["c"] == pytest.approx(3.0, rel=0.10)
    assert used["a"] / used["b"] == pytest.approx(1.0, rel=0.10)


def test_recent_usage_puts_a_user_behind_and_fades_with_the_half_life() -> None:
    config = api.FairShare(half_life_s=60, users={"a": 1, "b": 1})
    heavy = {("default", "b"): (60 * 60_000, 0)}  # b used 60 slot-minutes, at time 0
    jobs = [job(1, "b", submit=1), job(2, "a", submit=2)]
    assert [j.id for j in fairshare.order(config, "q", jobs, heavy, now_ms=0)] == [2, 1]
    # Many half-lives later it has faded: the order is by submit time again (equal shares, no usage).
    assert [j.id for j in fairshare.order(config, "q", jobs, heavy, now_ms=60 * HALF)] == [1, 2]


def test_the_picker_serves_a_fairshare_queue_and_leaves_others_fcfs() -> None:
    queues = {"q": api.Queue(name="q", fairshare=api.FairShare(users={"a": 1, "b": 1})),
              "r": api.Queue(name="r")}
    running = [job(10 + i, "a", state=api.RUN) for i in range(3)]
    pending = [job(1, "a"), job(2, "a"), job(3, "b")]
    other = [api.Job(id=4, state=api.PEND, submit_time_ms=9, spec=api.JobSpec(queue="r", user="b")),
             api.Job(id=5, state=api.PEND, submit_time_ms=8, spec=api.JobSpec(queue="r", user="a"))]
    chosen = picker.load("fairshare")
    context = picker.PassContext([*pending, *running, *other], {}, 0)
    assert [j.id for j in picker.ordered([*pending, *other], queues, chosen, {}, context)] == [3, 1, 2, 5, 4]


def test_apply_credits_the_queue_s_usage_at_each_end() -> None:
    state = Limited()
    queue = api.Queue(name="normal", fairshare=api.FairShare(half_life_s=60, users={"alice": 2}))
    assert state.apply(log.Entry(put_queue=log.PutQueueEntry(queue=queue))).code == log.OK
    state.join("h1", 8)
    first = state.submit_as("alice", slots=2)
    assert state.dispatch(first, ("h1", 2)).code == api.DECISION_ACCEPTED
    report = log.HostReport(host="h1", generation=state.host("h1").generation, report=api.JobReport(
        job_id=first, attempt=0, started=api.JobStarted(pid=1, time_ms=1_000)))
    assert state.apply(log.Entry(report=report)).code == log.OK
    report.report.ClearField("started")
    report.report.finished.CopyFrom(api.JobFinished(exit_code=0, time_ms=11_000))
    assert state.apply(log.Entry(report=report)).code == log.OK
    (key, raw), = state.tables.scan("share_usage")
    assert fairshare.split_key(key) == ("normal", "default", "alice")
    assert api.ShareUsage.FromString(raw).slot_ms == 2 * 10_000


def test_a_pass_on_a_fairshare_queue_takes_turns() -> None:
    state = Limited()
    queue = api.Queue(name="normal", job_pick_plugin="fairshare",
                      fairshare=api.FairShare(users={"alice": 1, "bob": 1}))
    assert state.apply(log.Entry(put_queue=log.PutQueueEntry(queue=queue))).code == log.OK
    state.join("h1", 4)
    alice = [state.submit_as("alice") for _ in range(4)]
    bob = [state.submit_as("bob") for _ in range(4)]
    jobs, hosts, counters, _ = state.view()
    queues = [api.Queue.FromString(raw) for _, raw in state.tables.scan("queues")]
    config = core.CoreConfig(queue_pickers={"normal": picker.load("fairshare")})
    decisions = core.run_pass(jobs, queues, hosts, config, counters).decisions
    placed = [d.job_id for d in decisions if isinstance(d, Dispatch)]
    assert sorted(placed) == sorted([*alice[:2], *bob[:2]])  # 2 each, not alice's 4 first


@pytest.mark.parametrize("text, words", [
    ("fairshare = { users = { a = -1 } }", "queue 'x': fairshare: users: 'a': shares are whole numbers"),
    ("fairshare = { users = { a = 0 } }", "shares are whole numbers from 1"),
    ("fairshare = { share = { a = 1 } }", "queue 'x': fairshare: share: not a key of fairshare"),
    ("fairshare = { projects = { 'a//b' = 1 } }", "fairshare: projects: bad name 'a//b'"),
    ("fairshare = { half_life_s = -5 }", "fairshare: half_life_s"),
])
def test_a_bad_fairshare_is_refused_at_load_naming_the_queue_and_the_key(tmp_path: Path, text: str,
                                                                          words: str) -> None:
    assert words in load_error(tmp_path, GOOD + f'\n[[queues]]\nname = "x"\n{text}\n')
