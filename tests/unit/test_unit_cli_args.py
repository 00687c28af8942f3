"""The command line's arguments: every command and option says what it is, and a bad one is a one-line
error with exit status 2, never a traceback."""

from __future__ import annotations

import argparse

import pytest

from cli import cluster_queries, job_spec
from cli import main as cli
from cli.parser import UsageError


def _undocumented(parser: argparse.ArgumentParser, path: str) -> list[str]:
    missing = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, sub in action.choices.items():
                if not helps.get(name):
                    missing.append(f"{path} {name}")
                missing += _undocumented(sub, f"{path} {name}")
        elif not isinstance(action, argparse._HelpAction) and not action.help:
            missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")
    return missing


def test_every_command_and_option_has_a_help_line() -> None:
    assert _undocumented(cli.build_parser(), "xce") == []
    text = cli.build_parser()._subparsers._group_actions[0].choices["submit"].format_help()  # type: ignore[union-attr]
    for option, words in (("-R", "resource requirement"), ("-n", "slots"), ("-q", "queue")):
        assert option in text and words in text


@pytest.mark.parametrize("argv", [["submit", "--priority", "99999999999", "--", "true"], ["frob"], ["kill"],
                                  ["submit", "-n", "many", "--", "true"],
                                  ["modify", "1", "--priority", "1e3"]])
def test_bad_arguments_are_one_line_and_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err


@pytest.mark.parametrize(("argv", "refused"), [
    (["submit", "-env", "all", "--", "true"], "unknown option -env"),  # was -e nv, the command `all -- true`
    (["submit", "-outdir", "/tmp", "true"], "unknown option -outdir"),  # was -o utdir, the command /tmp
    (["submit", "-R1", "true"], "unknown option -R1"),  # was the requirement "1"
    (["submit", "-n4", "true"], "unknown option -n4"),
    (["submit", "--req", "x", "true"], "unknown option --req"),  # was --request-id x
    (["--clus", "c.toml", "jobs"], "invalid choice: 'c.toml'"),  # --clus is no option: c.toml no command
    (["jobs", "--sta", "PEND"], "unknown option --sta"),
    (["jobs", "extra"], "unexpected argument 'extra'"),
])
def test_an_option_is_taken_only_as_written(argv: list[str], refused: str, capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """No abbreviation, no value run into a short option: LSF's single-dash words became wrong jobs.
    Refused with one line naming the word, before any request (no cluster to reach here)."""
    monkeypatch.setenv("XCE_CONTROLLERS", "127.0.0.1:1")
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert refused in err and len(err.strip().splitlines()) == 1, err


def test_a_file_of_jobs_is_as_strict_as_the_command_line() -> None:
    import io

    args = cli.build_parser("submit").parse_args(["submit", "--file", "jobs.txt"])
    assert job_spec.specs_from_file(args, io.StringIO("-n 2 true\n"))[0].slots == 2
    for line in ("-R1 true", "-env all true", "--req=1 true"):
        with pytest.raises(UsageError, match=f"jobs.txt line 1: unknown option {line.split()[0]}"):
            job_spec.specs_from_file(args, io.StringIO(line + "\n"))


@pytest.mark.parametrize("argv", [
    ["submit", "-q", "idle", "-J", "a[1-9]%2", "--", "true", "-x"],
    ["--cluster", "c.toml", "jobs", "--state", "PEND", "-A"],
    ["--controllers=a:1,b:2", "kill", "17[1-5]", "--json"],
    ["--cluster", "c.toml", "--controllers", "a:1", "queue", "update", "q", "--closed"],
    ["history", "--since", "2026-11-30T14:00", "-n", "5"],
    ["member", "list"],
    ["token", "create", "--user", "u"],
])
def test_the_parser_of_one_command_parses_its_line_as_the_full_parser_does(argv: list[str]) -> None:
    word = cli.command_word(argv)
    assert word is not None and word in argv
    lean = cli.build_parser(word)
    assert set(lean._subparsers._group_actions[0].choices) == {word}  # type: ignore[union-attr]
    assert vars(lean.parse_args(argv)) == vars(cli.build_parser().parse_args(argv))


@pytest.mark.parametrize("argv", [["-h"], ["--clus", "c.toml", "jobs"], [], ["--cluster", "c.toml"]])
def test_a_line_naming_no_command_plainly_gets_the_full_parser(argv: list[str]) -> None:
    assert cli.command_word(argv) is None


def test_an_unknown_command_is_told_the_commands_there_are(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["frobnicate", "1"])
    err = capsys.readouterr().err
    assert "invalid choice: 'frobnicate'" in err and "'submit'" in err and "'jobs'" in err


class _Exited(Exception):
    def __init__(self, code: int) -> None:
        self.code = code


@pytest.mark.parametrize(("outcome", "code", "stderr"), [
    (0, 0, ""), (3, 3, ""), (SystemExit(None), 0, ""), (SystemExit(2), 2, ""),
    (SystemExit("xce: no cluster"), 1, "xce: no cluster")])
def test_a_client_command_ends_as_the_interpreter_would_but_without_its_teardown(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], outcome: object, code: int,
        stderr: str) -> None:
    def main() -> object:
        print("answer")
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def exit_now(status: int) -> None:
        raise _Exited(status)

    left_out: list[bool] = []  # (not in this test process itself: it may use the well-known types)
    monkeypatch.setattr(cli, "main", main)
    monkeypatch.setattr(cli.os, "_exit", exit_now)
    monkeypatch.setattr(cli.proto_load, "without_well_known_types", lambda: left_out.append(True))
    monkeypatch.setattr(cli.sys, "argv", ["xce", "--cluster", "c.toml", "jobs"])
    with pytest.raises(_Exited) as exited:
        cli.entry()
    assert exited.value.code == code
    assert left_out == [True]  # a client command leaves protobuf's well-known types out
    out, err = capsys.readouterr()
    assert out == "answer\n" and err.strip() == stderr


