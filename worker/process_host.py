"""The operating system as the executor sees it: accounts; start, signal, watch and find processes.

Theory of operation. The executor (executor.py) decides what to run and
when; a `ProcessHost` does it. `RealProcessHost` uses the kernel: a new
session and process group per instance (subprocess with
start_new_session), signals to the whole group, wait4 on a process it
started, and /proc for one it did not (a worker restarted while its jobs ran
on): the process start time in /proc/<pid>/stat tells a reused pid from the
job's. Accounts come from the password and group databases (`account`),
and the owner's spool directory is made and checked here (`owner_dir`). Its
watches and timers run in threads of their own. The protocol
simulation (tests/protocol_sim) gives the executor a simulated host with the
same methods, so the executor's own logic is what the simulation checks.
"""

from __future__ import annotations

import os
import pwd
import socket
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

Key = tuple[int, int]
POLL_S = 0.2  # how often an adopted process is looked for in /proc


@dataclass(frozen=True)
class Account:
    name: str
    uid: int
    gid: int
    home: str
    shell: str


class ProcessHost(Protocol):
    def spawn(self, argv: Sequence[str], env: dict[str, str], stdin: bytes, log: Path) -> int:
        """Start argv as the leader of a new session and process group, `stdin` readable on its
        standard input, its output appended to `log`; its pid."""
        ...

    def host_name(self) -> str: ...

    def account(self, user: str) -> Account | None:
        """The user's account on this host, or None if it has none."""
        ...

    def euid(self) -> int:
        """Who the worker runs as."""
        ...

    def owner_dir(self, path: Path, account: Account) -> Path:
        """`path` as a directory of the account's own (0700), made if missing; its path."""
        ...

    def watch(self, pid: int, started_here: bool, start_ticks: int | None,
              on_end: Callable[[int], None]) -> None:
        """Call on_end(signal that ended it, or 0) once the process has ended."""
        ...

    def killpg(self, pgid: int, sig: int) -> None: ...

    def start_ticks(self, pid: int) -> int | None:
        """The process's start time (clock ticks since boot), or None if it is gone."""
        ...

    def find_by_env(self, key: Key, spool: Path) -> int:
        """A shim of this (job, attempt) started just before a worker died, by its environment; 0: none."""
        ...

    def call_later(self, delay_s: float, function: Callable[[], None]) -> None: ...


class RealProcessHost:
    def __init__(self) -> None:
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        self._lock = threading.Lock()

    def spawn(self, argv: Sequence[str], env: dict[str, str], stdin: bytes, log: Path) -> int:
        # A memfd, not a pipe: the whole input is there at once, and nothing blocks on a reader.
        source = os.memfd_create("xce-job-env", os.MFD_CLOEXEC)
        try:
            os.write(source, stdin)
            os.lseek(source, 0, os.SEEK_SET)
            out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
            try:
                popen = subprocess.Popen(list(argv), cwd="/", env=env, stdin=source, stdout=out, stderr=out,
                                         start_new_session=True)
            finally:
                os.close(out)
        finally:
            os.close(source)
        with self._lock:
            self._children[popen.pid] = popen
        return popen.pid

    def watch(self, pid: int, started_here: bool, start_ticks: int | None,
              on_end: Callable[[int], None]) -> None:
        threading.Thread(target=self._watch, args=(pid, started_here, start_ticks, on_end), daemon=True,
                         name=f"watch-{pid}").start()

    def _watch(self, pid: int, started_here: bool, start_ticks: int | None,
               on_end: Callable[[int], None]) -> None:
        shim_signal = 0
        if started_here:
            _, status, _ = os.wait4(pid, 0)
            with self._lock:
                popen = self._children.pop(pid, None)
            if popen is not None:
                popen.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
            shim_signal = os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
        else:
            while start_ticks is not None and self.start_ticks(pid) == start_ticks:
                time.sleep(POLL_S)
        on_end(shim_signal)

    def killpg(self, pgid: int, sig: int) -> None:
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            pass

    def start_ticks(self, pid: int) -> int | None:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return None
        if fields[0] == "Z":
            return None
        return int(fields[19])

    def find_by_env(self, key: Key, spool: Path) -> int:
        wanted = {f"XCE_JOB_ID={key[0]}".encode(), f"XCE_JOB_ATTEMPT={key[1]}".encode(),
                  f"XCE_SPOOL={spool}".encode()}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                env = set((entry / "environ").read_bytes().split(b"\0"))
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            # (-m worker.shim: a shim started by the build before this one)
            if wanted <= env and (b"worker/shim.py" in cmdline or b"worker.shim" in cmdline):
                return int(entry.name)
        return 0

    def host_name(self) -> str:
        return socket.gethostname()

    def account(self, user: str) -> Account | None:
        try:
            entry = pwd.getpwnam(user)
        except KeyError:
            return None
        return Account(entry.pw_name, entry.pw_uid, entry.pw_gid, entry.pw_dir or "/",
                       entry.pw_shell or "/bin/sh")

    def euid(self) -> int:
        return os.geteuid()

    def owner_dir(self, path: Path, account: Account) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o711)
        os.chmod(path.parent, 0o711)  # whatever the umask: owners pass through to their own
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        info = os.lstat(path)  # the parent is the worker's: nobody else can have put a link here
        if not stat.S_ISDIR(info.st_mode):
            raise OSError(f"{path} is not a directory")
        if (info.st_uid, info.st_gid) != (account.uid, account.gid) and os.geteuid() == 0:
            os.chown(path, account.uid, account.gid, follow_symlinks=False)
        os.chmod(path, 0o700)  # a directory, checked above, in a directory only the worker writes
        return path

    def call_later(self, delay_s: float, function: Callable[[], None]) -> None:
        timer = threading.Timer(delay_s, function)
        timer.daemon = True
        timer.start()

