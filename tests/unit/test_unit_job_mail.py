"""Job mail (worker/mail.py, xce/mail_address.py, bsub -B -N -u): an address is nothing sendmail could
read as an option, checked at submit and again by the worker; a job's name cannot add a header; the
start message and LSF's job report say what happened; the worker's file names the sendmail."""

from __future__ import annotations

from pathlib import Path

import pytest

from worker import config as worker_config
from worker import mail
from xce import mail_address
from xce.v1 import api_pb2 as api


@pytest.mark.parametrize("address, ok", [
    ("alice", True), ("alice@example.org", True), ("a.b+c_d=e%f-g@mail-1.example", True),
    ("-oQ/tmp/x", False), ("alice@", False), ("@example.org", False), ("alice bob", False),
    ("alice\nBcc: eve", False), ("al ice@x", False), ("alice@ex ample", False), ("", False),
    ("a" * 300, False),
])
def test_an_address_is_a_user_or_user_at_domain(address: str, ok: bool) -> None:
    assert mail_address.valid(address) is ok


def job(name: str = "", **spec: object) -> api.Job:
    return api.Job(id=17, submit_time_ms=1_700_000_000_000, spec=api.JobSpec(
        command=["sh", "-c", "exit 3"], name=name, user="alice", queue="normal", **spec))  # type: ignore[arg-type]


def test_a_name_cannot_add_a_header_and_the_report_says_how_it_ended() -> None:
    hostile = job("x\nBcc: eve@evil\r\nX: y", mail_user="bob@example.org")
    text = mail.start_message(hostile, "w1", 1_700_000_001_000).decode()
    headers = text.split("\n\n", 1)[0].splitlines()
    assert headers[:2] == ["To: bob@example.org", "Subject: Job 17: <x Bcc: eve@evil  X: y> started on <w1>"]
    assert not any(line.startswith("Bcc") for line in headers)
    ended = api.JobReport(job_id=17, finished=api.JobFinished(exit_code=3, time_ms=1_700_000_009_000,
                                                              usage=api.Usage(wall_s=8, max_rss_kb=4096)))
    report = mail.end_message(job(), "w1", ended, 1_700_000_001_000).decode()
    assert "Subject: Job 17: <sh -c exit 3> Exited" in report
    assert "Job was executed on host(s) <w1>, in queue <normal>, as user <alice>." in report
    assert "Exited with exit code 3." in report and "Max Memory :" in report and "4 MB" in report
    assert "# LSBATCH: User input\nsh -c 'exit 3'\n" in report
    line = api.Job(spec=api.JobSpec(command=["/bin/sh", "-c", "make all"], user="a"))
    assert "# LSBATCH: User input\nmake all\n" in mail.end_message(line, "w1", api.JobReport(), 0).decode()
    done = api.JobReport(job_id=17, finished=api.JobFinished(exit_code=0))
    assert "Successfully completed." in mail.end_message(job(), "w1", done, 0).decode()
    assert "Subject: Job 17: <sh -c exit 3> Done" in mail.end_message(job(), "w1", done, 0).decode()


def test_the_worker_never_mails_an_address_it_may_not_pass() -> None:
    assert mail.recipient(job()) == "alice"
    assert mail.recipient(job(mail_user="-oQ/tmp")) == ""  # (refused at submit from format 24; not here)


def test_the_worker_s_file_names_the_sendmail(tmp_path: Path) -> None:
    base = {"controllers": ["127.0.0.1:1"], "name": "w1", "slots": 1, "memory_mb": 1, "insecure": True}
    assert worker_config.parse(base, tmp_path / "w.toml").mail_command == ("/usr/sbin/sendmail", "-oi")
    chosen = worker_config.parse({**base, "mail_command": ["/usr/sbin/sendmail", "-oi", "-odi"]},
                                 tmp_path / "w.toml")
    assert chosen.mail_command == ("/usr/sbin/sendmail", "-oi", "-odi")
    for bad in ([], "sendmail", ["sendmail"], [""]):
        with pytest.raises(worker_config.WorkerConfigError, match="mail_command"):
            worker_config.parse({**base, "mail_command": bad}, tmp_path / "w.toml")


def test_send_runs_the_command_with_the_address_last_and_the_message_on_stdin(tmp_path: Path) -> None:
    out = tmp_path / "sent"
    script = tmp_path / "fake-sendmail"
    script.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {out}.args\ncat > {out}\n')
    script.chmod(0o755)
    mail.send([str(script), "-oi"], "bob", b"Subject: s\n\nbody\n").join(10)
    assert Path(f"{out}.args").read_text() == "-oi\nbob\n"
    assert out.read_bytes() == b"Subject: s\n\nbody\n"
