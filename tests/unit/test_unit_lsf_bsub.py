"""bsub's job (cli/lsf/bsub.py), built from its words as LSF 10.1 reads them: a command line run by the
shell, #BSUB scripts under the command line's options, -M units, -o for both streams, and every
misparse refused with nothing submitted."""

from __future__ import annotations

import datetime
import os

import pytest

from cli.lsf import bsub
from cli.lsf.entry import parse, run
from cli.parser import UsageError
from xce.v1 import api_pb2 as api

ENV = {"PATH": "/opt/bin:/usr/bin", "OMP_NUM_THREADS": "4", "XCE_TOKEN": "secret"}


def job(words: list[str], script: tuple[str, str] | None = None, env: dict[str, str] | None = None
        ) -> api.JobSpec:
    _, args = parse("bsub", words)
    if args.cmd and args.cmd[0] == "--":
        args.cmd = args.cmd[1:]
    return bsub.build(args, dict(ENV if env is None else env), "login1", script)


def test_a_command_line_runs_through_the_shell_named_by_itself() -> None:
    spec = job(["-q", "normal", "-n", "4", "echo", "a;", "echo", "$HOME"])
    assert list(spec.command) == ["/bin/sh", "-c", "echo a; echo $HOME"]
    assert spec.name == "echo a; echo $HOME" and spec.queue == "normal" and spec.slots == 4
    assert spec.env["OMP_NUM_THREADS"] == "4" and "XCE_TOKEN" not in spec.env
    assert spec.env["LSB_SUB_HOST"] == "login1" and spec.env["LSB_SUBCWD"] == os.getcwd()


def test_output_without_error_file_takes_both_streams_and_memory_has_units() -> None:
    spec = job(["-o", "out.%J", "-M", "4GB", "true"])
    assert (spec.stdout_path, spec.stderr_path, spec.mem_limit_mb) == ("out.%J", "out.%J", 4096)
    assert job(["-M", "2000", "true"]).mem_limit_mb == 2000  # LSF_UNIT_FOR_LIMITS=MB
    assert job(["-M", "1500.0", "true"]).mem_limit_mb == 1500
    assert job(["-M", "1536KB", "-e", "err", "true"]).mem_limit_mb == 2  # rounded; -e its own
    with pytest.raises(UsageError, match="-M 4 apples"):
        job(["-M", "4 apples", "true"])


SCRIPT = """#!/bin/bash
#BSUB -J from_script
#BSUB -q idle
#BSUB -n 2
#BSUB -R "rusage[mem=100]"
#BSUB -W 1:30
#BSUB -We 45
#BSUB -M 3000
#BSUB -o /tmp/out.%J.%I
#BSUB -e /tmp/err.%J
#BSUB -cwd /scratch/run
#BSUB -P proj/sub
#BSUB -w "done(12)"
#BSUB -env "all, ~OMP_NUM_THREADS, EXTRA=1"
#BSUB -x
#BSUB -r
#BSUB -sp 7
echo $LSB_JOBID
"""


def test_a_script_s_twelve_kinds_of_bsub_line_and_the_command_line_wins() -> None:
    spec = job(["-q", "normal", "-n", "8"], (SCRIPT, "stdin"))
    assert list(spec.command) == ["/bin/bash", "-c", SCRIPT, "job_script"]
    assert (spec.name, spec.queue, spec.slots) == ("from_script", "normal", 8)  # -q, -n: the command line's
    assert (spec.resource_req, spec.run_limit_s, spec.estimate_s, spec.mem_limit_mb) == \
        ("rusage[mem=100]", 5400, 2700, 3000)
    assert (spec.stdout_path, spec.stderr_path, spec.cwd) == ("/tmp/out.%J.%I", "/tmp/err.%J", "/scratch/run")
    assert (spec.project, spec.depend) == ("proj/sub", "done(12)") and spec.exclusive and spec.rerunnable
    assert spec.priority == 7
    assert "OMP_NUM_THREADS" not in spec.env
    assert (spec.env["EXTRA"], spec.env["PATH"]) == ("1", "/opt/bin:/usr/bin")
    named = job([], ("#!/bin/sh\nsleep 1\n", "/home/a/run.sh"))
    assert named.name == "run.sh" and list(named.command)[-1] == "run.sh"


def test_a_script_holding_a_command_or_a_bad_option_is_refused() -> None:
    with pytest.raises(UsageError, match="options only"):
        job([], ("#BSUB -q normal sleep 1\necho\n", "job.sh"))
    with pytest.raises(UsageError, match="job.sh: #BSUB"):
        job([], ("#BSUB -foo\necho\n", "job.sh"))


def test_scheduling_options() -> None:
    _, args = parse("bsub", ["-H", "-b", "23:45", "-t", "1:2:00:30", "-E", "test -d /data", "-Ep",
                             "rm -f lock", "true"])
    now = datetime.datetime(2026, 12, 5, 23, 30)
    spec = bsub.build(args, dict(ENV), "login1", None, now)
    assert spec.hold and (spec.pre_exec, spec.post_exec) == ("test -d /data", "rm -f lock")
    assert spec.begin_time_ms == int(datetime.datetime(2026, 12, 5, 23, 45).timestamp() * 1000)
    assert spec.term_time_ms == int(datetime.datetime(2027, 1, 2, 0, 30).timestamp() * 1000)


