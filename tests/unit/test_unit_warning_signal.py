"""A job's warning signal before its run limit (sbatch --signal, bsub -wa/-wt; entry format 26): the words
of both commands as spec fields, the refusals at submit, the format gate (a leader whose cluster runs an
older format refuses the fields; apply before it keeps them unread), and the worker sending it once, at
the run limit less the warning time (stopped time not counted), to whom it names, journaled so that a
restarted worker does not send it again."""

from __future__ import annotations

import datetime
import re
import signal
from pathlib import Path

import pytest
from test_unit_refusals import State
from test_unit_worker_tasks import Host, Processes

from cli.lsf import bsub
from cli.lsf.entry import parse
from cli.parser import UsageError
from cli.slurm import entry, sbatch
from controller.fsm import validation
from controller.fsm.versions import ENTRY_FORMAT, WARNING_FORMAT
from worker.executor import Executor
from worker.journal import MemoryJournal
from xce.clock import ManualClock
from xce.errors import ServiceError
from xce.rules import warning_signal
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

NOW = datetime.datetime(2026, 12, 6, 10, 0, 0)
SUBMITTER = {"USER": "alice", "PATH": "/usr/bin", "HOME": "/home/alice"}
KEY = (5, 0)


def slurm(words: list[str], script: str = "", environ: dict[str, str] | None = None,
          tmp_path: Path | None = None) -> tuple[api.JobSpec, list[str]]:
    if script:
        assert tmp_path is not None
        (tmp_path / "job.sh").write_text(script)
        words = [*words, str(tmp_path / "job.sh")]
    _, args = entry.parse("sbatch", words)
    spec = sbatch.build(args, {**SUBMITTER, **(environ or {})}, "login1", NOW)
    return spec, args.notes


def lsf(words: list[str], script: tuple[str, str] | None = None) -> api.JobSpec:
    _, args = parse("bsub", words)
    if args.cmd and args.cmd[0] == "--":
        args.cmd = args.cmd[1:]
    return bsub.build(args, dict(SUBMITTER), "login1", script)


def warning(spec: api.JobSpec) -> tuple[int, int, int]:
    return spec.warning_signal, spec.warning_time_s, spec.warning_to


# ------------------------------------------------------------------ the commands' words


def test_sbatch_signal_fills_the_fields_its_steps_by_default_the_batch_shell_with_b(tmp_path: Path) -> None:
    spec, notes = slurm(["-t", "5", "--signal=USR2@90", "--wrap", "true"])
    assert warning(spec) == (12, 90, api.WARNING_TO_TASKS) and spec.run_limit_s == 300
    assert notes == []  # (it is sent now: no warning that it is not)
    assert warning(slurm(["--signal=B:SIGTERM@5", "--wrap", "true"])[0]) == (15, 5, api.WARNING_TO_SHELL)
    assert warning(slurm(["--signal=10", "--wrap", "true"])[0]) == (10, 60, api.WARNING_TO_TASKS)  # 60 s
    assert warning(slurm(["--wrap", "true"])[0]) == (0, 0, api.WARNING_TO_JOB)  # none asked
    reserved, said = slurm(["--signal=RB:INT@0", "--wrap", "true"])
    assert warning(reserved) == (2, 0, api.WARNING_TO_SHELL)
    assert said == ["--signal=RB:INT@0: R: (overlapping a reservation's MaxStartDelay) does not apply to "
                    "XCE; the signal is sent as without it"]


def test_sbatch_signal_from_its_input_variable_and_script_lines_ranked_as_slurm_ranks_them(
        tmp_path: Path) -> None:
    script = "#!/bin/sh\n#SBATCH --signal=B:USR1@30 -t 10\ntrue\n"
    assert warning(slurm([], script, tmp_path=tmp_path)[0]) == (10, 30, api.WARNING_TO_SHELL)
    from_env, _ = slurm([], script, {"SBATCH_SIGNAL": "USR2@120"}, tmp_path)
    assert warning(from_env) == (12, 120, api.WARNING_TO_TASKS)  # SBATCH_* over #SBATCH
    line, _ = slurm(["--signal=URG"], script, {"SBATCH_SIGNAL": "USR2@120"}, tmp_path)
    assert warning(line) == (23, 60, api.WARNING_TO_TASKS)  # the command line over both


