"""The operating system as the executor sees it: accounts; start, signal, watch and find processes.

Theory of operation. The executor (executor.py) decides what to run and
when; a `ProcessHost` does it. `RealProcessHost` uses the kernel: a new
session and process group per instance, signals to the whole group, the
shim's wait status for a process it started, and /proc for one it did not
(a worker restarted while its jobs ran on): the process start time in
/proc/<pid>/stat tells a reused pid from the job's. Shims are forked by one
server of shims (`ShimServer`, worker/shim.py --serve), started with the
first job and again whenever it is gone, which says how each of its shims
ended; a shim whose server died meanwhile is watched through /proc, as an
adopted one. Anything else `spawn` is asked to run starts as a process of
its own (subprocess with start_new_session), waited for with wait4.
Accounts come from the password and group databases (`account`), and the
owner's spool directory is made and checked here (`owner_dir`). Its
watches and timers run in threads of their own. The protocol
simulation (tests/protocol_sim) gives the executor a simulated host with the
same methods, so the executor's own logic is what the simulation checks.
"""

from __future__ import annotations

import os
import pwd
import select
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from worker import output_reader
from worker.shim import pid_path

Key = tuple[int, int]
POLL_S = 0.2  # how often an adopted process is looked for in /proc
SHIM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"  # the shims' own environment (never the job's)
SHIM = str(Path(__file__).resolve().parent / "shim.py")
OUTPUT_READ_S = 10.0  # a read on a hung file system is given up (the relay's own wait is 10 s)


def _shim_arguments(argv: Sequence[str]) -> tuple[str, list[str]] | None:
    """(the shim's file, its arguments) if argv runs worker/shim.py as executor.py does; else None."""
    if len(argv) > 4 and list(argv[1:3]) == ["-I", "-S"] and argv[3].endswith("shim.py") \
            and argv[4] != "--serve":
        return argv[3], list(argv[4:])
    return None


