"""The operating system as the executor sees it: start, signal, watch and find processes.

Theory of operation. The executor (executor.py) decides what to run and
when; a `ProcessHost` does it. `RealProcessHost` uses the kernel: a new
session and process group per instance (subprocess with
start_new_session), signals to the whole group, wait4 on a process it
started, and /proc for one it did not (a worker restarted while its jobs ran
on): the process start time in /proc/<pid>/stat tells a reused pid from the
job's. Its watches and timers run in threads of their own. The protocol
simulation (tests/protocol_sim) gives the executor a simulated host with the
same methods, so the executor's own logic is what the simulation checks.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

Key = tuple[int, int]
POLL_S = 0.2  # how often an adopted process is looked for in /proc


class ProcessHost(Protocol):
    def spawn(self, argv: Sequence[str], cwd: Path, env: dict[str, str], stdout: Path, stderr: Path) -> int:
        """Start argv as the leader of a new session and process group; its pid."""
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

    def spawn(self, argv: Sequence[str], cwd: Path, env: dict[str, str], stdout: Path, stderr: Path) -> int:
        with open(stdout, "ab") as out, open(stderr, "ab") as err:
            popen = subprocess.Popen(list(argv), cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                     stderr=err, start_new_session=True)
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
            if wanted <= env and b"worker.shim" in cmdline:
                return int(entry.name)
        return 0

    def call_later(self, delay_s: float, function: Callable[[], None]) -> None:
        timer = threading.Timer(delay_s, function)
        timer.daemon = True
        timer.start()

