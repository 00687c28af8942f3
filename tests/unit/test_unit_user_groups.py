"""User groups (xce/rules/user_groups.py) and their fair share (xce/rules/fairshare.py: a level between
project and user; controller/fsm/shares.py charges it from entry format 24): groups inside groups are
expanded and a cycle refused; `bsub -G` names a group of the owner's, else the submit is refused with
LSF's words; slots go to groups in the ratio of their shares, then to their users; apply charges the
job's group only from the format that knows it."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller import config, fsm
from controller.fsm.versions import USER_GROUP_FORMAT
from tests.unit.test_unit_config import GOOD, load_error, write
from tests.unit.test_unit_fairshare import simulate
from tests.unit.test_unit_limits import Limited, init_entry
from xce.rules import fairshare, user_groups
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

GROUPS = (api.UserGroup(name="chem", members=["alice", "carol"]),
          api.UserGroup(name="physics", members=["alice", "a", "b"]))


def test_groups_inside_groups_are_expanded_and_a_cycle_refused() -> None:
    groups = user_groups.expand({"all_sci": ["physics", "dave"], "physics": ["bob", "alice", "bob"]})
    assert [(g.name, list(g.members)) for g in groups] == [("all_sci", ["alice", "bob", "dave"]),
                                                             ("physics", ["alice", "bob"])]
    with pytest.raises(user_groups.UserGroupError, match="contains itself"):
        user_groups.expand({"a": ["b"], "b": ["a"]})
    with pytest.raises(user_groups.UserGroupError, match="reserved"):
        user_groups.expand({"default": ["x"]})
    with pytest.raises(user_groups.UserGroupError, match="bad member"):
        user_groups.expand({"g": ["bad/name"]})


def test_the_cluster_file_gives_fair_share_groups_their_members(tmp_path: Path) -> None:
    text = GOOD + '\n[user_groups]\nphysics = ["a", "b"]\nsci = ["physics", "c"]\n' \
        '[[queues]]\nname = "fs"\nfairshare = { groups = { sci = 3, default = 1 } }\n'
    loaded = config.load(write(tmp_path, text))
    assert [(g.name, list(g.members)) for g in loaded.user_groups] == [("physics", ["a", "b"]),
                                                                        ("sci", ["a", "b", "c"])]
    queue = next(q for q in loaded.queues if q.name == "fs")
    assert dict(queue.fairshare.groups) == {"sci": 3, "default": 1}
    assert [(g.name, list(g.members)) for g in queue.fairshare.group_members] == [("sci", ["a", "b", "c"])]
    assert loaded.user_groups_digest() != ""


@pytest.mark.parametrize("text, words", [
    ('[user_groups]\na = ["b"]\nb = ["a"]\n', "[user_groups]: user group 'a': contains itself"),
    ('[user_groups]\ng = "alice"\n', "[user_groups] maps group names to lists"),
    ('[[queues]]\nname = "x"\nfairshare = { groups = { nope = 1 } }\n',
     "queue 'x': fairshare: groups: 'nope' is not a user group"),
])
def test_a_bad_user_group_is_refused_at_load(tmp_path: Path, text: str, words: str) -> None:
    assert words in load_error(tmp_path, GOOD + "\n" + text)


def spec(user: str, group: str = "", project: str = "") -> api.JobSpec:
    return api.JobSpec(command=["x"], queue="q", user=user, user_group=group, project=project)


def test_a_job_is_charged_to_its_g_group_else_its_owner_s_first_else_default() -> None:
    config_ = api.FairShare(groups={"chem": 1, "physics": 1}, group_members=GROUPS)
    assert fairshare.charge_path(config_, spec("alice", "physics")) == "default/@physics"
    assert fairshare.charge_path(config_, spec("alice")) == "default/@chem"  # the first by name
    assert fairshare.charge_path(config_, spec("carol", "physics")) == "default/@chem"  # not a member
    assert fairshare.charge_path(config_, spec("zed", project="r/x")) == "r/x/@default"
    assert fairshare.charge_path(api.FairShare(users={"a": 1}), spec("alice", "physics")) == "default"


def test_a_saturated_queue_shares_slots_between_groups_then_their_users() -> None:
    config_ = api.FairShare(half_life_s=60, groups={"physics": 3, "chem": 1},
                            group_members=[api.UserGroup(name="physics", members=["a", "b"]),
                                           api.UserGroup(name="chem", members=["c"])])
    used = simulate({"a": (1.0, ""), "b": (2.0, ""), "c": (1.0, "")}, config_, slots=16, seconds=300)
    assert (used["a"] + used["b"]) / used["c"] == pytest.approx(3.0, rel=0.10)
    assert used["a"] / used["b"] == pytest.approx(1.0, rel=0.10)
    flat = simulate({"a": (1.0, ""), "b": (2.0, ""), "c": (1.0, "")}, api.FairShare(half_life_s=60),
                    slots=12, seconds=300)
    assert (flat["a"] + flat["b"]) / flat["c"] == pytest.approx(2.0, rel=0.10)  # without: per user


class Grouped(Limited):
    def __init__(self) -> None:
        super().__init__()
        init = log.InitCluster(cluster_id="c", config_digest="d", limits_digest="x1",
                               queues=[api.Queue(name="normal"), api.Queue(name="low")],
                               user_groups=GROUPS, user_groups_digest="g1")
        assert self.apply(init_entry(init), USER_GROUP_FORMAT).code == log.OK

    def submit_g(self, user: str, group: str, format_: int = USER_GROUP_FORMAT) -> log.Result:
        job = api.JobSpec(command=["true"], queue="normal", user=user, user_group=group)
        return self.apply(log.Entry(submit=log.SubmitBatch(requests=[
            api.SubmitJobsRequest(request_id=f"r{self.index}", jobs=[job])])), format_)


def test_g_names_a_group_of_the_owner_s_or_the_submit_is_refused_with_lsf_s_words() -> None:
    state = Grouped()
    assert [(g.name, list(g.members)) for g in fsm.read_meta(state.tables).user_groups] == \
        [(g.name, list(g.members)) for g in GROUPS]
    assert state.submit_g("carol", "chem").code == log.OK
    refused = state.submit_g("carol", "physics")
    assert (refused.code, refused.message) == (log.INVALID_ARGUMENT,
                                               "-G physics: User not in the specified user group")
    assert "Bad user group name" in state.submit_g("carol", "nope").message
    assert len(list(state.tables.scan("jobs"))) == 1


def test_apply_charges_the_job_s_group_from_the_format_that_knows_it() -> None:
    for format_, key in ((USER_GROUP_FORMAT, "default/@physics"), (USER_GROUP_FORMAT - 1, "default")):
        state = Grouped()
        queue = api.Queue(name="normal", fairshare=api.FairShare(groups={"physics": 1}, group_members=GROUPS))
        assert state.apply(log.Entry(put_queue=log.PutQueueEntry(queue=queue)), format_).code == log.OK
        state.join("h1", 8)
        job_id = int(state.submit_g("alice", "physics").job_ids[0])
        assert state.dispatch(job_id, ("h1", 1), format_=format_).code == api.DECISION_ACCEPTED
        report = log.HostReport(host="h1", generation=state.host("h1").generation, report=api.JobReport(
            job_id=job_id, attempt=0, started=api.JobStarted(pid=1, time_ms=1_000)))
        assert state.apply(log.Entry(report=report), format_).code == log.OK
        report.report.ClearField("started")
        report.report.finished.CopyFrom(api.JobFinished(exit_code=0, time_ms=5_000))
        assert state.apply(log.Entry(report=report), format_).code == log.OK
        (raw_key, raw), = state.tables.scan("share_usage")
        assert fairshare.split_key(raw_key) == ("normal", key, "alice")
        assert api.ShareUsage.FromString(raw).slot_ms == 4_000


def test_an_older_format_keeps_user_groups_off() -> None:
    state = Limited()
    init = log.InitCluster(cluster_id="c", config_digest="d", limits_digest="x1", user_groups=GROUPS,
                           user_groups_digest="g1", queues=[api.Queue(name="normal"), api.Queue(name="low")])
    assert state.apply(init_entry(init), USER_GROUP_FORMAT - 1).code == log.OK
    assert not fsm.read_meta(state.tables).user_groups and not fsm.read_meta(state.tables).user_groups_digest