@pytest.mark.parametrize("words, said", [
    (["--signal=NOPE@10"], "is not a signal"), (["--signal=X:USR1"], "write [{R|B}:]SIG[@TIME]"),
    (["--signal=USR1@70000"], "0 to 65535"), (["--signal=65"], "is not a signal"),
])
def test_sbatch_signal_refusals(words: list[str], said: str) -> None:
    with pytest.raises(UsageError, match=said.replace("[", r"\[").replace("|", r"\|")):
        slurm([*words, "--wrap", "true"])


def test_bsub_wa_and_wt_fill_the_fields_for_the_whole_job() -> None:
    assert warning(lsf(["-W", "60", "-wa", "URG", "-wt", "2", "myjob"])) == (23, 120, api.WARNING_TO_JOB)
    assert warning(lsf(["-wa", "SIGUSR2", "-wt", "1:30", "myjob"])) == (12, 5400, api.WARNING_TO_JOB)
    assert warning(lsf(["-wa", "10", "-wt", "0", "myjob"])) == (10, 0, api.WARNING_TO_JOB)
    script = "#!/bin/sh\n#BSUB -W 30\n#BSUB -wa USR1 -wt 5\ntrue\n"
    assert warning(lsf([], (script, "job.sh"))) == (10, 300, api.WARNING_TO_JOB)
    assert warning(lsf(["-wt", "1"], (script, "job.sh"))) == (10, 60, api.WARNING_TO_JOB)  # the line wins
    assert warning(lsf(["true"])) == (0, 0, api.WARNING_TO_JOB)


@pytest.mark.parametrize("words, said", [
    (["-wa", "USR2"], "-wa and -wt go together"), (["-wt", "2"], "-wa and -wt go together"),
    (["-wa", "NOPE", "-wt", "2"], "-wa NOPE: not a signal"), (["-wa", "65", "-wt", "2"], "not a signal"),
])
def test_bsub_refusals(words: list[str], said: str) -> None:
    with pytest.raises(UsageError, match=said):
        lsf([*words, "true"])


@pytest.mark.parametrize("text, said", [
    ("19:00", "[hour:]minute from 0 to 18:12"), ("1:60", "minutes below 60 after a colon"),
    ("x", "[hour:]minute, as 5 or 1:30"), ("1:x", "[hour:]minute, as 5 or 1:30"),
])
def test_bsub_wt_is_hour_minute_up_to_65535_seconds(text: str, said: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):  # the parser's refusal, said in LSF's words
        lsf(["-wa", "USR1", "-wt", text, "true"])
    assert said in capsys.readouterr().err
    assert bsub.warning_time("18:12") == 65520


# ------------------------------------------------------------------ checked at submit, and the format gate


