"""`python -I -S worker/shim.py STATUS_FILE --cwd DIR [--cwd-fallback DIR] --stdout P --stderr P
[--spool-outputs 1,2] [--user NAME] [--pre-exec SH] [--post-exec SH] [--interactive plain|pty]
[--overwrite 1,2] -- COMMAND ARGS...`

Runs one job as its owner and records how it ended.

Each job runs under this shim, the leader of the job's process group. It
waits for the command with wait4 and writes its exit status and usage to
STATUS_FILE (atomically, mode 0600), so the end of a job is known even when
the worker that started it died meanwhile: a restarted worker cannot wait
for processes that are not its children, but it can read this file. The shim
ignores SIGTERM/SIGINT/SIGHUP (the command gets them, through the process
group, with default handling restored at exec) so it outlives the command;
only SIGKILL takes it down first, and then the status is unknown. Those signals
are held (blocked) from the shim's start until its child has its default
handlers, and one that came meanwhile is passed on to the child: a kill just
after a job's start (scancel after sbatch) would otherwise reach only the shim
and wait for the grace's KILL. When the
command ends, whatever it left in the process group is killed, as Slurm does
with a job step's processes.

Privilege (slurmstepd's split). On a root worker the shim stays root to
write the status file where the job cannot forge it, and reads nothing the
job's submitter controls: the job's environment arrives on stdin (a memfd
the worker filled) and only the forked child reads it, after it has become
the owner (--user: groups, gid, uid, in that order). The child then changes
to the working directory, opens the output files (created 0600) and execs,
all as the owner, so a path the owner may not use fails as it would for the
owner, and nothing tells the owner whether a root-only path exists. A child
that cannot get that far writes "CODE message" to a close-on-exec pipe; the
shim records it as a start error with that code (worker/executor.py; whose
fault each code is: xce/start_failures.py). A job whose owner the shim is
already (a worker that is not root, or root's job on a root worker: the same
uid, gid and groups) needs no child to become anyone: the shim does the same
steps itself, in the same order and with the same failures, and starts the
command with posix_spawn, which copies nothing of the shim (a forked child's
copied pages, faults and end were 1-1.5 ms of CPU a job). Not with a pre- or
post-exec, nor interactive: those run in the forked child. `--cwd-fallback`: the working
directory is the owner's home, not one the job named; if the owner cannot
enter it (a user without a home), the job runs in the fallback (/tmp) and
its stderr says so first, as LSF does. `--spool-outputs`: which of stdout (1)
and stderr (2) are the worker's default files in its spool, not paths the job
chose: failing to open those is the host's fault (a spool its owners cannot
reach), not the job's.

Cheap to start (a job's launch should cost little more than fork and exec):
run with -S, it imports only built-in modules (no site, pathlib or json,
which were two thirds of its 21 ms). The environment arrives as NUL-separated
NAME=VALUE items, as the kernel keeps one, and the status is written as JSON
by hand.

Served (`shim.py --serve FD`, FD a SOCK_SEQPACKET socket to the worker): even
so, a Python start is ~17 ms of CPU per job, ten times the fork and exec of
the command. The worker starts one server of shims, which forks a shim per
request (a fork of a small process that has started already: ~1 ms) instead
of executing a new interpreter; each forked shim is then exactly the shim
above, the leader of its own session, with its stdin and log from the
request (SCM_RIGHTS) and its pid written beside its status file (a worker
that died before journaling the pid finds it there; at the end the status is
written after that line and the file renamed to the status file); the server answers a
request's pid only once that shim leads its session (the worker signals the
job by its group, which exists from then). The server reaps its
shims and says how each ended (`E pid status`, as wait4 gives it); it exits
when the worker's end of the socket closes, leaving running shims to go on
alone (init reaps them). The socket is an unnamed pair, closed in every shim
before anything runs: no job can ask the server for anything.

The server also reads the end of a job's output for the worker as the job's
owner (`O`: worker/output_reader.py): a forked child becomes the owner
(groups, gid, uid) and reads, without an exec, so an interpreter only root
may run (a root-only pyenv) is no obstacle, and answers on a pipe the
request carried. Its end is not reported (it is no shim); at most
MAX_READERS run at once.
"""

from __future__ import annotations

import errno
import os
import pwd
import signal
import sys
import time
import warnings  # noqa: F401 - os.execvpe imports it, in the child, after it has become the owner,

# who may not be able to read the interpreter's library (a root-only pyenv, say): imported here first

TYPE_CHECKING = False  # typing's own costs a shim ~3 ms
if TYPE_CHECKING:
    import socket

