"""The state store: the state machine's tables in one LMDB environment.

Theory of operation. `apply` opens one write transaction, runs fsm.apply in
it and commits: the change and the applied index land together or not at
all. Readers take read transactions; they never block the applier.

Snapshots are a consistent copy of the environment (a compacting
mdb_env_copyfd of the read transaction that read the header) behind a small
header naming the Raft entries pysyncobj needs. Restoring replaces the
environment only when the snapshot is newer than the local state; the swap
is a directory rename, finished at the next open if a crash interrupts it.

Durability: the Raft WAL (raft_wal.py) is the durable record, and the state
is what applying it makes. The state environment commits without a sync
(MDB_NOSYNC): a synced commit cost every replica ~140 us of CPU and ~0.3 ms
of the tick thread per entry, a fifth of a follower's CPU for a small one.
It is synced fully before each snapshot (a snapshot lets the WAL drop what
it covers) and when the store closes. A process that dies leaves the page
cache with every write, in order: LMDB's state is whole, at most behind the
WAL, which replays the rest. A machine that goes down does not: the disk
may hold some writes since the last sync and not others, and LMDB cannot
tell. So the store keeps a note beside it (`state.unsynced`, written and
synced before its first commit, removed once a close has synced it) of the
boot it was written in; opened after a boot other than the note's, the
state is not used (moved to `state.untrusted`) and the replica rebuilds it
from its Raft snapshot and WAL (`rebuilt`; raft.py refuses to start if they
cannot make it, with what to do). A replica also syncs the state every
second (`start_syncing`): a write-back error, which the kernel reports to
one sync only, surfaces there (or at a snapshot's or the close's sync),
marks the note so that no boot trusts the state again, and stops the
replica.

The environment has an identity record (cluster id) written when it is
created; opening it for another cluster, or opening a corrupt file, fails
with StoreError and a message saying which.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import struct
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import lmdb

from controller import fsm
from controller.tables import TABLES
from xce.clock import boot_id
from xce.private import private_lmdb, write_private
from xce.v1 import log_pb2 as log

logger = logging.getLogger(__name__)

MAP_SIZE = 8 << 30  # address space only; the file grows with the data
UNSYNCED = ".unsynced"  # beside the store: the boot its commits since the last sync were made in
UNTRUSTED = ".untrusted"  # beside the store: the last state set aside after a machine went down
SYNC_EVERY_S = 1.0  # the replica's state synced this often: a write-back error surfaces within it
NOT_SYNCED = b"sync-failed"  # the note after a failed sync: no boot trusts the state since
SNAPSHOT_MAGIC = b"XCESNAP1"
IDENTITY_KEY = b"identity"


T = TypeVar("T")


class StoreError(Exception):
    """The store cannot be opened or restored; the message says why."""


PULSE_EVERY = 64  # table operations between two calls of an apply's `pulse`


class LmdbTables:
    """fsm.Tables over one LMDB transaction."""

    def __init__(self, txn: lmdb.Transaction, dbs: dict[str, Any]) -> None:
        self._txn = txn
        self._dbs = dbs

    def get(self, table: str, key: bytes) -> bytes | None:
        value = self._txn.get(key, db=self._dbs[table])
        return None if value is None else bytes(value)

    def put(self, table: str, key: bytes, value: bytes) -> None:
        self._txn.put(key, value, db=self._dbs[table])

    def delete(self, table: str, key: bytes) -> None:
        self._txn.delete(key, db=self._dbs[table])

    def first(self, table: str, start: bytes = b"") -> tuple[bytes, bytes] | None:
        cursor = self._txn.cursor(db=self._dbs[table])
        if not cursor.set_range(start):
            return None
        return bytes(cursor.key()), bytes(cursor.value())

    def scan(self, table: str, start: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        cursor = self._txn.cursor(db=self._dbs[table])
        if not cursor.set_range(start):
            return
        for key, value in cursor.iternext(keys=True, values=True):
            yield bytes(key), bytes(value)

    def scan_back(self, table: str, start: bytes) -> Iterator[tuple[bytes, bytes]]:
        cursor = self._txn.cursor(db=self._dbs[table])
        if cursor.set_range(start):
            if cursor.key() != start and not cursor.prev():
                return
        elif not cursor.last():
            return
        for key, value in cursor.iterprev(keys=True, values=True):
            yield bytes(key), bytes(value)


class _PulsingTables(LmdbTables):
    """An apply's tables: every PULSE_EVERY operations (a scanned row counts as one) they call
    `pulse`, which lets the Raft node keep its peers hearing from it through an entry that takes long
    to apply (raft.py). What the entry does is unchanged: `pulse` sees nothing of the state and gives
    nothing back."""

    def __init__(self, txn: lmdb.Transaction, dbs: dict[str, Any], pulse: Callable[[], None]) -> None:
        super().__init__(txn, dbs)
        self._pulse = pulse
        self._operations = 0

    def _count(self) -> None:
        self._operations += 1
        if self._operations % PULSE_EVERY == 0:
            self._pulse()

    def get(self, table: str, key: bytes) -> bytes | None:
        self._count()
        return super().get(table, key)

    def put(self, table: str, key: bytes, value: bytes) -> None:
        self._count()
        super().put(table, key, value)

    def delete(self, table: str, key: bytes) -> None:
        self._count()
        super().delete(table, key)

    def first(self, table: str, start: bytes = b"") -> tuple[bytes, bytes] | None:
        self._count()
        return super().first(table, start)

    def scan(self, table: str, start: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        for item in super().scan(table, start):
            self._count()
            yield item

    def scan_back(self, table: str, start: bytes) -> Iterator[tuple[bytes, bytes]]:
        for item in super().scan_back(table, start):
            self._count()
            yield item


class _ReadWriteLock:
    """Many readers or one swapper (snapshot restore); a waiting swapper
    holds back new readers, so a stream of reads cannot starve it."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writing = False
        self._writers_waiting = 0

    @contextmanager
    def read(self) -> Iterator[None]:
        with self._cond:
            while self._writing or self._writers_waiting:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    @contextmanager
    def write(self) -> Iterator[None]:
        with self._cond:
            self._writers_waiting += 1
            while self._writing or self._readers:
                self._cond.wait()
            self._writers_waiting -= 1
            self._writing = True
        try:
            yield
        finally:
            with self._cond:
                self._writing = False
                self._cond.notify_all()