def start_ticks(pid: int) -> int | None:
    """The process's start time (clock ticks since boot), or None if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] == "Z":
        return None
    return int(fields[19])


_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


def sessions_usage() -> dict[int, tuple[int, float]]:
    """Every session's processes summed, by session id: (RSS in KB, CPU seconds so far); one read
    of /proc for all (a job's shim leads its session, so its pid is the job's session id)."""
    found: dict[int, tuple[int, float]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        session = int(fields[3])
        rss, cpu = found.get(session, (0, 0.0))
        ticks = sum(int(fields[i]) for i in (11, 12, 13, 14))  # its own and its waited-for children's
        found[session] = (rss + int(fields[21]) * _PAGE_KB, cpu + ticks / _TICKS)
    return found


def _pid_line(path: str) -> tuple[int, int] | None:
    """(pid, start ticks): the line a served shim's pid file begins with, and then its status file
    (shim.write_status); None if there is none."""
    try:
        with open(path) as f:
            pid, ticks = map(int, f.readline().split())
    except (OSError, ValueError):
        return None
    return pid, ticks


def _served_shim(status_path: str) -> int:
    """The pid a served shim wrote beside `status_path`, if that process still runs; else 0."""
    found = _pid_line(pid_path(status_path))
    return found[0] if found is not None and start_ticks(found[0]) == found[1] else 0


def _ended_served_shim(status_path: str) -> int:
    """The pid of the served shim that wrote `status_path` and ended, unless that pid names another
    process by now; else 0."""
    found = _pid_line(status_path)
    return found[0] if found is not None and start_ticks(found[0]) in (None, found[1]) else 0


def _wait_for_served_shim(status_path: str, timeout_s: float = 2.0) -> int:
    """_served_shim, given the time a just-forked shim takes to write its pid file; or the pid of one
    that ended already (a short job's shim renames its pid file to the status file as it ends)."""
    deadline = time.monotonic() + timeout_s
    while not (pid := _served_shim(status_path) or _ended_served_shim(status_path)) \
            and time.monotonic() < deadline:
        time.sleep(0.02)
    return pid


def group_stopped(pgid: int) -> bool:
    """Every process of the group stopped (T, or t when traced), or none left: one pass over /proc."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):  # gone meanwhile
            continue
        if int(fields[2]) == pgid and fields[0] not in ("T", "t", "Z", "X"):
            return False
    return True


def _signal_of(status: int) -> int:
    return os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0


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

    def read_output(self, account: Account, path: str, tail: int, log: Path) -> tuple[bytes, int]:
        """(the last `tail` bytes, the size) of a job's output file, read as `account` through no
        symbolic link (worker/output_reader.py); OutputUnreadable says why not. `log`: the shims'
        log, should a server of shims be started for it."""
        ...

    def owner_dir(self, path: Path, account: Account) -> Path:
        """`path` as a directory of the account's own (0700), made if missing; its path."""
        ...

    def watch(self, pid: int, started_here: bool, start_ticks: int | None,
              on_end: Callable[[int], None]) -> None:
        """Call on_end(signal that ended it, or 0) once the process has ended."""
        ...

    def killpg(self, pgid: int, sig: int) -> None: ...

    def group_stopped(self, pgid: int) -> bool:
        """Whether every process of the group is stopped (T in /proc), or none is left."""
        ...

    def start_ticks(self, pid: int) -> int | None:
        """The process's start time (clock ticks since boot), or None if it is gone."""
        ...

    def find_by_env(self, key: Key, spool: Path) -> int:
        """A shim of this (job, attempt) started just before a worker died, by its environment; 0: none."""
        ...

    def call_later(self, delay_s: float, function: Callable[[], None]) -> None: ...

    def find_served(self, status_file: Path) -> int:
        """The served shim that writes `status_file` (its pid file beside it), if it still runs; 0: none."""
        ...

    def sessions_usage(self) -> dict[int, tuple[int, float]]:
        """(RSS in KB, CPU seconds so far) of every session's processes, by session id."""
        ...

    def close(self) -> None:
        """Nothing more is started (running instances go on)."""
        ...


class ShimServer:
    """The worker's end of worker/shim.py --serve: `spawn` asks it for a shim (its pid back);
    from a reader thread, `started(pid)` hears of each new shim before `ended(pid, wait status)`
    of its end, and `lost(pids)` once, with the shims whose ends it can no longer tell, if the
    server dies."""

    def __init__(self, shim: str, log: Path, started: Callable[[int], None],
                 ended: Callable[[int, int], None], lost: Callable[[set[int]], None]) -> None:
        self._started, self._ended, self._lost = started, ended, lost
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-I", "-S", shim, "--serve", str(theirs.fileno())], cwd="/",
                env={"PATH": SHIM_PATH}, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                start_new_session=True, pass_fds=(theirs.fileno(),))
        finally:
            os.close(out)
            theirs.close()
        self._sock = ours
        self._replies: list[bytes] = []
        self._reply = threading.Condition()
        self._spawn_lock = threading.Lock()
        self._shims: set[int] = set()  # started and not known ended
        self.alive = True
        threading.Thread(target=self._read, daemon=True, name="shim-server").start()

    def spawn(self, argv: Sequence[str], stdin_fd: int, log_fd: int) -> int:
        """The pid of a new shim with these arguments; OSError if the server could not start one
        (BrokenPipeError: it was gone before it read the request, so nothing started)."""
        if any("\0" in arg for arg in argv):
            raise ValueError("a NUL character in the shim's arguments")  # as Popen refuses it
        # The arguments in a memfd: a command line may be larger than one socket message.
        args = os.memfd_create("xce-shim-args", os.MFD_CLOEXEC)
        try:
            os.write(args, "\0".join(argv).encode(errors="surrogateescape"))
            os.lseek(args, 0, os.SEEK_SET)
            with self._spawn_lock:
                socket.send_fds(self._sock, [b"R"], [stdin_fd, log_fd, args])
                with self._reply:
                    while not self._replies and self.alive:
                        self._reply.wait(1.0)
                    if not self._replies:
                        raise OSError("the server of shims is gone")
                    reply = self._replies.pop(0).decode(errors="replace")
        finally:
            os.close(args)
        if not reply.startswith("S "):
            raise OSError(reply[2:] or "the server of shims refused")
        return int(reply[2:])

    def _read(self) -> None:
        try:
            while True:
                try:
                    message = self._sock.recv(1024)
                except OSError:
                    message = b""
                if not message:
                    break
                if message.startswith(b"E "):
                    _, pid, status = message.split()
                    with self._reply:
                        self._shims.discard(int(pid))
                    self._ended(int(pid), int(status))
                else:
                    with self._reply:
                        if message.startswith(b"S "):  # here, with the reply: a death next sees it
                            self._shims.add(int(message[2:]))
                            self._started(int(message[2:]))  # before its end, which comes after
                        self._replies.append(message)
                        self._reply.notify_all()
        finally:  # whatever stopped the reader, spawns must not wait for it
            with self._reply:
                self.alive = False
                orphans, self._shims = self._shims, set()
                self._reply.notify_all()
            self._sock.close()
            self.process.wait()
            self._lost(orphans)

    def read_output(self, fields: Sequence[str], timeout_s: float) -> bytes:
        """What a reader forked by the server answered on a pipe of its own (shim.py: `O`), or b""
        if it closed without a word or took longer than `timeout_s`."""
        args = os.memfd_create("xce-read-args", os.MFD_CLOEXEC)
        read_end, write_end = os.pipe2(os.O_CLOEXEC)
        try:
            os.write(args, "\0".join(fields).encode(errors="surrogateescape"))
            os.lseek(args, 0, os.SEEK_SET)
            try:
                socket.send_fds(self._sock, [b"O"], [args, write_end])
            except OSError:
                return b""
        finally:
            os.close(args)
            os.close(write_end)
        chunks: list[bytes] = []
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([read_end], [], [], left)[0]:
                    return b""
                chunk = os.read(read_end, 1 << 20)
                if not chunk:
                    return b"".join(chunks)
                chunks.append(chunk)
        finally:
            os.close(read_end)

    def close(self) -> None:
        """The server exits (its shims go on); its end is still heard by the reader."""
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class RealProcessHost:
    def __init__(self) -> None:
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        self._lock = threading.Lock()
        self._server: ShimServer | None = None
        self._waiting: dict[int, Callable[[int], None]] = {}  # shims of a server, by pid
        self._ends: dict[int, int] = {}  # wait status of a shim that ended before it was watched
        self._orphans: set[int] = set()  # shims of a server that died: watched through /proc
        self._closed = False

    def spawn(self, argv: Sequence[str], env: dict[str, str], stdin: bytes, log: Path) -> int:
        # A memfd, not a pipe: the whole input is there at once, and nothing blocks on a reader.
        source = os.memfd_create("xce-job-env", os.MFD_CLOEXEC)
        try:
            os.write(source, stdin)
            os.lseek(source, 0, os.SEEK_SET)
            out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
            try:
                shim = _shim_arguments(argv)
                if shim is not None:
                    return self._served(shim[0], shim[1], log, source, out)
                popen = subprocess.Popen(list(argv), cwd="/", env=env, stdin=source, stdout=out, stderr=out,
                                         start_new_session=True)
            finally:
                os.close(out)
        finally:
            os.close(source)
        with self._lock:
            self._children[popen.pid] = popen
        return popen.pid

    def _served(self, shim: str, args: list[str], log: Path, stdin_fd: int, log_fd: int) -> int:
        for attempt in (1, 2):
            server = self._shim_server(shim, log)
            try:
                pid = server.spawn(args, stdin_fd, log_fd)
            except BrokenPipeError:  # the server died before it read the request: nothing started
                if attempt == 2:
                    raise
                continue
            except OSError:
                # It died while answering: it may have forked the shim, which writes its pid file
                # at once. Never report a start failure for a job that runs (it would run twice).
                found = _wait_for_served_shim(args[0])
                if not found:
                    raise
                with self._lock:
                    self._orphans.add(found)
                return found
            return pid
        raise AssertionError("unreachable")

    def _shim_server(self, shim: str, log: Path) -> ShimServer:
        with self._lock:
            if self._server is None or not self._server.alive:
                self._server = ShimServer(shim, log, self._shim_started, self._shim_ended, self._shims_lost)
            return self._server

    def _shim_started(self, pid: int) -> None:
        with self._lock:  # a new shim: whatever was kept under its pid was another process's
            self._ends.pop(pid, None)
            self._orphans.discard(pid)

    def _shim_ended(self, pid: int, status: int) -> None:
        with self._lock:
            on_end = self._waiting.pop(pid, None)
            if on_end is None:
                self._ends[pid] = status
        if on_end is not None:
            threading.Thread(target=on_end, args=(_signal_of(status),), daemon=True,
                             name=f"end-{pid}").start()

    def _shims_lost(self, pids: set[int]) -> None:
        with self._lock:
            self._orphans |= pids
            lost = [(pid, self._waiting.pop(pid)) for pid in pids if pid in self._waiting]
            if self._closed:
                return  # the worker is stopping: the next one adopts them
        for pid, on_end in lost:
            self.watch(pid, False, self.start_ticks(pid), on_end)

    def close(self) -> None:
        with self._lock:
            server, self._closed = self._server, True
        if server is not None:
            server.close()

    def watch(self, pid: int, started_here: bool, start_ticks: int | None,
              on_end: Callable[[int], None]) -> None:
        if started_here:
            with self._lock:
                served = pid not in self._children and pid not in self._orphans
                if served and pid in self._ends:
                    status: int | None = self._ends.pop(pid)
                elif served:
                    self._waiting[pid] = on_end  # _shim_ended calls it
                    return
                else:
                    status = None
            if status is not None:
                on_end(_signal_of(status))
                return
            if pid in self._orphans:
                started_here = False
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
            shim_signal = _signal_of(status)
        else:
            while start_ticks is not None and self.start_ticks(pid) == start_ticks:
                time.sleep(POLL_S)
            with self._lock:
                self._orphans.discard(pid)
        on_end(shim_signal)

    def killpg(self, pgid: int, sig: int) -> None:
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            pass

    def start_ticks(self, pid: int) -> int | None:
        return start_ticks(pid)

    def find_by_env(self, key: Key, spool: Path) -> int:
        # A served shim wrote its pid and start time beside its status file (its environment and
        # command line are its server's).
        pid = _served_shim(str(spool / f"{key[0]}.{key[1]}.status"))  # executor.py's status file
        if pid:
            return pid
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
            if wanted <= env and not any(v.startswith(b"XCE_TASK_ID=") for v in env) \
                    and (b"worker/shim.py" in cmdline or b"worker.shim" in cmdline):
                return int(entry.name)
        return 0

    def find_served(self, status_file: Path) -> int:
        return _served_shim(str(status_file))

    def sessions_usage(self) -> dict[int, tuple[int, float]]:
        return sessions_usage()

    def group_stopped(self, pgid: int) -> bool:
        return group_stopped(pgid)

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

    def read_output(self, account: Account, path: str, tail: int, log: Path) -> tuple[bytes, int]:
        if os.geteuid() != 0:  # a worker that is not root runs its own user's jobs only
            return output_reader.read_tail(path, account.uid, tail)
        groups = ",".join(str(g) for g in os.getgrouplist(account.name, account.gid))
        fields = [str(account.uid), str(account.gid), groups, str(account.uid), path, str(tail)]
        answer = self._shim_server(SHIM, log).read_output(fields, OUTPUT_READ_S)
        if answer.startswith(b"OK "):
            head, _, data = answer.partition(b"\n")
            if head[3:].isdigit():
                return data, int(head[3:])
        if answer.startswith(b"ERR "):
            raise output_reader.OutputUnreadable(answer[4:1004].decode(errors="replace"))
        raise output_reader.OutputUnreadable(f"{path} could not be read as {account.name} (the reader gave "
                                             "no answer: too many reading at once, or it failed)")

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