# The start failures a child reports: xce/start_failures.py's codes (this file imports only built-in modules).
COMMAND_NOT_FOUND, CWD_MISSING, UNKNOWN_USER, START_FAILED = -1, -2, -3, -5
OUTPUT_FILE, NOT_EXECUTABLE, PRE_EXEC_FAILED, INTERACTIVE_LOST = -7, -8, -9, -10
OPTIONS = ("--user", "--cwd", "--cwd-fallback", "--stdout", "--stderr", "--spool-outputs", "--pre-exec",
           "--post-exec", "--interactive", "--overwrite")
PASSED_ON = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
# exec's errors that are the command's own, as a shell sorts them (127 not found, 126 cannot run);
# the others (ENOMEM, EAGAIN, EMFILE, EIO ...) are the host's: START_FAILED.
NOT_FOUND_ERRNOS = frozenset({errno.ENOENT})
NOT_EXECUTABLE_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.ENOEXEC, errno.EISDIR, errno.ENOTDIR,
                                   errno.ELOOP, errno.ENAMETOOLONG, errno.E2BIG, errno.ETXTBSY})


def _ignore(signum: int, frame: object) -> None:
    pass  # a handler, not SIG_IGN: exec resets it to the default for the command


# A served shim's pid file, open (at pid_path of its status file): it becomes the status file.
_pid_fd: int | None = None


def write_status(path: str, status: dict[str, object]) -> None:
    """The status, whole or not at all (written beside, then renamed). A served shim writes it after
    the line of its pid file and renames that file: its line stays first, so a restarted worker that
    reads it meanwhile still finds the shim, and a job creates one file fewer (creating one costs
    this host's file system 30-500 us of kernel time). `read_status` skips the line."""
    global _pid_fd
    if _pid_fd is not None:
        fd, source, _pid_fd = _pid_fd, pid_path(path), None
    else:
        source = os.path.splitext(path)[0] + ".tmp"
        fd = os.open(source, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, to_json(status).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(source, path)


def read_status(text: str) -> str:
    """The JSON of a status file's text: after the pid line a served shim's starts with."""
    return text if text.startswith("{") else text.partition("\n")[2]


def to_json(status: dict[str, object]) -> str:
    """JSON of a flat dict of numbers, booleans and strings (what json.dumps writes for them)."""
    items = []
    for key, value in status.items():
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, (int, float)):
            text = repr(value)
        else:
            text = _string(str(value))
        items.append(f"{_string(key)}: {text}")
    return "{" + ", ".join(items) + "}"


def _string(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + "".join(c if c >= " " else f"\\u{ord(c):04x}" for c in escaped) + '"'


def parse_env(raw: bytes) -> dict[str, str]:
    """NAME=VALUE items, NUL-separated (worker/spawn.py's `env_bytes`)."""
    env = {}
    for item in raw.decode().split("\0"):
        name, sep, value = item.partition("=")
        if sep and name:
            env[name] = value
    return env


class _PreExecFailed(Exception):
    pass


class _Step:
    """Where a start is, and the start failure's code should it fail there."""

    def __init__(self) -> None:
        self.code, self.doing = START_FAILED, "starting"

    def at(self, code: int, doing: str) -> None:
        self.code, self.doing = code, doing

    def failure(self, exc: BaseException, command: list[str]) -> str:
        """"CODE doing: detail", as the shim records a start failure (main)."""
        code, doing = self.code, self.doing
        if isinstance(exc, OSError) and code == COMMAND_NOT_FOUND and exc.errno not in NOT_FOUND_ERRNOS:
            code = NOT_EXECUTABLE if exc.errno in NOT_EXECUTABLE_ERRNOS else START_FAILED
            doing = f"cannot run {command[0]}"
        detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__
        # (replace: a path or command from undecodable bytes must not lose the failure itself)
        return f"{code} {doing}: {detail}".encode(errors="replace")[:1000].decode(errors="replace")


def _enter(step: _Step, cwd: str, fallback: str | None) -> str:
    """Change to the job's working directory, else to the fallback; what its stderr says first."""
    step.at(CWD_MISSING, f"working directory {cwd} missing or not accessible")
    try:
        os.chdir(cwd)
    except OSError as exc:
        if fallback is None:
            raise
        step.at(START_FAILED, f"home directory {cwd} not accessible, nor {fallback}")
        os.chdir(fallback)
        return f"xce: home directory {cwd} not accessible ({exc.strerror}): the job runs in {fallback}\n"
    return ""


def _open_output(step: _Step, fd: int, path: str, spool_outputs: str, overwrite: str) -> int:
    """The job's stdout (fd 1) or stderr (2), opened (close-on-exec) for the caller to put in place."""
    step.at(OUTPUT_FILE, f"output file {path}")
    if str(fd) in spool_outputs.split(","):
        step.at(START_FAILED, f"output file {path} in the worker's spool")
    emptied = os.O_TRUNC if str(fd) in overwrite.split(",") else 0  # bsub -oo, -eo
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | emptied, 0o600)


