"""Interactive jobs (cli/lsf/interactive.py, worker/shim.py): `bsub -I` relays stdin and output and
returns the job's exit code; `bsub -Is bash` on a real pseudo-terminal: commands typed and their
output, the window size, Ctrl-C reaching the job's foreground command, the session going on through a
leader's failover, and `exit 3` returning 3."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import re
import select
import shutil
import signal
import struct
import subprocess
import tempfile
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import FAST_HOSTS, wait_until
from lsf_site import serving

from ops.local_cluster import LocalCluster
from xce import lsf_bin
from xce.v1 import api_pb2 as api

pytestmark = pytest.mark.cluster


@pytest.fixture
def site(make_cluster, tmp_path: Path) -> Iterator[tuple[LocalCluster, dict[str, str]]]:  # type: ignore[no-untyped-def]
    cluster = make_cluster(extra_config=FAST_HOSTS)
    with serving(cluster, [("w1", 4)]):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("XCE_", "LSB_"))}
        env.update(XCE_DATA=str(cluster.data), PATH=f"{lsf_bin.ensure()}:{env['PATH']}", HOME=str(tmp_path),
                   PS1="XCE$ ", TERM="dumb")
        yield cluster, env


def test_bsub_i_relays_stdin_and_output_and_returns_the_exit_code(site: tuple[LocalCluster, dict[str, str]],
                                                                 tmp_path: Path) -> None:
    _, env = site
    done = subprocess.run(["bsub", "-I", "tr a-z A-Z; echo to-stderr >&2; exit 5"], input="hello there\n",
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert done.returncode == 5, done.stderr
    lines = done.stdout.splitlines()
    assert re.fullmatch(r"Job <\d+> is submitted to default queue <normal>\.", lines[0])
    assert sorted(lines[1:]) == ["HELLO THERE", "to-stderr"]
    assert "<<Waiting for dispatch ...>>" in done.stderr and "<<Starting on w1>>" in done.stderr
    # Output at once, stdin unread: what came with the job's proof of its key is not dropped.
    for _ in range(5):
        early = subprocess.run(["bsub", "-I", "echo early"], input="", capture_output=True, text=True,
                               env=env, cwd=tmp_path, timeout=120)
        assert (early.returncode, early.stdout.splitlines()[1:]) == (0, ["early"]), early


def running(argv: list[str]) -> bool:
    """Whether a process of this command line runs on this host."""
    wanted = "\0".join(argv).encode() + b"\0"
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and (proc / "cmdline").read_bytes() == wanted:
                return True
        except OSError:
            continue
    return False


class Terminal:
    """`bsub -Is bash` on a pseudo-terminal of this test's, read and typed into as a person would."""

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: bsub on the terminal
            os.chdir(cwd)
            os.execvpe("bsub", ["bsub", "-Is", "bash", "--norc", "--noprofile", "-i"], env)
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
        self.seen = ""

    def type(self, keys: str) -> None:
        os.write(self.fd, keys.encode())

    def expect(self, pattern: str, timeout_s: float = 60) -> str:
        deadline = time.monotonic() + timeout_s
        while not re.search(pattern, self.seen):
            left = deadline - time.monotonic()
            assert left > 0, f"never saw {pattern!r}; the terminal showed:\n{self.seen[-2000:]}"
            readable, _, _ = select.select([self.fd], [], [], min(left, 1.0))
            if readable:
                try:
                    self.seen += os.read(self.fd, 4096).decode(errors="replace")
                except OSError:  # bsub ended: its side of the terminal closed
                    assert re.search(pattern, self.seen), self.seen[-2000:]
        found = re.search(pattern, self.seen)
        assert found is not None
        self.seen = self.seen[found.end():]
        return found.group(0)

    def close(self) -> None:
        """bsub killed if it still runs, the terminal closed (a failed test leaves nothing behind)."""
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.close(self.fd)

    def exit_status(self, timeout_s: float = 60) -> int:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return os.waitstatus_to_exitcode(status)
            readable, _, _ = select.select([self.fd], [], [], 0.2)
            if readable:
                try:
                    self.seen += os.read(self.fd, 4096).decode(errors="replace")
                except OSError:
                    pass
        os.kill(self.pid, signal.SIGKILL)
        raise AssertionError(f"bsub did not end; the terminal showed:\n{self.seen[-2000:]}")


def test_bsub_is_bash_through_a_leader_failover(site: tuple[LocalCluster, dict[str, str]],
                                                tmp_path: Path) -> None:
    cluster, env = site
    term = Terminal(env, tmp_path)
    try:
        term.expect(r"XCE\$ ")
        term.type("echo $((6*7)) $LSB_JOBID\r")
        term.expect(r"\r\n42 \d+\r\n")
        # The size is marked (size=), never its echo (size=$(...)): bash redraws its line on a
        # SIGWINCH, and the output may then follow the typed keys without a line break.
        term.type("echo size=$(stty size)\r")
        term.expect(r"size=30 100\r\n")  # the submitter's window
        fcntl.ioctl(term.fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))  # and as it changes
        deadline = time.monotonic() + 60  # (bsub may read keys typed at once before its SIGWINCH)
        while True:
            term.type("echo size=$(stty size)\r")
            if term.expect(r"size=\d+ \d+\r\n") == "size=40 120\r\n":
                break
            assert time.monotonic() < deadline, "the new window size never reached the job"
        term.type("sleep 300.4242\r")
        wait_until(lambda: running(["sleep", "300.4242"]), "the sleep runs")  # what Ctrl-C must stop
        term.type("\x03")  # Ctrl-C: the job's terminal sends SIGINT to its foreground command
        term.expect(r"XCE\$ ")
        term.type("echo status=$?\r")
        term.expect(r"status=130")  # sleep died of SIGINT; bash lives
        old = cluster.leader()
        cluster.kill(old)
        wait_until(lambda: cluster.leader() != old, "a new leader")
        term.type("echo after-failover\r")
        term.expect(r"\r\nafter-failover\r\n")
        term.type("exit 3\r")
        assert term.exit_status() == 3
    finally:
        term.close()


