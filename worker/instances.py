"""The job instances on this host: what the executor and the tasks share.

Theory of operation. An instance is a (job id, attempt) this host runs: the
job's command on its first host, or its *part* on another host of its
allocation (tasks only, tasks.py). `Instances` holds what both the executor
(executor.py) and the tasks see of them: the journal (durable, written
before any process starts), the process host (processes: process_host.py's
ProcessHost), the one lock under which the journal and the tables below
change together (watch threads report ends beside the daemon's commands),
the table of running commands and parts, the GPUs they hold (gpus.py), the
owner check, and the start of a process as the job's owner under the shim
(`spawn`, with spawn.py's pure command line and environment).

Status files, host files and the spool go through a `Files` port:
`RealFiles` on this machine's file system, `MemoryFiles` in memory, so that
what the executor makes of a status file is checked without a disk.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from worker import shim, spawn
from worker.gpus import GpuIndices
from worker.journal import JournalStore
from worker.process_host import SHIM_PATH, Account, ProcessHost
from xce.clock import Clock
from xce.start_failures import DRAINING, UNKNOWN_USER, USER_NOT_ALLOWED
from xce.v1 import api_pb2 as api

log = logging.getLogger("xce.worker")

Key = tuple[int, int]


class Files(Protocol):
    """The files the worker itself writes and reads beside the jobs (never a job's own output)."""

    def make_spool(self, path: Path) -> None:
        """The spool: the worker's alone, but passable by owners (their directories are inside)."""

    def read_status(self, path: str) -> dict[str, Any]:
        """A shim's status file: its JSON object (shim.read_status), or {} if the file is missing,
        unreadable or holds something else."""

    def exists(self, path: str) -> bool: ...

    def write_new(self, path: Path, text: str) -> None:
        """Write a file readable by everyone, in a directory only the worker writes, through no
        symbolic link (OSError if it cannot)."""

    def write_shared(self, path: Path, text: str) -> None:
        """As write_new, for a file jobs share: kept if it holds `text` already, else replaced whole."""

    def remove(self, path: Path) -> None:
        """Gone, if it was there."""

    def resolved(self, path: Path) -> Path: ...


class RealFiles:
    def make_spool(self, path: Path) -> None:
        # Status files and the journal are the worker's alone; owners reach only users/<owner>/ (0711: pass).
        path.mkdir(parents=True, exist_ok=True, mode=0o711)
        path.chmod(0o711)

    def read_status(self, path: str) -> dict[str, Any]:
        try:
            value = json.loads(shim.read_status(Path(path).read_text()))
        except (OSError, ValueError):
            return {}
        return value if isinstance(value, dict) else {}

    def exists(self, path: str) -> bool:
        return Path(path).exists()

    def write_new(self, path: Path, text: str) -> None:
        # Never in the owner's directory: a link planted there would have the worker write where it points.
        path.parent.mkdir(mode=0o755, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w") as out:
            out.write(text)

    def write_shared(self, path: Path, text: str) -> None:
        # Read back at each use: on a worker that is not root, a job (of the worker's user) may change
        # it, or put a FIFO or a large file in its place (no wait, no more read than the text's size).
        wanted = text.encode()
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            try:
                if stat.S_ISREG(os.fstat(fd).st_mode) and os.read(fd, len(wanted) + 1) == wanted:
                    return
            finally:
                os.close(fd)
        except OSError:
            pass
        path.parent.mkdir(mode=0o755, exist_ok=True)
        fd, beside = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # read whole or not at all
        try:
            with os.fdopen(fd, "wb") as out:
                os.fchmod(out.fileno(), 0o644)
                out.write(wanted)
            os.replace(beside, path)
        except BaseException:
            os.unlink(beside)
            raise

    def remove(self, path: Path) -> None:
        try:
            path.unlink()
        except OSError:
            pass

    def resolved(self, path: Path) -> Path:
        return path.resolve()


class MemoryFiles:
    """Files as a dict of path -> text; a test puts a shim's status file in with `files[path] = ...`."""

    def __init__(self) -> None:
        self.files: dict[str, str] = {}

    def make_spool(self, path: Path) -> None:
        pass

    def read_status(self, path: str) -> dict[str, Any]:
        try:
            value = json.loads(shim.read_status(self.files[str(path)]))
        except (KeyError, ValueError):
            return {}
        return value if isinstance(value, dict) else {}

    def exists(self, path: str) -> bool:
        return str(path) in self.files

    def write_new(self, path: Path, text: str) -> None:
        self.files[str(path)] = text

    def write_shared(self, path: Path, text: str) -> None:
        self.files[str(path)] = text

    def remove(self, path: Path) -> None:
        self.files.pop(str(path), None)

    def resolved(self, path: Path) -> Path:
        return path


class Instances:
    def __init__(self, spool: Path, host: ProcessHost, journal: JournalStore, clock: Clock, files: Files,
                 name: str = "", job_env: dict[str, str] | None = None, gpus: int = 0,
                 allow_root_jobs: bool = False, draining: Callable[[], bool] = lambda: False,
                 kill_grace_s: float = 10.0) -> None:
        self.spool = Path(spool)
        self.files = files  # the spool is made already: the journal is in it
        self.host = host
        self.journal = journal
        self.clock = clock
        self.name = name  # this host's name in the cluster: a job whose first host is another is a part here
        self.job_env = dict(job_env or {})  # for every job: how `xce launch` reaches this worker
        self.gpus = GpuIndices(gpus)
        self.allow_root_jobs = allow_root_jobs
        self.draining = draining
        self.kill_grace_s = kill_grace_s
        self.lock = threading.Lock()  # the journal and the tables below change together under it
        self.closed = False  # (under the lock) the journal is closed: a watch that ends late writes nothing
        self.running: dict[Key, int] = {}  # a job's command -> its shim's pid, while it runs
        self.parts: set[Key] = set()  # parts of parallel jobs whose first host is another, not over yet

    def journaled(self, key: Key) -> dict[str, Any]:
        """The instance's journal record ({} once closed: a watch may end after it)."""
        with self.lock:
            return {} if self.closed else (self.journal.get(key) or {})

    def status_file(self, key: Key, suffix: str = "") -> Path:
        return self.spool / f"{key[0]}.{key[1]}{suffix}.status"

    def read_status(self, path: str) -> dict[str, Any]:
        """A shim's status file, or {} if it left none."""
        return self.files.read_status(path)

    def hostfile(self, key: Key) -> Path:
        """A job's own host file (an allocation of several hosts); one of a host alone is shared."""
        return self.spool / "hosts" / f"{key[0]}.{key[1]}"

    def shared_hostfile(self, slots: int) -> Path:
        """The host file of every allocation of `slots` on this host alone (named unlike a job's)."""
        return self.spool / "hosts" / f"here.{slots}"

    def forget_hostfile(self, key: Key) -> None:
        self.files.remove(self.hostfile(key))

    # -------------------------------------------------------------- starting

    def check(self, job: api.Job, draining_too: bool = True) -> tuple[Account | None, api.JobReport | None]:
        """The owner's account here, or the failed dispatch that says why the job cannot run here
        (`draining_too=False`: a task of a job that runs already, which draining does not stop)."""
        if draining_too and self.draining():
            return None, failed(job, DRAINING, "worker draining")
        host_name = self.host.host_name()
        if not job.spec.user:
            return None, failed(job, UNKNOWN_USER, "the job has no owner")
        account = self.host.account(job.spec.user)
        if account is None:
            return None, failed(job, UNKNOWN_USER, f"user {job.spec.user} has no account on host {host_name}")
        worker_uid = self.host.euid()
        if account.uid == 0 and not self.allow_root_jobs:
            return None, failed(job, USER_NOT_ALLOWED, f"host {host_name} runs no root jobs "
                                                       "(allow_root_jobs = false)")
        if worker_uid != 0 and account.uid != worker_uid:
            return None, failed(job, USER_NOT_ALLOWED, f"the worker of host {host_name} is not root and "
                                                       f"cannot run jobs of {job.spec.user}")
        return account, None

    def spawn(self, job: api.Job, account: Account, status_file: Path, task: api.LaunchTask | None = None,
              credential: str = "", gpus: list[int] | None = None) -> int:
        """Start the job's command (or `task`) under a shim that writes `status_file`; the shim's pid."""
        cwd = spawn.working_dir(job, account)
        outputs = (self.output(cwd, job.spec.stdout_path, job, account, "out"),
                   self.output(cwd, job.spec.stderr_path, job, account, "err"))
        ids = spawn.ids_env(job, self.spool, task)
        where = spawn.hosts_env(job, self.name, credential or (task.credential if task is not None else ""),
                                self.write_hostfile(job))
        env = spawn.job_env(job, account, task, self.job_env, where, ids, gpus, self.gpus.count)
        command = spawn.shim_command(job, account, status_file, task, outputs, self.host.euid() == 0)
        return self.host.spawn(command, {"PATH": SHIM_PATH, **ids}, spawn.env_bytes(env),
                               self.spool / "shims.log")

    def output(self, cwd: str, path: str, job: api.Job, account: Account, suffix: str) -> str:
        """A path the owner chose (relative to the cwd), or the owner's own directory in the spool."""
        if path:
            return str(Path(cwd) / spawn.output_path(path, job))
        return str(self.host.owner_dir(self.spool / "users" / account.name, account) /
                   f"{job.id}.{job.attempt}.{suffix}")

    def write_hostfile(self, job: api.Job) -> str | None:
        """The job's host file (a host per slot), readable by everyone through the 0711 spool. That of
        an allocation on this host alone is shared by all of its size, and kept: a file's creation and
        removal cost this host up to ~0.5 ms of kernel time a job (its file system's inode allocation)."""
        hosts = spawn.per_slot_hosts(job, self.name)
        text = "".join(f"{h}\n" for h in hosts)
        try:
            if set(hosts) == {self.name}:
                hostfile = self.shared_hostfile(len(hosts))
                self.files.write_shared(hostfile, text)
            else:
                hostfile = self.hostfile((job.id, job.attempt))
                self.files.write_new(hostfile, text)
        except OSError as exc:
            log.warning("job %d.%d: no host file %s: %s", job.id, job.attempt, hostfile, exc)
            return None
        return str(hostfile)


def failed(job: api.Job, code: int, reason: str) -> api.JobReport:
    return api.JobReport(job_id=job.id, attempt=job.attempt,
                         dispatch_failed=api.DispatchFailed(code=code, reason=reason))