Owner = tuple[int, int, list[int]]  # uid, gid, groups


def _account(user: str) -> Owner:
    """The account's ids and groups (KeyError, OSError: they cannot be read)."""
    entry = pwd.getpwnam(user)
    return entry.pw_uid, entry.pw_gid, os.getgrouplist(user, entry.pw_gid)


def _owner(user: str) -> Owner | None:
    """The account's ids and groups, or None if they cannot be read (the child then says why)."""
    try:
        return _account(user)
    except (KeyError, OSError):
        return None


def _is_self(owner: Owner) -> bool:
    """Whether this process has the owner's uid, gid and groups already (what _child would set)."""
    uid, gid, groups = owner
    return os.getresuid() == (uid, uid, uid) and os.getresgid() == (gid, gid, gid) \
        and set(groups) | {gid} == set(os.getgroups()) | {gid}


def _child(user: str | None, owner: Owner | None, cwd: str, stdout: str, stderr: str, command: list[str],
           report: int, fallback: str | None = None, spool_outputs: str = "", pre_exec: str = "",
           post_exec: str = "", interactive: str = "", pty_fds: tuple[int, int] | None = None,
           overwrite: str = "") -> None:
    """In the forked child: become the owner, then everything else as the owner; never returns. A
    pre-exec (bsub -E) runs first, as the owner, with the job's environment and files: failing, it is a
    start failure of its own (the job pends again). With a post-exec (-Ep), the command runs in a
    child of this process, which outlives it to run the post-exec, then ends as the command did."""
    step = _Step()
    try:
        if user is not None:
            step.at(UNKNOWN_USER, f"user {user}")
            owner = owner or _account(user)  # (None: the shim could not read it; the lookup says why)
            os.setgroups(owner[2])
            os.setgid(owner[1])
            os.setuid(owner[0])
        step.at(START_FAILED, "reading the job's environment")
        env = parse_env(os.read(0, 1 << 24))  # as the owner, never before
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        note = _enter(step, cwd, fallback)
        for fd, path in ((1, stdout), (2, stderr)):
            opened = _open_output(step, fd, path, spool_outputs, overwrite)
            os.dup2(opened, fd)
            os.close(opened)
        if note:
            os.write(2, note.encode(errors="replace"))
        if pre_exec:
            step.at(PRE_EXEC_FAILED, "pre-exec (-E)")
            ended = _run_shell(pre_exec, env)
            if ended:
                raise _PreExecFailed(ended)
        if interactive:
            step.at(INTERACTIVE_LOST, f"reaching its submitter at {env.get('XCE_INTERACTIVE', '?')}")
            conn = _reach_submitter(env)
            if pty_fds is None:  # bsub -I: the connection is the command's stdin, stdout and stderr
                for fd in (0, 1, 2):
                    os.dup2(conn.fileno(), fd)
                conn.close()
            else:
                step.at(START_FAILED, "starting the command on its terminal")
                _on_terminal(command, env, conn, pty_fds, report)
        if post_exec:
            step.at(START_FAILED, "starting the command beside its post-exec")
            _then_post_exec(command, env, post_exec, report)
        step.at(COMMAND_NOT_FOUND, f"command not found: {command[0]}")
        os.execvpe(command[0], command, env)
    except BaseException as exc:  # noqa: BLE001 - whatever it is, the shim must hear of it
        try:
            os.write(report, step.failure(exc, command).encode())
        finally:
            os._exit(127)


def _spawned(cwd: str, stdout: str, stderr: str, command: list[str], fallback: str | None,
             spool_outputs: str, overwrite: str) -> tuple[int, str]:
    """The command started by posix_spawn, for a job whose owner this shim is already (no pre- or
    post-exec, not interactive): (its pid, "") or (0, the start failure as _child reports it). The
    steps of _child, in the same order and with the same failures, done here; no copy of this
    process is made to do them in (a fork of the shim, its pages copied as it runs, and its end cost
    1-1.5 ms of CPU a job, more than a third of what its shim and command cost: bench/shim_cost.py).
    This process stays in the job's working directory: nothing it does after names a relative path.
    Unlike the child, it holds the group's signals meanwhile: a kill while a hung file system holds
    the start waits for the grace's KILL, and one that comes before a start failure is not the
    command's (it never ran)."""
    step = _Step()
    opened: list[int] = []
    try:
        step.at(START_FAILED, "reading the job's environment")
        env = parse_env(os.read(0, 1 << 24))
        opened.append(os.open(os.devnull, os.O_RDONLY))
        note = _enter(step, cwd, fallback)
        for fd, path in ((1, stdout), (2, stderr)):
            opened.append(_open_output(step, fd, path, spool_outputs, overwrite))
        if note:
            os.write(opened[2], note.encode(errors="replace"))
        step.at(COMMAND_NOT_FOUND, f"command not found: {command[0]}")
        return _spawn_on_path(command, env, [(os.POSIX_SPAWN_DUP2, fd, number)
                                             for number, fd in enumerate(opened)]), ""
    except Exception as exc:  # noqa: BLE001 - whatever it is, it is the start's failure
        return 0, step.failure(exc, command)
    finally:
        for fd in opened:
            os.close(fd)