class StateStore:
    def __init__(self, path: Path, cluster_id: str,
                 handlers: Mapping[str, fsm.Handler] = fsm.HANDLERS) -> None:
        self.path = Path(path)
        self.cluster_id = cluster_id
        # The entry kinds this replica applies (controller/faults.py may change them).
        self.handlers = handlers
        # Called now and then while an entry is applied (_PulsingTables); set by the Raft node.
        self.pulse: Callable[[], None] | None = None
        self._lock = _ReadWriteLock()
        self._finish_interrupted_swap()
        self._unsynced = self.path.with_name(self.path.name + UNSYNCED)
        self._closed = threading.Event()
        self._on_sync_failure: Callable[[BaseException], None] | None = None  # set by start_syncing
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.rebuilt = self._set_aside_after_a_machine_crash()  # the caller rebuilds from the log
        self._note(boot_id().encode())  # before the first commit that is not synced ("": never trusted)
        self._env, self._dbs = self._open(self.path)

    # -------------------------------------------------------------- opening

    def _open(self, path: Path) -> tuple[lmdb.Environment, dict[str, Any]]:
        fresh = not (path / "data.mdb").exists()
        path.mkdir(parents=True, exist_ok=True)
        try:
            env = lmdb.open(str(private_lmdb(Path(path))), map_size=MAP_SIZE, max_dbs=len(TABLES) + 1,
                            metasync=False, sync=False, max_readers=512, mode=0o600)
            dbs = {t: env.open_db(t.encode()) for t in TABLES}
        except lmdb.Error as exc:
            raise StoreError(f"state store {path} is unreadable (corrupt LMDB file?): {exc}") from exc
        with env.begin(write=True) as txn:
            identity = txn.get(IDENTITY_KEY, db=dbs["meta"])
            if identity is None:
                if not fresh and txn.stat(dbs["jobs"])["entries"]:
                    raise StoreError(f"state store {path} has jobs but no cluster identity")
                txn.put(IDENTITY_KEY, self.cluster_id.encode(), db=dbs["meta"])
            elif identity.decode() != self.cluster_id:
                env.close()
                raise StoreError(f"state store {path} belongs to cluster {identity.decode()!r}, "
                                 f"not {self.cluster_id!r}; refusing to start")
            if fsm.rebuild_derived(LmdbTables(txn, dbs)) and not fresh:
                logger.info("state store %s: job indexes and history (re)built from its jobs", path)
        return env, dbs

    def _set_aside_after_a_machine_crash(self) -> bool:
        """True if the state was left unsynced by a boot before this one (the module docstring): it
        is moved aside, and the store starts empty."""
        try:
            written_in = self._unsynced.read_text().strip()
        except FileNotFoundError:
            return False  # closed, and synced, the last time (or never opened)
        except OSError:
            written_in = ""
        if (written_in and written_in == boot_id()) or not self.path.exists():
            return False  # a process that died: the page cache kept every write, in order
        aside = self.path.with_name(self.path.name + UNTRUSTED)
        shutil.rmtree(aside, ignore_errors=True)
        self.path.rename(aside)
        fsync_path(self.path.parent)
        logger.warning("state store %s: not synced when the machine went down (written in boot %s): "
                       "set aside as %s; the state is rebuilt from the Raft snapshot and log", self.path,
                       written_in or "?", aside)
        return True

    def _finish_interrupted_swap(self) -> None:
        incoming = self.path.with_name(self.path.name + ".incoming")
        if not self.path.exists() and incoming.exists():
            incoming.rename(self.path)
        elif incoming.exists():
            shutil.rmtree(incoming)
        old = self.path.with_name(self.path.name + ".old")
        if old.exists():
            shutil.rmtree(old)

    def close(self) -> None:
        self._closed.set()
        with self._lock.write():
            try:
                self._sync_or_distrust()
            finally:
                self._env.close()
        self._unsynced.unlink(missing_ok=True)  # synced: whatever boot opens it next may use it
        fsync_path(self.path.parent)

    def sync(self) -> None:
        """Everything committed so far, on disk. A failure (a write-back error, which the kernel
        reports once) marks the state untrusted before StoreError: the next start rebuilds it."""
        with self._lock.read():
            if not self._closed.is_set():
                self._sync_or_distrust()

    def start_syncing(self, on_failure: Callable[[BaseException], None],
                      every_s: float = SYNC_EVERY_S) -> None:
        """Sync every `every_s` in a thread of its own, until closed: a write-back error the commits
        no longer see surfaces within it. `on_failure` hears of any sync that fails, this thread's, a
        snapshot's (whose writer would try again, and the kernel reports such an error once) or the
        close's: the replica stops."""
        self._on_sync_failure = on_failure

        def run() -> None:
            while not self._closed.wait(every_s):
                try:
                    self.sync()
                except StoreError:
                    return

        threading.Thread(target=run, daemon=True, name="state-sync").start()

    def _note(self, content: bytes) -> None:
        """The note beside the store (module docstring), on disk."""
        write_private(self._unsynced, content)
        fsync_path(self._unsynced)
        fsync_path(self.path.parent)

    def _sync_or_distrust(self) -> None:
        try:
            self._env.sync(True)
        except lmdb.Error as exc:
            try:
                self._note(NOT_SYNCED)
            except OSError:
                pass  # (a disk that takes not even this: the replica stops all the same)
            error = StoreError(f"state store {self.path}: a sync failed ({exc}): the state is not trusted "
                               "again; the next start rebuilds it from the Raft snapshot and log")
            if self._on_sync_failure is not None:
                self._on_sync_failure(error)
            raise error from exc

    # -------------------------------------------------------------- apply

    def apply(self, index: int, data: bytes) -> list[log.Result] | None:
        """Apply one committed entry in one write transaction.

        Anything apply raises (an entry this code cannot apply, a bug, a
        storage failure) aborts the transaction and reaches the caller, which
        stops the replica: nothing of the entry is written.
        """
        with self._env.begin(write=True) as txn:
            pulse = self.pulse
            if pulse is None:
                return fsm.apply(LmdbTables(txn, self._dbs), index, data, self.handlers)
            results = fsm.apply(_PulsingTables(txn, self._dbs, pulse), index, data, self.handlers)
            pulse()  # the commit writes all the entry's pages: maybe long too
            return results

    # -------------------------------------------------------------- reading

    @contextmanager
    def read(self) -> Iterator[LmdbTables]:
        with self._lock.read(), self._env.begin() as txn:
            yield LmdbTables(txn, self._dbs)

    def meta(self) -> log.Meta:
        with self.read() as tables:
            return fsm.read_meta(tables)

    def canonical_dump(self) -> bytes:
        with self.read() as tables:
            return b"".join(fsm.canonical_dump(tables))

    def rewrite(self, change: Callable[[LmdbTables], T]) -> T:
        """Change the state outside the log, in one write transaction: only for a store no replica
        runs on (restore, force-new-cluster: controller/restore.py), never beside Raft's apply."""
        with self._lock.write(), self._env.begin(write=True) as txn:
            return change(LmdbTables(txn, self._dbs))

    # -------------------------------------------------------------- snapshots

    def write_snapshot(self, out: BinaryIO, header: dict[str, Any]) -> None:
        """Header, then a consistent copy of the environment."""
        self.sync()
        with self._lock.read(), self._env.begin() as txn:
            meta = fsm.read_meta(LmdbTables(txn, self._dbs))
            header = {**header, "cluster_id": self.cluster_id, "applied_index": meta.applied_index,
                      "incarnation": meta.incarnation}
            raw = json.dumps(header, sort_keys=True).encode()
            out.write(SNAPSHOT_MAGIC + struct.pack(">I", len(raw)) + raw)
            out.flush()
            # From this very transaction, so the body is at the header's index: entries go on
            # being applied while a snapshot is written (raft.SnapshotWriter), and a plain
            # mdb_env_copyfd would start a read transaction of its own, later. (The compacting
            # copy is the one that takes a transaction; it also leaves the free pages out.)
            self._env.copyfd(out.fileno(), compact=True, txn=txn)
        os.fsync(out.fileno())

    @staticmethod
    def read_snapshot_header(path: Path) -> tuple[dict[str, Any], int]:
        """The header and the offset where the LMDB copy starts."""
        with open(path, "rb") as f:
            head = f.read(len(SNAPSHOT_MAGIC) + 4)
            if len(head) == len(SNAPSHOT_MAGIC) + 4 and head.startswith(SNAPSHOT_MAGIC):
                (size,) = struct.unpack(">I", head[len(SNAPSHOT_MAGIC):])
                head += f.read(size)
        try:
            if len(head) < len(SNAPSHOT_MAGIC):
                raise StoreError("not an XCE snapshot")
            found = StateStore.snapshot_header_of(head)
        except StoreError as exc:
            raise StoreError(f"{path}: {exc}") from exc
        if found is None:
            raise StoreError(f"{path}: corrupt snapshot header: the file ends inside it")
        return found

    @staticmethod
    def snapshot_header_of(head: bytes) -> tuple[dict[str, Any], int] | None:
        """The header and the offset where the LMDB copy starts, from a snapshot's first bytes; None
        while `head` holds only part of the header (a snapshot arriving in parts)."""
        magic = head[:len(SNAPSHOT_MAGIC)]
        if magic != SNAPSHOT_MAGIC[:len(magic)] or not head:
            raise StoreError("not an XCE snapshot")
        if len(head) < len(SNAPSHOT_MAGIC) + 4:
            return None
        (size,) = struct.unpack(">I", head[len(SNAPSHOT_MAGIC):len(SNAPSHOT_MAGIC) + 4])
        end = len(SNAPSHOT_MAGIC) + 4 + size
        if len(head) < end:
            return None
        try:
            header = json.loads(head[len(SNAPSHOT_MAGIC) + 4:end])
        except ValueError as exc:
            raise StoreError(f"corrupt snapshot header: {exc}") from exc
        if not isinstance(header, dict) or not isinstance(header.get("cluster_id"), str) \
                or not isinstance(header.get("applied_index"), int):
            raise StoreError("corrupt snapshot header: missing cluster_id or applied_index")
        return header, end

    def restore_snapshot(self, path: Path) -> bool:
        """Replace the state with the snapshot's if it is newer; True if replaced."""
        header, offset = self.read_snapshot_header(path)
        if header["cluster_id"] != self.cluster_id:
            raise StoreError(f"snapshot of cluster {header['cluster_id']!r}, not {self.cluster_id!r}")
        if header["applied_index"] <= self.meta().applied_index:
            return False
        incoming = self.path.with_name(self.path.name + ".incoming")
        old = self.path.with_name(self.path.name + ".old")
        shutil.rmtree(incoming, ignore_errors=True)
        incoming.mkdir(parents=True)
        with open(path, "rb") as src, open(incoming / "data.mdb", "wb") as dst:
            src.seek(offset)
            shutil.copyfileobj(src, dst, 1 << 20)
            dst.flush()
            os.fsync(dst.fileno())
        self._check_incoming(incoming, header["applied_index"])
        with self._lock.write():
            self._env.close()
            self.path.rename(old)
            incoming.rename(self.path)
            fsync_path(self.path.parent)
            shutil.rmtree(old)
            self._env, self._dbs = self._open(self.path)
        return True


    def _check_incoming(self, incoming: Path, applied_index: int) -> None:
        """Open the received copy before the local state is touched."""
        try:
            env, dbs = self._open(incoming)
        except StoreError:
            shutil.rmtree(incoming, ignore_errors=True)
            raise
        try:
            with env.begin() as txn:
                meta = fsm.read_meta(LmdbTables(txn, dbs))
        finally:
            env.close()
        if meta.applied_index != applied_index:
            shutil.rmtree(incoming, ignore_errors=True)
            raise StoreError(f"snapshot body is at index {meta.applied_index}, "
                             f"its header says {applied_index}")


LOCK_FILE = "lock"


def lock_data_dir(directory: Path) -> int:
    """Hold `directory` (a replica's) for this process: its fd; StoreError if another one holds it (a
    replica runs there, or a restore). Released when the process ends or execs (close-on-exec)."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StoreError(f"{directory} is in use (a replica runs on it, or a restore): stop it "
                         "first") from None
    return fd


def set_identity(path: Path, cluster_id: str) -> None:
    """Make the (closed) store at `path` belong to cluster `cluster_id`: a restore into a new cluster."""
    try:
        env = lmdb.open(str(private_lmdb(Path(path))), map_size=MAP_SIZE, max_dbs=len(TABLES) + 1, mode=0o600)
    except lmdb.Error as exc:
        raise StoreError(f"state store {path} is unreadable (corrupt LMDB file?): {exc}") from exc
    try:
        with env.begin(write=True) as txn:
            txn.put(IDENTITY_KEY, cluster_id.encode(), db=env.open_db(b"meta", txn=txn))
    finally:
        env.close()


def fsync_path(path: Path) -> None:
    """fsync a file, or a directory (to make a rename in it durable)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