def test_a_session_whose_submitter_vanished_ends_and_leaves_nothing_running(
        site: tuple[LocalCluster, dict[str, str]], tmp_path: Path) -> None:
    """The submitter killed while a shell's job runs in the foreground: a hangup, as a dropped terminal's,
    ends the shell and its job (in groups of their own, which the worker's signals would miss)."""
    cluster, env = site
    term = Terminal(env, tmp_path)
    try:
        term.expect(r"XCE\$ ")
        term.type("sleep 300.5151\r")
        wait_until(lambda: running(["sleep", "300.5151"]), "the sleep runs")
        os.kill(term.pid, signal.SIGKILL)
        os.waitpid(term.pid, 0)
        with cluster.client() as client:
            job = wait_until(lambda: [j for j in client.list_jobs() if j.spec.name.startswith("bash")
                                      and j.state in (api.DONE, api.EXIT)], "the session's job ended")
        assert job[0].state == api.EXIT
        wait_until(lambda: not running(["sleep", "300.5151"]), "its foreground job ended too")
    finally:
        term.close()


def test_a_listener_that_is_not_the_submitter_gets_nothing_and_the_job_ends(
        site: tuple[LocalCluster, dict[str, str]]) -> None:
    """The submitter gone and its port taken by another user: the job proves nothing to it, gets no
    proof from it, and ends (INTERACTIVE_LOST) without running a thing."""
    import socket

    cluster, _ = site
    impostor = socket.create_server(("127.0.0.1", 0))
    port = impostor.getsockname()[1]
    with cluster.client() as client:
        spec = api.JobSpec(command=["touch", "/tmp/xce-never-made"], cwd="/tmp", env={
            "XCE_INTERACTIVE": f"127.0.0.1:{port}", "XCE_INTERACTIVE_KEY": "f" * 32})
        job_id = client.submit([spec]).jobs[0].id
        impostor.settimeout(60)
        conn, _ = impostor.accept()
        conn.settimeout(60)
        hello = conn.recv(4096)
        assert hello.startswith(b"XCE-INTERACTIVE ") and b"f" * 32 not in hello  # a nonce, never the key
        conn.sendall(b"0" * 64 + b" " + b"1" * 32 + b"\n")  # a proof it cannot make
        assert conn.recv(4096) == b""  # the job hung up: nothing more
        conn.close()
        ended = wait_until(lambda: (j := client.get_job(job_id)).state in (api.DONE, api.EXIT) and j,
                           "its end")
        assert (ended.state, ended.exit_reason) == (api.EXIT, "INTERACTIVE_LOST")
        assert "not the job's submitter" in ended.start_error
    assert not Path("/tmp/xce-never-made").exists()
    impostor.close()


def test_an_unprivileged_owner_s_interactive_job_and_a_submitter_that_hangs_up_before_dispatch(
        reachable_by_nobody: None) -> None:
    """As uid nobody: its job runs as nobody (the shim's child loaded what it needs before it
    became the owner); and a bsub hung up while its job waits takes the job with it."""
    from conftest import NOBODY, nobody_cli_env

    # The workers' spools hold owners' default output: the cluster lives where others may pass (0711).
    home = Path(tempfile.mkdtemp(prefix="xce-int-", dir="/tmp"))
    home.chmod(0o711)
    shared = home / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    cluster = LocalCluster(home / "cluster", extra_config=FAST_HOSTS)
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(shutil.rmtree, home, ignore_errors=True)  # after the cluster stopped
        cleanup.enter_context(serving(cluster, [("w1", 2)]))
        env = nobody_cli_env(cluster, shared) | {"XCE_TOKEN": cluster.new_token("nobody", "user")}
        env["PATH"] = f"{lsf_bin.ensure()}:{env['PATH']}"
        as_nobody = ["setpriv", f"--reuid={NOBODY.pw_uid}", f"--regid={NOBODY.pw_gid}", "--clear-groups"]
        done = subprocess.run([*as_nobody, "bsub", "-I", "id -un; cat"], input="typed\n", capture_output=True,
                              text=True, env=env, cwd=shared, timeout=120)
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[1:] == ["nobody", "typed"]
        waiting = subprocess.Popen([*as_nobody, "bsub", "-I", "-b", "1:1:00:00", "true"],
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, env=env, cwd=shared)
        try:
            line = waiting.stdout.readline()  # type: ignore[union-attr]
            job_id = int(line.split("<", 1)[1].split(">", 1)[0])
            waiting.send_signal(signal.SIGHUP)
            assert waiting.wait(timeout=60) == 130
        finally:
            waiting.kill()
            waiting.stdout.close()  # type: ignore[union-attr]
            waiting.stderr.close()  # type: ignore[union-attr]
        with cluster.client() as client:
            assert wait_until(lambda: client.get_job(job_id).state == api.EXIT, "the job killed")
