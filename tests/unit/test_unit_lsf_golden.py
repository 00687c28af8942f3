"""Golden output of LSF's commands (cli/lsf/) for a fixed cluster, in LSF 10.1's layout: the columns
and widths of LSF's tables, its messages. The cluster is a fake client: the commands' printing is
what is under test (the cluster side is tests/cluster/test_lsf_*.py's)."""

from __future__ import annotations

import argparse
import time
from typing import Any

import pytest
from lsf_site import utc  # noqa: F401 - the fixture

from cli.lsf import bhist, bhosts, bqueues, cluster_info, lsclusters, lsid
from xce.v1 import api_pb2 as api

T0 = 1_786_000_000_000  # Thu Aug  6 07:06:40 2026 UTC


class FakeClient:
    def __init__(self) -> None:
        run = api.Job(id=11, state=api.RUN, submit_time_ms=T0, start_time_ms=T0 + 4000, host="hostA",
                      spec=api.JobSpec(command=["/bin/sh", "-c", "./sim"], name="sim", user="alice",
                                       queue="normal", slots=4, env={"LSB_SUB_HOST": "login1"}),
                      allocation=[api.HostAllocation(host="hostA", slots=4)])
        pend = api.Job(id=12, state=api.PEND, submit_time_ms=T0,
                       spec=api.JobSpec(command=["true"], name="wait", user="alice", queue="normal", slots=2))
        done = api.Job(id=9, state=api.DONE, submit_time_ms=T0 - 60_000, start_time_ms=T0 - 50_000,
                       end_time_ms=T0 - 20_000, host="hostB", usage=api.Usage(user_cpu_s=1.5),
                       spec=api.JobSpec(command=["true"], name="prep", user="alice", queue="idle", slots=1,
                                        project="chem"))
        self.jobs = [run, pend, done]

    def list_queues(self, **_: Any) -> api.ListQueuesResponse:
        return api.ListQueuesResponse(default_queue="normal", queues=[
            api.Queue(name="normal", priority=30),
            api.Queue(name="idle", priority=20, closed=True, slot_limit=8),
            api.Queue(name="priority", priority=43, inactive=True)])

    def list_jobs(self, filters: list[str] = (), **_: Any) -> list[api.Job]:  # type: ignore[assignment]
        states = next((f.split(":", 2)[2].split(",") for f in filters if f.startswith("state:in:")), None)
        return [j for j in self.jobs if states is None or api.JobState.Name(j.state) in states]

    def list_hosts(self, **_: Any) -> api.ListHostsResponse:
        return api.ListHostsResponse(hosts=[
            api.Host(spec=api.HostSpec(name="hostA", slots=4, memory_mb=8192, ncpus=4), status=api.HOST_OK,
                     slots_used=4),
            api.Host(spec=api.HostSpec(name="hostB", slots=8), status=api.HOST_OK, closed=True),
            api.Host(spec=api.HostSpec(name="hostC", slots=8), status=api.HOST_UNAVAIL)])

    def status(self) -> api.StatusResponse:
        return api.StatusResponse(cluster_id="prod", replicas=[
            api.ReplicaStatus(id=1, grpc_address="ctl1:7100", role="follower"),
            api.ReplicaStatus(id=2, grpc_address="ctl2:7100", role="leader")])

    def who_am_i(self) -> api.WhoAmIResponse:
        return api.WhoAmIResponse(name="alice")

    def history(self, request: api.HistoryRequest, limit: int = 0) -> list[api.Job]:
        return [j for j in self.jobs if j.state in (api.DONE, api.EXIT)]

    def accounting(self, request: api.AccountingRequest) -> api.AccountingResponse:
        return api.AccountingResponse(totals=[api.UsageTotals(user="alice", queue="normal", jobs=3, done=2,
                                                              exited=1, started=3, cpu_ms=9000, wait_ms=6000,
                                                              run_ms=30000)])


pytestmark = pytest.mark.usefixtures("utc")  # LSF prints local times: here UTC


def printed(module: Any, capsys: pytest.CaptureFixture[str], **args: Any) -> list[str]:
    assert module.run(FakeClient(), argparse.Namespace(**args)) == 0
    return capsys.readouterr().out.splitlines()


def test_bqueues(capsys: pytest.CaptureFixture[str]) -> None:
    assert printed(bqueues, capsys, queues=[], user=None, wide=False, long=False) == [
        "QUEUE_NAME      PRIO STATUS          MAX JL/U JL/P JL/H NJOBS  PEND   RUN  SUSP",
        "priority         43  Open:Inact        -    -    -    -     0     0     0     0",
        "normal           30  Open:Active       -    -    -    -     6     2     4     0",
        "idle             20  Closed:Active     8    -    -    -     0     0     0     0",
    ]