def _spawn_on_path(command: list[str], env: dict[str, str], actions: list[tuple[object, ...]]) -> int:
    """os.execvpe's search of the job's PATH, its errors raised as it raises them, each try a
    posix_spawn: the command gets the default PIPE, XFSZ and passed-on signals, none blocked. A path
    that does not exist (ENOENT, ENOTDIR, as exec would find) is passed over without a spawn: a spawn
    that fails costs ~100 us of CPU (a vfork, a child, its exit) against a stat's 2, and a user's
    PATH that bsub or sbatch sends along may name a dozen directories before the command's."""
    name = command[0]
    paths = [name] if os.path.dirname(name) else [os.path.join(d, name) for d in os.get_exec_path(env)]
    saved: OSError | None = None
    last: OSError | None = None
    for path in paths:
        try:
            os.stat(path)
        except (FileNotFoundError, NotADirectoryError) as exc:
            last = exc
            continue
        except OSError:
            pass  # (EACCES, ELOOP, ...: the spawn's own error is the one to keep)
        try:
            return os.posix_spawn(path, command, env, file_actions=actions,
                                  setsigdef=(*PASSED_ON, signal.SIGPIPE, signal.SIGXFSZ), setsigmask=())
        except (FileNotFoundError, NotADirectoryError) as exc:
            last = exc
        except OSError as exc:
            last = exc
            saved = saved or exc
    assert last is not None  # get_exec_path gives at least one directory
    raise saved or last


def _reach_submitter(env: dict[str, str]) -> socket.socket:
    """The connection to the bsub -I that waits for this job (its address and key in the job's
    environment), each side proving it holds the key without sending it (cli/lsf/interactive.py's
    handshake): whoever else listens at that address (the submitter gone, its port taken) gets
    nothing from the job, and the job nothing from it: it ends, INTERACTIVE_LOST."""
    import hmac
    import socket

    key = env.get("XCE_INTERACTIVE_KEY", "").encode()
    host, _, port = env.get("XCE_INTERACTIVE", "").rpartition(":")
    conn = socket.create_connection((host.strip("[]"), int(port)), timeout=30)
    mine = os.urandom(16).hex()
    conn.sendall(f"XCE-INTERACTIVE {mine}\n".encode())
    answer = _read_line(conn).split()
    expected = hmac.new(key, b"submitter:" + mine.encode(), "sha256").hexdigest()
    if len(answer) != 2 or not hmac.compare_digest(answer[0], expected.encode()):
        raise OSError(f"the listener at {host}:{port} is not the job's submitter")
    conn.sendall(hmac.new(key, b"job:" + answer[1], "sha256").hexdigest().encode() + b"\n")
    conn.settimeout(None)
    return conn


