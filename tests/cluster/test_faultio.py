"""faultio, the disk-fault shim, on small child processes: delays that follow the control file, and
power loss that leaves exactly what was synced (plain files, LMDB, the worker's journal)."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import lmdb
import pytest

from soak import faultio
from worker.journal import Journal

pytestmark = pytest.mark.cluster  # child processes and a compiler: not the pure tier

ROOT = Path(__file__).resolve().parents[2]
DEADLINE_S = 20.0  # only a broken build waits this long for a child


class Child:
    """A Python child under the shim, driven line by line over stdin and stdout."""

    def __init__(self, code: str, env: dict[str, str], *args: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *args],
                                     env={**os.environ, "PYTHONPATH": str(ROOT), **env}, cwd=ROOT,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def say(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def hear(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, f"the child exited ({self.proc.wait(timeout=DEADLINE_S)}) without answering"
        return line.strip()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=DEADLINE_S)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()


@contextmanager
def child(code: str, env: dict[str, str], *args: str) -> Iterator[Child]:
    c = Child(code, env, *args)
    try:
        yield c
    finally:
        c.kill()


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    """(control, data): the shim's control directory and the one directory it affects."""
    data = tmp_path / "data"
    data.mkdir()
    return tmp_path / "control", data


FILES = """
    import os, sys
    data, other = sys.argv[1], sys.argv[2]
    fd = os.open(f"{data}/f", os.O_RDWR | os.O_CREAT, 0o600)
    os.write(fd, b"A" * 100)
    os.fsync(fd)
    os.write(fd, b"B" * 50)                       # grows the file, unsynced
    os.pwrite(fd, b"C" * 10, 20)                  # overwrites synced bytes, unsynced
    os.writev(fd, [b"D" * 5, b"E" * 5])
    g = os.open(f"{data}/g", os.O_RDWR | os.O_CREAT, 0o600)
    os.write(g, b"G" * 64)
    os.fdatasync(g)
    os.ftruncate(g, 10)                           # a cut never synced
    with open(f"{data}/h", "wb") as h:            # created and written, never synced
        h.write(b"H" * 30)
    t = os.open(f"{data}/t", os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(t, b"T" * 40)
    os.fsync(t)
    os.close(t)
    t = os.open(f"{data}/t", os.O_WRONLY | os.O_TRUNC)   # truncated on open, never synced
    os.write(t, b"U" * 3)
    o = os.open(other, os.O_RDWR | os.O_CREAT, 0o600)
    os.write(o, b"O" * 20)                        # outside the affected paths
    print("ready", flush=True)
    sys.stdin.readline()
"""


def test_power_loss_keeps_exactly_the_synced_bytes(dirs: tuple[Path, Path], tmp_path: Path) -> None:
    control, data = dirs
    other = tmp_path / "other"
    with child(FILES, faultio.environment(control, [data], power_loss=True), str(data), str(other)) as c:
        assert c.hear() == "ready"
        c.kill()
    report = faultio.power_loss(control)
    assert (data / "f").read_bytes() == b"A" * 100
    assert (data / "g").read_bytes() == b"G" * 64
    assert (data / "h").read_bytes() == b""  # directory entries are kept; the data was never synced
    assert (data / "t").read_bytes() == b"T" * 40
    assert other.read_bytes() == b"O" * 20  # unaffected: a process crash keeps the page cache
    assert set(report.files) == {data / "f", data / "g", data / "h", data / "t"}
    assert report.bytes_dropped == 50 + 10 + 10 + 54 + 30 + 40 + 3
    assert report.journals == 1 and not report.missing
    assert not list(control.glob("undo-*"))  # applied once: a second power loss changes nothing
    assert faultio.power_loss(control).records == 0


TIMED_FSYNC = """
    import os, sys, time
    fds = {name: os.open(path, os.O_RDWR | os.O_CREAT, 0o600) for name, path in zip("ao", sys.argv[1:])}
    for line in sys.stdin:
        name, want = line.split()            # fsync until one takes at least / less than `want`
        while True:
            os.write(fds[name], b"x")
            start = time.monotonic()
            os.fsync(fds[name])
            took = time.monotonic() - start
            if (took >= float(want)) if want[0] != "<" else (took < float(want[1:])):
                break
        print(f"{took:.3f}", flush=True)
"""


def test_fsync_stall_follows_the_control_file_without_restart(dirs: tuple[Path, Path],
                                                              tmp_path: Path) -> None:
    control, data = dirs
    with child(TIMED_FSYNC, faultio.environment(control, [data]), str(data / "a"), str(tmp_path / "o")) as c:
        c.say("a <0.1")
        assert float(c.hear()) < 0.1
        faultio.set_delays(control, fsync_ms=300)
        c.say("a 0.3")  # within ~50 ms the shim sees the file, and every fsync of `a` takes 0.3 s
        assert float(c.hear()) >= 0.3
        start = time.monotonic()
        c.say("o <0.1")  # another file, outside the affected paths: fast while `a` stalls
        assert float(c.hear()) < 0.1 and time.monotonic() - start < 0.3
        faultio.set_delays(control, fsync_ms=0)
        c.say("a <0.1")
        assert float(c.hear()) < 0.1