def spec_with(**fields: object) -> api.JobSpec:
    return api.JobSpec(command=["true"], user="u", run_limit_s=60, **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize("fields, said", [
    ({"warning_signal": 0, "warning_time_s": 30}, "without a warning signal"),
    ({"warning_signal": 65}, "a signal is a number from 1 to 64"),
    ({"warning_signal": -1, "warning_to": api.WARNING_TO_SHELL}, "a signal is a number from 1 to 64"),
    ({"warning_signal": 14}, "one the shims that lead a job's processes outlive"),  # ALRM would end them
    ({"warning_signal": 18, "warning_to": api.WARNING_TO_TASKS}, "outlive"),  # CONT: a stopped job runs
    ({"warning_signal": 10, "warning_time_s": 65536}, "from 0 to 65535 seconds"),
    ({"warning_signal": 10, "warning_time_s": -1}, "from 0 to 65535 seconds"),
    ({"warning_signal": 10, "warning_to": 7}, "the job (0), its batch shell (1) or its tasks (2)"),
])
def test_a_bad_warning_is_refused_with_its_words(fields: dict[str, object], said: str) -> None:
    with pytest.raises(ServiceError, match=re.escape(said)) as refused:
        validation.check_warning(spec_with(**fields))
    assert refused.value.code == log.INVALID_ARGUMENT


def test_what_slurm_takes_is_taken() -> None:
    for fields in ({"warning_signal": 14, "warning_to": api.WARNING_TO_SHELL},  # any to the shell alone
                   {"warning_signal": 64, "warning_to": api.WARNING_TO_SHELL, "warning_time_s": 65535},
                   {"warning_signal": 10, "warning_time_s": 0}, {"warning_signal": 23},
                   {"warning_signal": 12, "warning_time_s": 120, "warning_to": api.WARNING_TO_TASKS}):
        validation.check_warning(spec_with(**fields))
    validation.check_warning(api.JobSpec(command=["true"], warning_signal=10))  # no run limit: never due


def test_the_leader_refuses_the_fields_while_the_cluster_runs_an_older_format() -> None:
    assert WARNING_FORMAT == 26 and ENTRY_FORMAT >= WARNING_FORMAT
    for fields in ({"warning_signal": 10}, {"warning_time_s": 30}, {"warning_to": api.WARNING_TO_SHELL}):
        spec = spec_with(**fields)
        with pytest.raises(ServiceError, match="need entry format 26: every replica must run a newer XCE") \
                as refused:
            validation.check_lsf_options_known(spec, WARNING_FORMAT - 1)
        assert refused.value.code == log.INVALID_ARGUMENT
        validation.check_lsf_options_known(spec, WARNING_FORMAT)
    validation.check_lsf_options_known(spec_with(), WARNING_FORMAT - 1)  # none asked: nothing to refuse


def submit(state: State, **fields: object) -> log.Result:
    return state.apply(log.Entry(submit=log.SubmitBatch(requests=[
        api.SubmitJobsRequest(request_id=f"r{state.index}", jobs=[spec_with(**fields)])])))


def test_apply_checks_the_fields_from_format_26_and_kept_them_unread_before() -> None:
    state = State(entry_format=WARNING_FORMAT)
    good = submit(state, warning_signal=12, warning_time_s=90, warning_to=api.WARNING_TO_TASKS)
    assert good.code == log.OK
    assert warning(state.job(good.job_ids[0]).spec) == (12, 90, api.WARNING_TO_TASKS)
    bad = submit(state, warning_signal=99)
    assert bad.code == log.INVALID_ARGUMENT and "from 1 to 64" in bad.message
    older = State(entry_format=WARNING_FORMAT - 1)  # an entry an older leader took: read as it was
    assert submit(older, warning_signal=99).code == log.OK


# ------------------------------------------------------------------ the worker sends it


class Worker:
    def __init__(self, tmp: Path, processes: Processes, journal: MemoryJournal, clock: ManualClock) -> None:
        self.host = Host(processes)
        self.reports: list[api.JobReport] = []
        self.x = Executor(tmp / "h1", 1.0, self.reports.append, host=self.host,  # type: ignore[arg-type]
                          journal=journal, name="h1", clock=clock)

    def look(self) -> None:
        self.x.monitor(report_usage=False)


def job(to: int = api.WARNING_TO_JOB, signal_: int = signal.SIGUSR1, run_limit_s: int = 4) -> api.Job:
    return api.Job(id=KEY[0], attempt=KEY[1], host="h1", readable_id="r5", state=api.RUN, spec=api.JobSpec(
        user="alice", slots=1, command=["sh"], run_limit_s=run_limit_s, warning_signal=signal_,
        warning_time_s=2, warning_to=to))  # type: ignore[arg-type]


def sent(processes: Processes, sig: int = signal.SIGUSR1) -> list[int]:
    return [pid for pid, number in processes.signals if number == sig]


def test_the_warning_is_sent_once_at_the_limit_less_its_time_stopped_time_not_counted(tmp_path: Path) -> None:
    processes, journal, clock = Processes(), MemoryJournal(), ManualClock()
    worker = Worker(tmp_path, processes, journal, clock)
    worker.x.run(job(), "C")
    [shim] = processes.alive
    clock.advance(1_500)
    worker.look()
    worker.x.signal(KEY, api.SIGNAL_STOP)  # stopped 1.5 s in: the next 10 s do not count
    clock.advance(10_000)
    worker.look()
    assert sent(processes) == []
    worker.x.signal(KEY, api.SIGNAL_CONT)
    clock.advance(400)
    worker.look()
    assert sent(processes) == []  # 1.9 s run
    clock.advance(100)
    worker.look()
    assert sent(processes) == [shim] and (journal.get(KEY) or {}).get("warned") is True
    clock.advance(1_000)
    worker.look()
    assert sent(processes) == [shim]  # once
    assert not sent(processes, signal.SIGTERM)  # the run limit is its own: 4 s, at 3 s run not yet
    clock.advance(1_100)
    worker.look()
    assert sent(processes, signal.SIGTERM) == [shim] and (journal.get(KEY) or {}).get("runlimit") is True


def test_a_restarted_worker_does_not_send_it_again_but_sends_one_not_sent_yet(tmp_path: Path) -> None:
    processes, journal, clock = Processes(), MemoryJournal(), ManualClock()
    first = Worker(tmp_path, processes, journal, clock)
    first.x.run(job(), "C")
    [shim] = processes.alive
    clock.advance(1_000)
    first.look()
    again = Worker(tmp_path, processes, journal, clock)  # restarted before it was due
    again.x.recover()
    clock.advance(1_000)
    again.look()
    assert sent(processes) == [shim]
    third = Worker(tmp_path, processes, journal, clock)  # restarted after it was sent
    third.x.recover()
    clock.advance(1_000)
    third.look()
    assert sent(processes) == [shim]
    clock.advance(1_100)
    third.look()
    assert sent(processes, signal.SIGTERM) == [shim]  # the run limit still ends it


def test_without_a_run_limit_it_is_never_due(tmp_path: Path) -> None:
    processes, journal, clock = Processes(), MemoryJournal(), ManualClock()
    worker = Worker(tmp_path, processes, journal, clock)
    worker.x.run(job(run_limit_s=0), "C")
    clock.advance(100_000_000)
    worker.look()
    assert processes.signals == [] and "warning_signal" not in (journal.get(KEY) or {})


@pytest.mark.parametrize("to, gets", [
    (api.WARNING_TO_JOB, {"shim", "task"}), (api.WARNING_TO_SHELL, {"shell"}),
    (api.WARNING_TO_TASKS, {"task"}),
])
def test_it_goes_to_whom_it_names(tmp_path: Path, to: int, gets: set[str]) -> None:
    processes, journal, clock = Processes(), MemoryJournal(), ManualClock()
    worker = Worker(tmp_path, processes, journal, clock)
    shell: list[tuple[int, int]] = []
    # (the executor's own reads /proc: tests/cluster/test_warning_signal.py runs it)
    worker.x.monitoring._signal_command = lambda key, pid, sig: shell.append((pid, sig))
    worker.x.run(job(to), "C")
    [shim] = processes.alive
    task = worker.x.tasks.launch(api.LaunchTask(job_id=KEY[0], attempt=KEY[1], task_id="t1", host="h1",
                                                command=["rank"], credential="C", origin="h1")).pid
    clock.advance(2_000)
    worker.look()
    names = {shim: "shim", task: "task"}
    assert {names[pid] for pid in sent(processes)} | {"shell" for pid, _ in shell if pid == shim} == gets


def test_a_warning_the_shims_would_not_outlive_or_that_cannot_reach_the_shell_is_refused() -> None:
    """PIPE and XFSZ end the wrapper beside a job's command (post-exec, interactive); B: there would
    reach the wrapper, not the batch shell. The worker asks the same (a spec an older leader stored)."""
    for fields in ({"warning_signal": 13}, {"warning_signal": 25},
                   {"warning_signal": 10, "warning_to": api.WARNING_TO_SHELL, "post_exec": "cleanup"}):
        spec = api.JobSpec(command=["true"], run_limit_s=60, **fields)  # type: ignore[arg-type]
        assert warning_signal.problem(spec)
        with pytest.raises(ServiceError):
            validation.check_warning(spec)
    interactive = api.JobSpec(command=["sh"], warning_signal=10, warning_to=api.WARNING_TO_SHELL)
    interactive.env["XCE_INTERACTIVE"] = "127.0.0.1:1"
    assert "interactive" in warning_signal.problem(interactive)
    assert warning_signal.problem(api.JobSpec(command=["true"], warning_signal=10)) == ""