def test_daemons_and_file_writers_exit_through_the_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "main", lambda: 0)
    monkeypatch.setattr(cli.os, "_exit", lambda status: pytest.fail("os._exit for a daemon"))
    monkeypatch.setattr(cli.proto_load, "without_well_known_types",
                        lambda: pytest.fail("a daemon left protobuf's well-known types out"))
    for argv in (["controller", "--config", "x"], ["worker"], ["cluster", "up"], ["snapshot", "save"],
                 ["-h"]):
        monkeypatch.setattr(cli.sys, "argv", ["xce", *argv])
        with pytest.raises(SystemExit) as exit_:
            cli.entry()
        assert exit_.value.code == 0


def test_output_that_cannot_be_written_exits_120_as_the_interpreter_does(
        monkeypatch: pytest.MonkeyPatch) -> None:
    class Full:
        def write(self, text: str) -> int:
            return len(text)

        def flush(self) -> None:
            raise OSError(28, "No space left on device")

    def exit_now(status: int) -> None:
        raise _Exited(status)

    monkeypatch.setattr(cli, "main", lambda: 0)
    monkeypatch.setattr(cli.os, "_exit", exit_now)
    monkeypatch.setattr(cli.proto_load, "without_well_known_types", lambda: None)
    monkeypatch.setattr(cli.sys, "argv", ["xce", "jobs"])
    monkeypatch.setattr(cli.sys, "stdout", Full())
    with pytest.raises(_Exited) as exited:
        cli.entry()
    assert exited.value.code == 120


def test_hosts_long_shows_what_a_requirement_can_ask_of_each_host(capsys: pytest.CaptureFixture[str]) -> None:
    from xce.v1 import api_pb2 as api

    spec = api.HostSpec(name="gpu1", slots=8, memory_mb=64000, resources={"gpu": 2, "license_x": 1.5},
                        tags=["x86", "evil\x1b[31m"])
    busy = api.Host(spec=spec, status=api.HOST_OK, generation=3, slots_used=2, running_jobs=1)
    response = api.ListHostsResponse(hosts=[busy, api.Host(spec=api.HostSpec(name="n2"))])
    cluster_queries._host_details(response)
    out = capsys.readouterr().out
    assert "HOST gpu1" in out and "slots      8 (used 2, jobs running 1)" in out
    assert "maxmem     64000 MB" in out and "resources  gpu=2 license_x=1.5" in out
    assert "\x1b" not in out and "x86" in out  # a tag's control characters are shown escaped
    assert "HOST n2" in out and "resources  -" in out


@pytest.mark.parametrize(("text", "seconds"), [("90", 5400), ("1:30", 5400), ("0:05", 300), ("2", 120)])
def test_run_limits_are_lsf_s_hour_minute(text: str, seconds: int) -> None:
    assert job_spec.minutes(text) == seconds
    args = cli.build_parser().parse_args(["submit", "-W", text, "-We", "1", "--", "x"])
    spec = job_spec.spec_from(args, ["x"])
    assert (spec.run_limit_s, spec.estimate_s) == (seconds, 60)


@pytest.mark.parametrize("text", ["0", "1:60", "-5", "an hour", "99999999"])
def test_a_bad_run_limit_is_one_line_and_exit_2(text: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["submit", "-W", text, "--", "true"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "[hour:]minute" in err and len(err.strip().splitlines()) == 1, err