def test_an_array_knows_its_last_index() -> None:
    spec = job(["-J", "sweep[1-100:3]%5", "./run"])
    assert spec.name == "sweep" and spec.array.limit == 5 and spec.env["LSB_JOBINDEX_END"] == "100"


@pytest.mark.parametrize("words", [
    ["-env", "all", "--", "true"],  # fine: the baseline of the refusals below
])
def test_lsf_s_multi_letter_options_are_options(words: list[str]) -> None:
    assert job(words).env["PATH"] == "/opt/bin:/usr/bin"


@pytest.mark.parametrize(("words", "said"), [
    (["-n4", "true"], "illegal option -- n4"),
    (["-R1", "true"], "illegal option -- R1"),
    (["-outdi", "/tmp", "true"], "illegal option -- outdi"),
    (["-envv", "all", "true"], "illegal option -- envv"),
    (["--queue", "normal", "true"], "illegal option -- queue"),
    (["-L", "/bin/csh", "true"], "-L: this option of LSF's is not carried out by XCE yet. Job not"),
    (["-b", "25:00", "true"], "-b '25:00': hour must be in 0..23"),
    # Years named: with times of day alone, between 09:00 and 10:00 the -t would be tomorrow's 09:00.
    (["-b", "2099:1:2:10:00", "-t", "2099:1:2:09:00", "true"],
     "-t: the termination time must come after the begin time"),
    (["-E", " ", "true"], "-E: an empty command"),
    (["-Is", "-o", "out", "bash"], "-o with an interactive job (-I, -Ip, -Is): not in XCE yet"),
    (["-outdir", "/tmp", "true"], "-outdir: this option"),
    (["-q"], "expected one argument"),
    (["-sp", "0", "true"], "-sp 0: a job priority is from 1"),
])
def test_every_misparse_is_refused_with_one_line_and_nothing_submitted(
        words: list[str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    """run() refuses before it connects: with no cluster at all, the refusal is the parser's."""
    os.environ.pop("XCE_CONTROLLERS", None)
    assert run("bsub", words) == 255
    err = capsys.readouterr().err
    assert said in err and err.startswith("bsub: ")


@pytest.mark.parametrize(("given", "expected"), [
    ("", "select[defined(xce_lsf)]"),
    ("rusage[mem=10] span[hosts=1]", "select[defined(xce_lsf)] rusage[mem=10] span[hosts=1]"),
    ("select[mem > 100 || gpu] order[r15s]", "select[defined(xce_lsf) && (mem > 100 || gpu)] order[r15s]"),
])
def test_a_job_needing_what_only_newer_workers_do_selects_them(given: str, expected: str) -> None:
    from xce.rules import resreq

    assert bsub.needing_workers_tag(given) == expected
    resreq.parse(expected)  # a requirement the cluster takes
    assert job(["-E", "true", *(["-R", given] if given else []), "true"]).resource_req == expected
    assert job(["-R", given or "rusage[mem=1]", "true"]).resource_req == (given or "rusage[mem=1]")


def test_overwritten_output_files() -> None:
    spec = job(["-oo", "out.%J", "true"])
    assert (spec.stdout_path, spec.stdout_overwrite, spec.stderr_path, spec.stderr_overwrite) == \
        ("out.%J", True, "out.%J", True)  # the errors with it, as -o
    spec = job(["-o", "out", "-eo", "err", "true"])
    assert (spec.stdout_overwrite, spec.stderr_path, spec.stderr_overwrite) == (False, "err", True)
    assert "defined(xce_lsf)" in spec.resource_req  # an older worker would append


@pytest.mark.parametrize("script", ["lsf", "slurm"])
def test_lsfs_and_slurms_commands_leave_the_well_known_types_out(monkeypatch: pytest.MonkeyPatch,
                                                                 script: str) -> None:
    """As `xce`'s client commands (cli/main.py), each script's body does before its imports' first
    message class: protobuf's well-known types are left out of the short-lived command."""
    from cli.lsf import entry as lsf_entry
    from cli.slurm import entry as slurm_entry

    said: list[str] = []

    class Left(Exception):
        pass

    def leave(code: object, failed: int) -> None:
        raise Left

    module = lsf_entry if script == "lsf" else slurm_entry
    monkeypatch.setattr(module.proto_load, "without_well_known_types", lambda: said.append("left out"))
    monkeypatch.setattr(module, "run", lambda name, words: said.append(f"ran {name}") or 0)
    monkeypatch.setattr(lsf_entry, "leave", leave)
    with pytest.raises(Left):
        module.main("bsub" if script == "lsf" else "sbatch")
    assert said == ["left out", f"ran {'bsub' if script == 'lsf' else 'sbatch'}"]