def _read_line(conn: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n") and len(data) < 512:
        chunk = conn.recv(1)
        if not chunk:
            break
        data += chunk
    return data.strip()


def _start_beside(command: list[str], env: dict[str, str], report: int, terminal: int | None = None) -> int:
    """Start the command in a child of this process (which stays, to relay or to run a post-exec), on
    `terminal` if given; its pid once it runs. Its exec failing is reported as the shim's own start
    failures are (on `report`, then this process ends); once it runs, `report` is closed: the shim's
    reader sees the start."""
    for sig in PASSED_ON:  # the group's signals are the command's: this process outlives it
        signal.signal(sig, _ignore)
    ready_r, ready_w = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:
        os.close(ready_r)
        if terminal is not None:
            for fd in (0, 1, 2):
                os.dup2(terminal, fd)
            os.close(terminal)
        for sig in PASSED_ON:
            signal.signal(sig, signal.SIG_DFL)
        try:
            os.execvpe(command[0], command, env)
        except OSError as exc:
            code = COMMAND_NOT_FOUND if exc.errno in NOT_FOUND_ERRNOS else \
                NOT_EXECUTABLE if exc.errno in NOT_EXECUTABLE_ERRNOS else START_FAILED
            words = "command not found" if code == COMMAND_NOT_FOUND else "cannot run"
            os.write(ready_w, f"{code} {words}: {command[0]}: {exc.strerror}".encode()[:1000])
        finally:
            os._exit(127)
    os.close(ready_w)
    with os.fdopen(ready_r, "rb") as pipe:
        failure = pipe.read()
    if failure:
        os.waitpid(pid, 0)
        os.write(report, failure)
        os._exit(127)
    os.close(report)
    return pid


def _end_as(status: int) -> None:
    """End this process as the command ended (its signal, else its exit code); never returns."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)  # a signal whose default is to be ignored: a shell's status for it
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def _on_terminal(command: list[str], env: dict[str, str], conn: socket.socket, pty_fds: tuple[int, int],
                 report: int) -> None:
    """bsub -Is: the command on the terminal the shim made (its slave, the session's controlling
    terminal), this process relaying between the terminal and the submitter; never returns. The
    submitter's keys reach the terminal as typed (Ctrl-C is the terminal's SIGINT to its foreground
    group), its window size in frames of their own. A shell puts itself and its jobs in groups of
    their own, which the worker's signals to the shim's group miss: so this process passes INT,
    USR1 and USR2 to the terminal's foreground group, and takes TERM or HUP (a kill), or the
    submitter gone, as a hangup (`_hang_up`)."""
    master, slave = pty_fds
    pid = _start_beside(command, env, report, slave)
    os.close(slave)
    try:
        _relay(master, conn)
    except BaseException:  # noqa: BLE001 - the command runs on: hang its terminal up, and end as it does
        pass
    _hang_up(master, pid)
    _, status = os.waitpid(pid, 0)
    conn.close()
    _end_as(status)


def _hang_up(master: int, pid: int) -> None:
    """What a terminal's hangup does, by hand: the kernel tells only the session's leader (the shim,
    which must outlive the job), so SIGHUP (and SIGCONT) go to the terminal's foreground group and to
    the command (a shell, which passes it to its jobs), then the terminal closes."""
    foreground = _foreground(master)
    for sig in (signal.SIGHUP, signal.SIGCONT):
        try:
            os.kill(pid, sig)  # (not reaped yet: the number is still the command's)
        except OSError:
            pass
        if foreground and foreground != pid:
            try:
                os.killpg(foreground, sig)
            except OSError:
                pass
    try:
        os.close(master)
    except OSError:
        pass


def _relay(master: int, conn: socket.socket) -> None:
    """Terminal output to the submitter as it comes; the submitter's frames (`D` + length + keys, `W` +
    4 + rows and columns, big-endian) to the terminal, without blocking on either; until the
    terminal closes, the submitter goes, or a kill comes."""
    import select

    wake_r, wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
    signal.set_wakeup_fd(wake_w)
    for sig in PASSED_ON:
        signal.signal(sig, _ignore)  # a handler: set_wakeup_fd writes each signal's number
    os.set_blocking(master, False)
    state = _Frames()
    while True:
        readable, writable, _ = select.select([master, conn.fileno(), wake_r],
                                              [master] if state.to_terminal else [], [])
        if wake_r in readable and _killed(master, os.read(wake_r, 64)):
            return
        if master in writable:
            state.write(master)
        if master in readable and not _to_submitter(master, conn):
            return
        if conn.fileno() in readable and not state.take(master, conn):
            return


def _killed(master: int, numbers: bytes) -> bool:
    """TERM or HUP: a kill, ended as a hangup; INT, USR1, USR2 to the terminal's foreground group."""
    for number in numbers:
        if number in (signal.SIGTERM, signal.SIGHUP):
            return True
        foreground = _foreground(master)
        if foreground:
            try:
                os.killpg(foreground, number)
            except OSError:
                pass
    return False


def _foreground(master: int) -> int:
    """The terminal's foreground group, if it is still a group of this session; else 0. (A group that
    ended leaves its number with the terminal, and the number may be another session's by now: a
    signal to it would reach a stranger.)"""
    try:
        group = os.tcgetpgrp(master)
        return group if group > 0 and os.getsid(group) == os.getsid(0) else 0
    except OSError:
        return 0


def _to_submitter(master: int, conn: socket.socket) -> bool:
    """What the terminal shows, to the submitter; False once either is gone."""
    try:
        data = os.read(master, 65536)
    except BlockingIOError:
        return True
    except OSError:  # EIO: every process of the job closed the terminal
        return False
    if not data:
        return False
    try:
        conn.sendall(data)
    except OSError:
        return False
    return True