def test_bhosts(capsys: pytest.CaptureFixture[str]) -> None:
    assert printed(bhosts, capsys, hosts=[], wide=False, long=False) == [
        "HOST_NAME          STATUS       JL/U    MAX  NJOBS    RUN  SSUSP  USUSP    RSV",
        "hostA              closed_Full     -      4      4      4      0      0      0",
        "hostB              closed_Adm      -      8      0      0      0      0      0",
        "hostC              unavail         -      8      0      0      0      0      0",
    ]


def test_bhist_summary(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "time", lambda: (T0 + 64_000) / 1000)
    lines = printed(bhist, capsys, ids=[], user=None, queue=None, name=None, project=None, long=False,
                    all_states=True, done=False, pending=False, running=False, suspended=False)
    assert lines == [
        "Summary of time in seconds spent in various states:",
        "JOBID   USER    JOB_NAME  PEND    PSUSP   RUN     USUSP   SSUSP   UNKWN   TOTAL",
        "9       alice   prep      10      0       30      0       0       0       40",
        "11      alice   sim       4       0       60      0       0       0       64",
        "12      alice   wait      64      0       0       0       0       0       64",
    ]


def test_lsid_lsclusters_lshosts(capsys: pytest.CaptureFixture[str]) -> None:
    assert printed(lsid, capsys) == [
        "IBM Spectrum LSF Standard 10.1.0.0, XCE's LSF 10.1 commands (not IBM's)",
        "Copyright XCE's authors; LSF is IBM's. This is XCE.", "",
        "My cluster name is prod", "My master name is ctl2"]
    assert printed(lsclusters, capsys, wide=False, long=False) == [
        "CLUSTER_NAME   STATUS   MASTER_HOST               ADMIN    HOSTS  SERVERS",
        "prod           ok       ctl2                      xce          3        3"]
    assert printed(cluster_info, capsys, command="lshosts", names=["hostA"], wide=False, long=False) == [
        "HOST_NAME      type    model  cpuf ncpus maxmem maxswp server RESOURCES",
        "hostA          X86_64  -       1.0     4   8.0G      -    Yes ()"]


def test_bacct(capsys: pytest.CaptureFixture[str]) -> None:
    lines = printed(cluster_info, capsys, command="bacct", names=[], user=None, queue=None, project=None,
                    wide=False, long=False)
    assert lines[lines.index("SUMMARY:      ( time unit: second ) ") + 1:][:4] == [
        " Total number of done jobs:         2      Total number of exited jobs:       1",
        " Total CPU time consumed:         9.0      Average CPU time consumed:       3.0",
        " Average wait time in queue:      2.0",
        " Average turnaround time:        12.0 (seconds/job)"]


def test_bacct_of_a_project_from_the_jobs_history(capsys: pytest.CaptureFixture[str]) -> None:
    lines = printed(cluster_info, capsys, command="bacct", names=[], user=None, queue=None, project="chem",
                    wide=False, long=False)
    assert "  - accounted on project chem." in lines
    assert lines[lines.index("SUMMARY:      ( time unit: second ) ") + 1:][:4] == [
        " Total number of done jobs:         1      Total number of exited jobs:       0",
        " Total CPU time consumed:         1.5      Average CPU time consumed:       1.5",
        " Average wait time in queue:     10.0",
        " Average turnaround time:        40.0 (seconds/job)"]


def test_bhosts_long(capsys: pytest.CaptureFixture[str]) -> None:
    lines = printed(bhosts, capsys, hosts=["hostA"], wide=False, long=True)
    assert lines[:4] == [
        "HOST  hostA",
        "STATUS           CPUF  JL/U    MAX  NJOBS    RUN  SSUSP  USUSP    RSV DISPATCH_WINDOW",
        "closed_Full      1.00     -      4      4      4      0      0      0      -",
        ""]
    assert lines[4] == " CURRENT LOAD USED FOR SCHEDULING:" and lines[6].startswith(" Total ")


class GroupsAndReservations(FakeClient):
    def list_queues(self, **_: Any) -> api.ListQueuesResponse:
        return api.ListQueuesResponse(user_groups=[api.UserGroup(name="chem", members=["carol"]),
                                                   api.UserGroup(name="physics", members=["alice", "bob"])])

    def list_hosts(self, **_: Any) -> api.ListHostsResponse:
        window = {"begin_ms": T0, "end_ms": T0 + 2 * 3_600_000}
        both = [api.HostSlots(host="hostA", slots=4), api.HostSlots(host="hostB", slots=2)]
        return api.ListHostsResponse(hosts=[
            api.Host(spec=api.HostSpec(name="hostA", slots=4), rsv_free={"alice#0": 1}),
            api.Host(spec=api.HostSpec(name="hostB", slots=2), rsv_free={"alice#0": 2})], reservations=[
            api.Reservation(name="alice#0", owner="admin", users=["alice", "bob"], active=True, **window,
                            hosts=both),
            api.Reservation(name="maint", owner="admin", begin_ms=T0 + 86_400_000, end_ms=T0 + 90_000_000,
                            hosts=[api.HostSlots(host="hostB", slots=2)])])


