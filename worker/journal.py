"""The worker's local journal: one durable record per job instance (LMDB, synced).

Key `job.attempt`; value JSON: state (starting, running, ended), pid and its
start time (clock ticks since boot, from /proc: a reused pid is never taken
for the job), the status file the shim writes, the final report (hex of the
protobuf) and whether the leader acknowledged it. Written before the process
is started (`starting`), after (`running`), and when it ends; read back after
a worker restart to re-adopt, report, or re-send. Beside the instances, a
few named notes (JSON) that outlive a restart: the fence's clock (daemon.py).

An end's acknowledgement is written lazily (`put_lazily`): kept in memory and
committed with the next synced write, or at close. Losing it to a crash only
means the end is reported again, which the leader acknowledges again; synced,
it cost every job a commit's flush on the thread that reads the leader's
commands (a RunJob behind an acknowledgement waited for it).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import lmdb

from xce.private import private_lmdb

Key = tuple[int, int]
KEEP_ACKED = 1000  # acknowledged records kept to recognise late repeats


def _key(key: Key) -> bytes:
    return f"{key[0]}.{key[1]}".encode()


class Journal:
    def __init__(self, path: Path, keep_acked: int = KEEP_ACKED) -> None:
        self.keep_acked = keep_acked
        path.mkdir(parents=True, exist_ok=True)
        self._env = lmdb.open(str(private_lmdb(Path(path))), map_size=1 << 30, max_dbs=2, sync=True,
                              metasync=True, mode=0o600)
        self._db = self._env.open_db(b"instances")
        self._notes = self._env.open_db(b"notes")
        self._lazy: dict[bytes, bytes] = {}  # records not committed yet (put_lazily), by key
        self._lazy_lock = threading.Lock()
        self._writing = threading.Lock()  # one write transaction at a time (LMDB's rule too)

    def put_note(self, name: str, note: dict[str, Any]) -> None:
        with self._env.begin(write=True) as txn:
            txn.put(name.encode(), json.dumps(note, sort_keys=True).encode(), db=self._notes)

    def get_note(self, name: str) -> dict[str, Any] | None:
        with self._env.begin() as txn:
            raw = txn.get(name.encode(), db=self._notes)
        return None if raw is None else dict(json.loads(bytes(raw)))

    def notes(self, prefix: str) -> Iterator[tuple[str, dict[str, Any]]]:
        """The notes whose names start with `prefix`, in name order."""
        start = prefix.encode()
        with self._env.begin() as txn:
            cursor = txn.cursor(db=self._notes)
            rows = []
            if cursor.set_range(start):
                for key, value in cursor:
                    if not bytes(key).startswith(start):
                        break
                    rows.append((bytes(key).decode(), bytes(value)))
        for name, raw in rows:
            yield name, dict(json.loads(raw))

    def delete_note(self, name: str) -> None:
        with self._env.begin(write=True) as txn:
            txn.delete(name.encode(), db=self._notes)

    def put(self, key: Key, record: dict[str, Any]) -> None:
        """Committed and synced, with the records put lazily before it."""
        raw_key = _key(key)
        with self._lazy_lock:
            self._lazy.pop(raw_key, None)  # this record supersedes it
        self._commit({raw_key: json.dumps(record, sort_keys=True).encode()})

    def put_lazily(self, key: Key, record: dict[str, Any]) -> None:
        """Read back at once, committed with the next `put` (or at close): a change a crash may lose."""
        with self._lazy_lock:
            self._lazy[_key(key)] = json.dumps(record, sort_keys=True).encode()

    def _commit(self, rows: dict[bytes, bytes], deleted: tuple[bytes, ...] = ()) -> None:
        with self._writing:
            with self._lazy_lock:
                pending = dict(self._lazy)
            with self._env.begin(write=True) as txn:
                for raw_key, raw in (*pending.items(), *rows.items()):
                    txn.put(raw_key, raw, db=self._db)
                for raw_key in deleted:
                    txn.delete(raw_key, db=self._db)
            with self._lazy_lock:  # until now get() read them here; the store has them now
                for raw_key, raw in pending.items():
                    if self._lazy.get(raw_key) is raw:
                        del self._lazy[raw_key]
                for raw_key in deleted:
                    self._lazy.pop(raw_key, None)

    def get(self, key: Key) -> dict[str, Any] | None:
        raw_key = _key(key)
        with self._lazy_lock:
            raw: bytes | None = self._lazy.get(raw_key)
        if raw is None:
            with self._env.begin() as txn:
                stored = txn.get(raw_key, db=self._db)
            raw = None if stored is None else bytes(stored)
        return None if raw is None else dict(json.loads(raw))

    def items(self) -> Iterator[tuple[Key, dict[str, Any]]]:
        with self._lazy_lock:
            lazy = dict(self._lazy)
        with self._env.begin() as txn:
            rows = {bytes(k): bytes(v) for k, v in txn.cursor(db=self._db)}
        rows.update(lazy)
        for raw_key in sorted(rows):
            job, attempt = raw_key.decode().split(".")
            yield (int(job), int(attempt)), dict(json.loads(rows[raw_key]))

    def prune_acked(self) -> None:
        acked = [key for key, record in self.items() if record.get("acked")]
        if len(acked) <= self.keep_acked:
            return
        acked.sort()
        self._commit({}, tuple(_key(key) for key in acked[:len(acked) - self.keep_acked]))

    def close(self) -> None:
        if self._lazy:
            self._commit({})
        self._env.close()


class JournalStore(Protocol):
    """What the executor needs of a journal: the LMDB one, or MemoryJournal."""

    def put(self, key: Key, record: dict[str, Any]) -> None: ...

    def put_lazily(self, key: Key, record: dict[str, Any]) -> None: ...

    def get(self, key: Key) -> dict[str, Any] | None: ...

    def items(self) -> Iterator[tuple[Key, dict[str, Any]]]: ...

    def prune_acked(self) -> None: ...

    def put_note(self, name: str, note: dict[str, Any]) -> None: ...

    def get_note(self, name: str) -> dict[str, Any] | None: ...

    def notes(self, prefix: str) -> Iterator[tuple[str, dict[str, Any]]]: ...

    def delete_note(self, name: str) -> None: ...

    def close(self) -> None: ...


class MemoryJournal:
    """The journal without LMDB, for simulations: records as JSON, in key order.

    Records are kept as JSON text, as the LMDB journal keeps them, so what
    a record can hold is the same in both.
    """

    def __init__(self, keep_acked: int = KEEP_ACKED) -> None:
        self._rows: dict[bytes, str] = {}
        self._notes: dict[str, str] = {}
        self.keep_acked = keep_acked

    def put_note(self, name: str, note: dict[str, Any]) -> None:
        self._notes[name] = json.dumps(note, sort_keys=True)

    def get_note(self, name: str) -> dict[str, Any] | None:
        raw = self._notes.get(name)
        return None if raw is None else dict(json.loads(raw))

    def notes(self, prefix: str) -> Iterator[tuple[str, dict[str, Any]]]:
        for name in sorted(n for n in self._notes if n.startswith(prefix)):
            yield name, dict(json.loads(self._notes[name]))

    def delete_note(self, name: str) -> None:
        self._notes.pop(name, None)

    def put(self, key: Key, record: dict[str, Any]) -> None:
        self._rows[_key(key)] = json.dumps(record, sort_keys=True)

    put_lazily = put

    def get(self, key: Key) -> dict[str, Any] | None:
        raw = self._rows.get(_key(key))
        return None if raw is None else dict(json.loads(raw))

    def items(self) -> Iterator[tuple[Key, dict[str, Any]]]:
        for raw_key in sorted(self._rows):
            job, attempt = raw_key.decode().split(".")
            yield (int(job), int(attempt)), dict(json.loads(self._rows[raw_key]))

    def prune_acked(self) -> None:
        acked = sorted(key for key, record in self.items() if record.get("acked"))
        for key in acked[:max(0, len(acked) - self.keep_acked)]:
            del self._rows[_key(key)]

    def close(self) -> None:
        pass