class _Frames:
    """The submitter's frames as they arrive, and the keys not yet written to the terminal."""

    def __init__(self) -> None:
        self.pending = b""
        self.to_terminal = b""

    def write(self, master: int) -> None:
        try:
            self.to_terminal = self.to_terminal[os.write(master, self.to_terminal):]
        except BlockingIOError:
            pass

    def take(self, master: int, conn: socket.socket) -> bool:
        """Read what the submitter sent; False once it is gone."""
        import fcntl
        import struct
        import termios

        try:
            data = conn.recv(65536)
        except OSError:
            data = b""
        if not data:
            return False
        self.pending += data
        while len(self.pending) >= 5 and len(self.pending) >= 5 + int.from_bytes(self.pending[1:5], "big"):
            kind, size = self.pending[0:1], int.from_bytes(self.pending[1:5], "big")
            payload, self.pending = self.pending[5:5 + size], self.pending[5 + size:]
            if kind == b"D":
                self.to_terminal += payload
            elif kind == b"W" and size == 4:
                rows, cols = struct.unpack("!HH", payload)
                fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        return True


def _run_shell(text: str, env: dict[str, str]) -> str:
    """`sh -c text` in a child, waited for; "" if it exited 0, else how it ended."""
    pid = os.fork()
    if pid == 0:
        try:
            os.execve("/bin/sh", ["/bin/sh", "-c", text], env)
        finally:
            os._exit(127)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    code = os.WEXITSTATUS(status)
    return f"exited {code}" if code else ""


def _then_post_exec(command: list[str], env: dict[str, str], post_exec: str, report: int) -> None:
    """Run the command in a child, then the post-exec (LSB_JOBEXIT_STAT: the command's wait status, as
    LSF sets it), then end as the command ended; never returns."""
    pid = _start_beside(command, env, report)
    _, status = os.waitpid(pid, 0)
    try:
        _run_shell(post_exec, {**env, "LSB_JOBEXIT_STAT": str(status)})
    except BaseException:  # noqa: BLE001 - the job's end is the command's, whatever became of this
        pass
    _end_as(status)


def main(argv: list[str]) -> int:
    options: dict[str, str] = {}
    while len(argv) > 3 and argv[1] in OPTIONS:
        options[argv[1][2:]] = argv[2]
        argv = [argv[0], *argv[3:]]
    if len(argv) < 3 or argv[1] != "--" or not {"cwd", "stdout", "stderr"} <= set(options):
        print("usage: python -I -S worker/shim.py STATUS_FILE --cwd DIR [--cwd-fallback DIR] --stdout P "
              "--stderr P [--spool-outputs 1,2] [--user NAME] [--pre-exec SH] [--post-exec SH] "
              "[--interactive plain|pty] [--overwrite 1,2] -- COMMAND ...",
              file=sys.stderr)
        return 2
    status_path, command = os.path.abspath(argv[0]), argv[2:]  # (a plain start changes directory)
    # The group's signals are the command's: a kill's TERM, and a checkpoint's (-k: HUP, INT, USR1 or
    # USR2) must not end this shim first. Held (blocked) until the command's process exists: one that
    # arrived before would reach only this shim, and a kill just after the start would wait for its
    # grace's KILL (a served shim is forked with them held).
    signal.pthread_sigmask(signal.SIG_BLOCK, PASSED_ON)
    for sig in PASSED_ON:
        signal.signal(sig, _ignore)
    started = time.monotonic()
    user = options.get("user")
    owner = _owner(user) if user is not None else None
    plain = not (options.get("interactive") or options.get("pre-exec") or options.get("post-exec"))
    if plain and (user is None or (owner is not None and _is_self(owner))):
        pid, failure = _spawned(options["cwd"], options["stdout"], options["stderr"], command,
                                options.get("cwd-fallback"), options.get("spool-outputs", ""),
                                options.get("overwrite", ""))
        _pass_on_held(pid)
    else:
        pid, failure = _forked(options, user, owner, command)
    if failure:
        code, _, reason = failure.partition(" ")
        write_status(status_path, {"start_error": reason, "code": int(code) if code.lstrip("-").isdigit()
                                   else START_FAILED})
        return 127
    while True:
        try:
            _, status, usage = os.wait4(pid, 0)
            break
        except ChildProcessError:
            write_status(status_path, {"unknown": True})
            return 1
        except InterruptedError:
            continue
    write_status(status_path, {
        "exit_code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else 0,
        "term_signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0,
        "user_cpu_s": usage.ru_utime, "system_cpu_s": usage.ru_stime, "max_rss_kb": usage.ru_maxrss,
        "wall_s": time.monotonic() - started, "time_ms": int(time.time() * 1000),
        "mono_ms": int(time.monotonic() * 1000)})  # the host's clock that no wall-clock jump moves
    os.killpg(0, signal.SIGKILL)  # what the command left behind, and this shim: the status is written
    return 0


def _pass_on_held(pid: int) -> None:
    """The group's signals that came while they were held go to the command (`pid`, 0: none started)
    too, and are no longer held."""
    for sig in (signal.sigpending() & set(PASSED_ON)) if pid else ():
        os.kill(pid, sig)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, PASSED_ON)