ONE_FSYNC = """
    import os, sys, time
    fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
    os.write(fd, b"x")
    print("syncing", flush=True)
    start = time.monotonic()
    os.fsync(fd)
    print(f"{time.monotonic() - start:.3f}", flush=True)
"""


def test_clearing_a_stall_releases_the_fsync_waiting_in_it(dirs: tuple[Path, Path]) -> None:
    control, data = dirs
    env = faultio.environment(control, [data])
    faultio.set_delays(control, fsync_ms=60_000)
    with child(ONE_FSYNC, env, str(data / "a")) as c:
        assert c.hear() == "syncing"
        assert c.proc.stdout is not None
        ready, _, _ = select.select([c.proc.stdout], [], [], 0.3)
        assert not ready  # stalled for 0.3 s at least, of the minute it would wait
        cleared = time.monotonic()
        faultio.set_delays(control, fsync_ms=0)
        assert float(c.hear()) >= 0.3
        assert time.monotonic() - cleared < 0.5  # released within ~0.1 s of the change


LMDB_WRITER = """
    import lmdb, sys
    env = lmdb.open(sys.argv[1], map_size=1 << 26, max_dbs=2, sync=sys.argv[2] == "sync", metasync=True)
    db = env.open_db(b"t")
    synced_at = int(sys.argv[3])                  # without sync: one real sync after this commit
    for i in range(100_000):
        with env.begin(write=True) as txn:
            txn.put(b"k%06d" % i, b"v%d" % i * 50, db=db)
        if i == synced_at:
            env.sync(True)
        print(i, flush=True)                      # committed: the commit returned
        if sys.argv[2] != "sync" and i == synced_at + 20:
            sys.stdin.readline()                  # no more writes, nothing syncs them
"""


def lmdb_keys(path: Path) -> list[bytes]:
    """Every key, after a full walk of the tree: the environment opens and reads cleanly."""
    env = lmdb.open(str(path), max_dbs=2, readonly=False)
    try:
        db = env.open_db(b"t")
        with env.begin() as txn:
            keys = [bytes(k) for k, v in txn.cursor(db=db) if bytes(v).startswith(b"v")]
        copy = path.parent / "copy"
        copy.mkdir()
        env.copy(str(copy), compact=True)  # mdb_env_copy2 walks every page
        return keys
    finally:
        env.close()


def test_lmdb_synced_commits_survive_power_loss(dirs: tuple[Path, Path]) -> None:
    control, data = dirs
    env = faultio.environment(control, [data], power_loss=True)
    with child(LMDB_WRITER, env, str(data), "sync", "-1") as c:
        committed = -1
        while committed < 150:  # then killed while it goes on committing
            committed = int(c.hear())
        c.kill()
    report = faultio.power_loss(control)
    keys = lmdb_keys(data)
    assert keys[:committed + 1] == [b"k%06d" % i for i in range(committed + 1)]  # every commit returned
    assert len(keys) <= committed + 2  # at most the one in flight at the kill
    assert report.files  # the lock file at least


def test_lmdb_without_sync_loses_acknowledged_commits(dirs: tuple[Path, Path]) -> None:
    """The contrast that shows the layer bites: an ack before fsync loses what was acknowledged."""
    control, data = dirs
    env = faultio.environment(control, [data], power_loss=True)
    with child(LMDB_WRITER, env, str(data), "nosync", "30") as c:
        while int(c.hear()) < 50:
            pass
        c.kill()  # 20 commits acknowledged after the last sync
    report = faultio.power_loss(control)
    assert lmdb_keys(data) == [b"k%06d" % i for i in range(31)]  # exactly what env.sync covered
    assert report.bytes_dropped > 0


JOURNAL_WRITER = """
    import sys
    from pathlib import Path
    from worker.journal import Journal
    journal = Journal(Path(sys.argv[1]))
    for i in range(100_000):
        journal.put((i, 1), {"state": "running", "pid": 1000 + i})
        journal.put_note(f"fence-{i}", {"clock": i})
        print(i, flush=True)
"""


def test_worker_journal_records_survive_power_loss(dirs: tuple[Path, Path]) -> None:
    control, data = dirs
    path = data / "journal"
    with child(JOURNAL_WRITER, faultio.environment(control, [data], power_loss=True), str(path)) as c:
        recorded = -1
        while recorded < 60:
            recorded = int(c.hear())
        c.kill()
    faultio.power_loss(control)
    journal = Journal(path)
    try:
        items = dict(journal.items())
        for i in range(recorded + 1):
            assert items[i, 1] == {"state": "running", "pid": 1000 + i}
            assert journal.get_note(f"fence-{i}") == {"clock": i}
    finally:
        journal.close()