def test_bugroup_and_brsvs(capsys: pytest.CaptureFixture[str]) -> None:
    from cli.lsf import brsv

    def shown(module: Any, **args: Any) -> list[str]:
        assert module.run(GroupsAndReservations(), argparse.Namespace(**args)) == 0
        return capsys.readouterr().out.splitlines()

    assert shown(cluster_info, command="bugroup", names=[], wide=False, long=False) == [
        "GROUP_NAME    USERS",
        "chem          carol",
        "physics       alice bob",
    ]
    assert shown(brsv, command="brsvs", long=False) == [
        "RSVID                 TYPE   USER                  NCPUS     RSV_HOSTS              TIME_WINDOW",
        "alice#0               user   alice bob             3/6       hostA:3/4              8/6/7/6-8/6/9/6",
        "                                                             hostB:0/2",
        "maint                 user   admin                 0/2       hostB:0/2              8/7/7/6-8/7/8/6",
    ]


class Loaded(FakeClient):
    """Load indices, a host group, a license, limits (one of a job group) and what they hold."""

    def list_hosts(self, **_: Any) -> api.ListHostsResponse:
        listed = super().list_hosts()
        listed.hosts[0].load.update({"r15s": 0.5, "r1m": 1.25, "r15m": 2.0, "ut": 0.42, "mem": 4096})
        listed.groups.add(name="gpu_nodes", members=["hostA", "hostB"])
        listed.shared.add(name="license_x", total=10)
        listed.shared_used["license_x"] = 3
        return listed

    def list_queues(self, **_: Any) -> api.ListQueuesResponse:
        listed = super().list_queues()
        listed.limits.extend([api.Limit(name="users_normal", queues=["normal"], per_user=True, slots=8),
                              api.Limit(name="group::sims", groups=["/sims"], jobs=2, owner="alice")])
        listed.limit_used.update({"limit/users_normal/alice/slots": 4, "limit/group::sims/-/jobs": 1})
        listed.queues[0].chunk_job_size = 4
        return listed


def test_lsload_bmgroup_bresources_blimits(capsys: pytest.CaptureFixture[str]) -> None:
    def shown(command: str) -> list[str]:
        args = argparse.Namespace(command=command, names=[], wide=False, long=False)
        assert cluster_info.run(Loaded(), args) == 0  # type: ignore[arg-type]
        return capsys.readouterr().out.splitlines()

    assert shown("lsload") == [
        "HOST_NAME       status  r15s   r1m  r15m   ut    pg  ls    it   tmp   swp   mem",
        "hostA           ok       0.5   1.2   2.0  42%     -   -     -     -     -  4.0G",
        "hostB           ok         -     -     -    -     -   -     -     -     -     -",
        "hostC           unavail    -     -     -    -     -   -     -     -     -     -",
    ]
    assert shown("bmgroup") == ["GROUP_NAME    HOSTS", "gpu_nodes     hostA hostB"]
    assert shown("bresources") == [
        "RESOURCE                TOTAL       RESERVED       LOCATION",
        "license_x                10.0            3.0       all",
    ]
    assert shown("blimits") == [
        "INTERNAL RESOURCE LIMITS:",
        "",
        "    NAME                USERS     QUEUES    PROJECTS  SLOTS       JOBS",
        "    users_normal        all/      normal    -         4/8         -",
        "    group::sims         -         -         -         -           1/2",
    ]


def test_bqueues_long_and_bjgroup(capsys: pytest.CaptureFixture[str]) -> None:
    from cli.lsf import bgroups

    client = Loaded()
    client.jobs[1].spec.job_group = "/sims"
    client.jobs[0].spec.job_group = "/sims/a"
    assert bgroups.run(client, argparse.Namespace(command="bjgroup", paths=[], alone=False)) == 0
    assert capsys.readouterr().out.splitlines() == [
        "GROUP_NAME     NJOBS   PEND    RUN   SSUSP  USUSP  FINISH       SLA   JLIMIT  OWNER",
        "/sims              2      1      1       0      0       0        ()      1/2  alice",
        "/sims/a            1      0      1       0      0       0        ()        -  -",
    ]
    assert bqueues.run(client, argparse.Namespace(queues=["normal"], user=None, wide=False, long=True)) == 0
    text = capsys.readouterr().out
    assert "QUEUE: normal\n  -- No description provided. This is the default queue." in text
    assert "CHUNK_JOB_SIZE:  4" in text
    assert "PRIO NICE STATUS          MAX JL/U JL/P JL/H NJOBS  PEND   RUN SSUSP USUSP  RSV" in text