def _forked(options: dict[str, str], user: str | None, owner: Owner | None,
            command: list[str]) -> tuple[int, str]:
    """The command started by a child of this shim that becomes the owner first (_child): (its pid,
    "") or (the child's pid, its start failure), the child ended then."""
    interactive = options.get("interactive", "")
    pty_fds = _terminal(user) if interactive == "pty" else None
    if interactive:  # what the child needs, loaded while the interpreter's library may still be read
        import encodings.idna  # noqa: F401 - socket.create_connection's, loaded when first used
        import fcntl  # noqa: F401
        import hmac  # noqa: F401
        import select  # noqa: F401
        import socket  # noqa: F401
        import struct  # noqa: F401
        import termios  # noqa: F401
        hmac.new(b"k", b"m", "sha256")  # (its digest's module, loaded on first use too)
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        if _pid_fd is not None:  # the shim's own: this child becomes the owner and may live as long
            os.close(_pid_fd)  # as the job (a pre- or post-exec, an interactive relay)
        # Python ignores PIPE and XFSZ, and an ignored signal stays ignored across exec: the
        # command gets the defaults (`yes | head` ends quietly).
        for sig in (*PASSED_ON, signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, PASSED_ON)  # one that came since the fork: its default
        _child(user, owner, options["cwd"], options["stdout"], options["stderr"], command, write_end,
               options.get("cwd-fallback"), options.get("spool-outputs", ""), options.get("pre-exec", ""),
               options.get("post-exec", ""), interactive, pty_fds, options.get("overwrite", ""))
    os.close(write_end)
    _pass_on_held(pid)  # sent before the fork: the command's too
    if pty_fds is not None:
        os.close(pty_fds[0])
        os.close(pty_fds[1])
    with os.fdopen(read_end, "rb") as pipe:
        failure = pipe.read().decode(errors="replace")
    if failure:
        os.waitpid(pid, 0)
    return pid, failure


def _terminal(user: str | None) -> tuple[int, int]:
    """A new terminal (master, slave), the slave made this session's controlling terminal: the shim
    leads the job's session, so the job's process group is its foreground group. Its owner's, as a
    login's terminal is (group tty, 0620): programs that open it by its name may."""
    import fcntl
    import termios

    master, slave = os.openpty()
    if user is not None:
        import grp

        try:
            tty_group = grp.getgrnam("tty").gr_gid
        except KeyError:
            tty_group = -1
        try:
            os.fchown(slave, pwd.getpwnam(user).pw_uid, tty_group)
            os.fchmod(slave, 0o620)
        except KeyError:  # no such user: the child says so (UNKNOWN_USER)
            pass
    try:
        fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
    except OSError:  # not a session's leader (a shim run by hand): a terminal without its signals
        pass
    return master, slave


def pid_path(status_path: str) -> str:
    return os.path.splitext(status_path)[0] + ".pid"


MAX_READERS = 16


def serve(sock_fd: int) -> int:
    """The server of shims (module docstring): requests `R` + NUL-separated shim arguments with two
    fds (stdin, log) -> `S pid` or `F reason`; a shim's end -> `E pid wait-status`. `O` with a memfd
    of NUL-separated uid, gid, groups (comma-separated), owner uid, path and tail, and a pipe's
    write end: a reader answers on the pipe (`OK size` NL data, or `ERR reason`)."""
    import resource  # noqa: F401 - os.wait4 makes its usage a resource.struct_rusage
    import select
    import socket
    # Loaded here once, inherited by every fork: else each job's child dlopens glibc's NSS
    # modules (libnss_systemd, libcap) to look its owner up, and each shim the resource module.
    try:
        pwd.getpwuid(os.getuid())
        os.getgrouplist(pwd.getpwuid(os.getuid()).pw_name, os.getgid())
    except (KeyError, OSError):
        pass
    reader = _load_reader()
    readers: set[int] = set()
    os.set_inheritable(sock_fd, False)
    sock = socket.socket(fileno=sock_fd)
    wake_r, wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, _ignore)  # a handler, so that the wakeup fd hears of children
    # The worker's stop is the socket's end; and a shim forked from here is its job's group leader
    # before its main() installs its own: a checkpoint's USR1 or USR2 then must not end it either.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, _ignore)
    while True:
        try:
            readable, _, _ = select.select([sock.fileno(), wake_r], [], [])
        except InterruptedError:
            continue
        if wake_r in readable:
            try:
                while os.read(wake_r, 512):
                    pass
            except BlockingIOError:
                pass
        _reap(sock, readers)
        if sock.fileno() in readable:
            try:
                message, fds, _, _ = socket.recv_fds(sock, 16, 3)
            except InterruptedError:
                continue
            if not message:
                return 0  # the worker is gone: its shims go on alone
            if message == b"O":
                _fork_reader(reader, fds, readers, (sock.fileno(), wake_r, wake_w))
            else:
                _fork_shim(sock, message, fds, (wake_r, wake_w))