APPENDER = """
    import os, sys
    fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
    os.lseek(fd, 0, os.SEEK_END)
    for line in sys.stdin:
        what, n = line.split()
        if what == "write":
            for _ in range(int(n)):
                os.write(fd, b"w" * 1000)
        elif what == "rewrite":                   # over the first 1000 bytes: pre-images to keep
            for _ in range(int(n)):
                os.pwrite(fd, b"r" * 1000, 0)
        else:
            os.fsync(fd)
        print(os.fstat(fd).st_size, flush=True)
"""


def test_a_crashed_process_unsynced_writes_are_adopted_by_the_next(dirs: tuple[Path, Path]) -> None:
    """A plain crash keeps the page cache: the next process's fsync makes the old writes durable,
    and until it does, a power loss still drops them."""
    control, data = dirs
    env = faultio.environment(control, [data], power_loss=True)
    path = data / "log"
    for sync_in_second in (False, True):
        with child(APPENDER, env, str(path)) as c:
            c.say("write 3")
            before = int(c.hear())
        with child(APPENDER, env, str(path)) as c:
            c.say("write 2")
            c.hear()
            if sync_in_second:
                c.say("fsync 0")
                c.hear()
        assert len(list(control.glob("undo-*"))) == 1  # the second adopted the first's journal
        faultio.power_loss(control)
        assert path.stat().st_size == (before + 2000 if sync_in_second else before - 3000)


def test_a_compacted_journal_still_undoes_what_is_pending(dirs: tuple[Path, Path]) -> None:
    control, data = dirs
    env = {**faultio.environment(control, [data], power_loss=True), "XCE_FAULTIO_COMPACT_BYTES": "65536"}
    pending = data / "pending"
    with child(APPENDER, env, str(pending)) as c:
        c.say("write 5")  # pending across the compactions
        c.hear()
    with child(APPENDER, env, str(data / "busy")) as c:  # adopts `pending`'s records, then churns
        c.say("write 1")
        c.hear()
        for _ in range(20):
            c.say("rewrite 30")
            c.hear()
            c.say("fsync 0")
            size = int(c.hear())
        c.say("write 1")
        c.hear()
        journal = next(control.glob("undo-*.log"))
        assert journal.stat().st_size < 200_000  # 650 kB recorded, most of it synced since
    faultio.power_loss(control)
    assert pending.read_bytes() == b""
    assert (data / "busy").read_bytes() == b"r" * 1000 and size == 1000


def test_power_loss_refuses_while_the_process_runs(dirs: tuple[Path, Path]) -> None:
    control, data = dirs
    with child(APPENDER, faultio.environment(control, [data], power_loss=True), str(data / "f")) as c:
        c.say("write 1")
        c.hear()
        with pytest.raises(faultio.FaultioError, match="still run"):
            faultio.power_loss(control)


def test_power_loss_needs_tracking_and_a_control_dir_outside_the_paths(dirs: tuple[Path, Path]) -> None:
    control, data = dirs
    faultio.environment(control, [data])
    with pytest.raises(faultio.FaultioError, match="power_loss=True"):
        faultio.power_loss(control)
    with pytest.raises(ValueError, match="under an affected path"):
        faultio.environment(data / "control", [data])
    with pytest.raises(ValueError):
        faultio.set_delays(control, fsync_ms=-1)


def test_environment_appends_to_an_existing_preload(dirs: tuple[Path, Path],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    control, data = dirs
    monkeypatch.setenv("LD_PRELOAD", "/lib/other.so")
    env = faultio.environment(control, [data])
    assert env["LD_PRELOAD"] == f"/lib/other.so {faultio.library()}"
    assert env["XCE_FAULTIO_PATHS"] == str(data.resolve())


THREADS = """
    import os, random, sys, threading
    fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
    os.write(fd, bytes(range(256)) * 64)
    os.fsync(fd)

    def scribble(seed):
        rng = random.Random(seed)
        for _ in range(2000):
            at = rng.randrange(0, 20_000)
            os.pwrite(fd, bytes([seed]) * rng.randrange(1, 3000), at)

    threads = [threading.Thread(target=scribble, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("ready", flush=True)
    sys.stdin.readline()
"""


def test_concurrent_overlapping_writes_are_undone_in_the_order_they_happened(dirs: tuple[Path, Path]) -> None:
    control, data = dirs
    with child(THREADS, faultio.environment(control, [data], power_loss=True), str(data / "f")) as c:
        assert c.hear() == "ready"
    faultio.power_loss(control)
    assert (data / "f").read_bytes() == bytes(range(256)) * 64


def test_a_machine_without_gcc_is_told_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from soak.faultio import build

    monkeypatch.setenv("XCE_FAULTIO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr("shutil.which", lambda name: None)
    with pytest.raises(faultio.FaultioBuildError, match="gcc is not on PATH"):
        build.build()
