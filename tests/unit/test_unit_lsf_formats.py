"""What LSF's commands print (cli/lsf/formats.py, bjobs.py): golden lines in LSF 10.1's layout (the
widths of LSF's lineage, openlava's bjobs.c), `-o` fields, `-json`, getopt's bundled letters."""

from __future__ import annotations

import argparse

import pytest
from lsf_site import utc  # noqa: F401 - the fixture

from cli.lsf import bjobs, formats
from cli.lsf.getopt import expand
from xce.v1 import api_pb2 as api

T0 = 1_786_000_000_000  # 2026-08-06 07:06:40 UTC


pytestmark = pytest.mark.usefixtures("utc")  # LSF prints local times: here UTC


def jobs() -> list[api.Job]:
    running = api.Job(id=3926, state=api.RUN, submit_time_ms=T0, start_time_ms=T0 + 5000, host="hostC",
                      spec=api.JobSpec(command=["/bin/sh", "-c", "verilog run"], name="verilog", user="user1",
                                       queue="priority", slots=6, env={"LSB_SUB_HOST": "hostF"}),
                      allocation=[api.HostAllocation(host="hostC", slots=4),
                                  api.HostAllocation(host="hostD", slots=2)])
    pending = api.Job(id=605, state=api.PEND, submit_time_ms=T0 - 86400_000 * 2,
                      pending_reason="no host has 8 free slots",
                      spec=api.JobSpec(command=["/bin/sh", "-c", "x"], name="a_very_long_job_name",
                                       user="a_long_user_name", queue="night_and_day_queue", slots=8))
    element = api.Job(id=700, array_id=690, array_index=3, state=api.EXIT, exit_code=2, submit_time_ms=T0,
                      start_time_ms=T0, end_time_ms=T0 + 60_000, host="hostA",
                      spec=api.JobSpec(command=["true"], name="sweep[3]", user="user1", queue="normal",
                                       slots=1,
                                       project="chem"))
    return [running, pending, element]


def args(**given: object) -> argparse.Namespace:
    base = dict(pending=False, running=False, suspended=False, done=False, all_states=False, wide=False)
    return argparse.Namespace(**{**base, **given})


def test_the_default_table(capsys: pytest.CaptureFixture[str]) -> None:
    bjobs._table(jobs(), args())
    assert capsys.readouterr().out.splitlines() == [
        "JOBID   USER    STAT  QUEUE      FROM_HOST   EXEC_HOST   JOB_NAME   SUBMIT_TIME",
        "3926    user1   RUN   priority   hostF       4*hostC     verilog    Aug  6 07:06",
        "                                             2*hostD",
        "605     a_long_ PEND  night_and_ -                       *_job_name Aug  4 07:06",
        "690     user1   EXIT  normal     -           hostA       sweep[3]   Aug  6 07:06",
    ]


def test_the_wide_and_pending_tables(capsys: pytest.CaptureFixture[str]) -> None:
    bjobs._table(jobs()[:2], args(wide=True))
    assert capsys.readouterr().out.splitlines()[1:] == [
        "3926    user1   RUN   priority   hostF       4*hostC:2*hostD verilog    Aug  6 07:06",
        "605     a_long_user_name PEND  night_and_day_queue -              -        a_very_long_job_name "
        "Aug  4 07:06",
    ]
    bjobs._table(jobs()[1:2], args(pending=True))
    assert capsys.readouterr().out.splitlines() == [
        "JOBID   USER    STAT  QUEUE       FROM_HOST      JOB_NAME           SUBMIT_TIME",
        "605     a_long_ PEND  night_and_d -              a_very_long_job_na Aug  4 07:06",
        " no host has 8 free slots;",
    ]


def test_output_fields_widths_and_json() -> None:
    fields, delimiter = formats.parse_format("jobid stat:5 queue:-10 exit_code proj_name job_name:6")
    assert formats.custom_rows(jobs(), fields, delimiter, header=True) == [
        "JOBID STAT       QUEUE EXIT_CODE PROJ_NAME JOB_NA",
        "3926 RUN     priority - default *rilog",  # a job name keeps its end (LSF's -o rule)
        "605 PEND  night_and_ - default *_name",
        "690 EXIT      normal 2 chem *ep[3]",
    ]
    fields, delimiter = formats.parse_format("id name delimiter=','")
    assert formats.custom_rows(jobs()[2:], fields, delimiter, header=False) == ["690,sweep[3]"]
    assert formats.json_records(jobs()[:1], formats.parse_format("jobid stat exec_host")[0]) == {
        "COMMAND": "bjobs", "JOBS": 1,
        "RECORDS": [{"JOBID": "3926", "STAT": "RUN", "EXEC_HOST": "4*hostC:2*hostD"}]}
    with pytest.raises(formats.FormatError, match="colour: Illegal field name"):
        formats.parse_format("jobid colour")


def test_the_long_form() -> None:
    text = bjobs.long_form(jobs()[2])
    assert text.splitlines() == [
        "Job <690[3]>, Job Name <sweep[3]>, User <user1>, Project <chem>, Status <EXIT>,",
        "                      Queue <normal>, Command <true>",
        "Thu Aug  6 07:06:40: Submitted from host <->, CWD <->;",
        "Thu Aug  6 07:06:40: Started 1 Task(s) on Host(s) <hostA>, Allocated 1 Slot(s) ",
        "                     on Host(s) <hostA>, Execution CWD <>;",
        "Thu Aug  6 07:07:40: Exited with exit code 2. The CPU time used is 0.0 seconds.",
    ]


def test_job_names_match_as_lsf_s_wildcards() -> None:
    element = jobs()[2]
    assert bjobs.name_matches("sweep", element) and bjobs.name_matches("sw*", element)
    assert bjobs.name_matches("sweep[3]", element) and not bjobs.name_matches("sweep[4]", element)
    snakemake = api.Job(spec=api.JobSpec(name="Snakemake_rule_a:s=1___(3f2e-aa)"))
    assert bjobs.name_matches("*3f2e-aa*", snakemake) and not bjobs.name_matches("*3f2e-ab*", snakemake)


def test_getopt_reads_bundled_letters() -> None:
    flags, with_value, whole = bjobs.GETOPT
    assert expand(["-aJ", "*x*", "-noheader", "-o", "jobid stat"], flags, with_value, whole) == \
        ["-a", "-J", "*x*", "-noheader", "-o", "jobid stat"]
    assert expand(["-uall", "-wa", "17"], flags, with_value, whole) == ["-u", "all", "-w", "-a", "17"]
    assert expand(["-az"], flags, with_value, whole) == ["-az"]  # not getopt's: the parser refuses it