def _reap(sock: socket.socket, readers: set[int]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid in readers:  # a reader, not a shim: nobody waits for its end
            readers.discard(pid)
            continue
        try:
            sock.send(f"E {pid} {status}".encode())
        except OSError:
            pass


def _load_reader() -> object:
    """worker/output_reader.py, beside this file (run with -I, whose directory is not on the path)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "xce_output_reader", os.path.join(os.path.dirname(os.path.abspath(__file__)), "output_reader.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fork_reader(reader: object, fds: list[int], readers: set[int], own: tuple[int, ...]) -> None:
    """A child that becomes the owner, reads, answers on the pipe and exits; nothing if malformed or
    too many are reading (the worker sees the pipe close without an answer)."""
    pid = -1
    if len(fds) == 2 and len(readers) < MAX_READERS:
        try:
            chunks = []
            while chunk := os.read(fds[0], 1 << 16):
                chunks.append(chunk)
            fields = b"".join(chunks).decode(errors="surrogateescape").split("\0")
            pid = os.fork() if len(fields) == 6 else -1
        except OSError:
            pid = -1
    if pid == 0:
        try:
            signal.set_wakeup_fd(-1)
            for fd in (*own, fds[0]):
                os.close(fd)
            uid, gid, groups, owner, path, tail = fields
            os.setgroups([int(g) for g in groups.split(",") if g])
            os.setgid(int(gid))
            os.setuid(int(uid))
            try:
                data, size = reader.read_tail(path, int(owner), int(tail))  # type: ignore[attr-defined]
                answer = f"OK {size}\n".encode() + data
            except reader.OutputUnreadable as exc:  # type: ignore[attr-defined]
                answer = f"ERR {exc}".encode(errors="replace")
            view = memoryview(answer)
            while view:
                view = view[os.write(fds[1], view):]
        finally:
            os._exit(0)
    if pid > 0:
        readers.add(pid)
    for fd in fds:
        os.close(fd)


def _fork_shim(sock: socket.socket, message: bytes, fds: list[int], own: tuple[int, int]) -> None:
    global _pid_fd
    argv: list[str] = []
    if message == b"R" and len(fds) == 3:
        chunks = []
        while chunk := os.read(fds[2], 1 << 20):
            chunks.append(chunk)
        argv = b"".join(chunks).decode(errors="surrogateescape").split("\0")
    for fd in fds[2:]:
        os.close(fd)
    fds = fds[:2]
    if len(fds) != 2 or len(argv) < 2:
        for fd in fds:
            os.close(fd)
        sock.send(b"F malformed request")
        return
    # The worker signals the job's group by the pid this answers: the answer waits until the shim
    # leads a session of its own (else a kill just after the start finds no group), and the shim is
    # forked with the group's signals held (its main() passes on what came meanwhile).
    ready_r = ready_w = -1
    signal.pthread_sigmask(signal.SIG_BLOCK, PASSED_ON)
    try:
        ready_r, ready_w = os.pipe2(os.O_CLOEXEC)
        pid = os.fork()
    except OSError as exc:
        pid = -1
        reason = exc.strerror or str(exc)
    if pid == 0:
        code = 1
        try:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            sock.close()
            for fd in (*own, ready_r):
                os.close(fd)
            os.setsid()
            os.close(ready_w)
            os.dup2(fds[0], 0)
            os.dup2(fds[1], 1)
            os.dup2(fds[1], 2)
            for fd in fds:
                os.close(fd)
            status_path = argv[0]
            with open("/proc/self/stat", "rb") as stat:
                ticks = stat.read().rsplit(b")", 1)[1].split()[19].decode()
            fd = os.open(pid_path(status_path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            os.write(fd, f"{os.getpid()} {ticks}\n".encode())
            _pid_fd = fd  # for write_status: close-on-exec, and closed in a child that becomes the owner
            code = main(argv)
        except BaseException as exc:  # noqa: BLE001 - a shim never returns into the server's loop
            os.write(2, f"shim {os.getpid()}: {type(exc).__name__}: {exc}\n".encode(errors="replace"))
        finally:
            os._exit(code)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, PASSED_ON)
    if ready_w >= 0:
        os.close(ready_w)
        if pid > 0:
            os.read(ready_r, 1)  # its end of the pipe closes once it has its session (or it ended)
        os.close(ready_r)
    for fd in fds:
        os.close(fd)
    sock.send(f"S {pid}".encode() if pid > 0 else f"F fork failed: {reason}".encode())


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--serve":
        sys.exit(serve(int(sys.argv[2])))
    sys.exit(main(sys.argv[1:]))
