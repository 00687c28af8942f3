"""Disk faults on real processes: faultio, an LD_PRELOAD shim (faultio.c), and its driver.

Theory of operation. A daemon started with `environment(control, paths)` loads the shim; only
files under `paths` are affected, and `control` (a directory outside them) is how the two talk:
- `ctl`, written by `set_delays`: every fsync/fdatasync/msync/sync_file_range of an affected
  file sleeps `fsync_ms` first (fsync-stall, slow-disk), every write `write_ms`. The shim looks
  at the file at most every 50 ms, so a delay starts and ends without a restart.
- `undo-<pid>-<start>.log`, written by the shim when started with `power_loss=True`: before each
  change to an affected file, the bytes it overwrites and the size before; a sync of the file
  discards its records. After the process was killed (SIGKILL), `power_loss(control)` applies the
  records left, newest first: every file is as it was when it was last synced, which is exactly
  what a machine that lost its power keeps (in the spirit of Jepsen's lazyfs).
See faultio.c's opening comment for what is and is not modelled.
"""

from __future__ import annotations

import os
import stat
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from soak.faultio.build import FaultioBuildError
from soak.faultio.build import build as compile_library

__all__ = ["FaultioBuildError", "FaultioError", "PowerLossReport", "environment", "library", "power_loss",
           "set_delays"]

CTL = "ctl"
TRACKING = "tracking"  # marks a control directory whose processes keep undo journals
JOURNAL_GLOB = "undo-*.log"
BROKEN_GLOB = "broken-*"
MAX_DELAY_MS = 3_600_000  # the shim takes longer delays as an hour

# The journal's layout (faultio.c: struct journal_head, struct rec), native byte order.
_HEAD = struct.Struct("=8sIIQII")
_REC = struct.Struct("=IIQQQQqqQQII")
_JOURNAL_MAGIC = b"FAULTIO1"
_REC_MAGIC = 0x52494F46
_UNDO, _SYNC, _SYNC_ALL, _SYNC_DEV = 1, 2, 3, 4


class FaultioError(RuntimeError):
    """A power loss cannot be applied: a process still runs, or the shim could not keep its journal."""


@dataclass(frozen=True)
class PowerLossReport:
    files: tuple[Path, ...]           # files changed back to their last synced state
    bytes_dropped: int                # bytes written (or truncated) and never synced, undone
    records: int                      # undo records applied
    journals: int                     # process journals read (each deleted afterwards)
    missing: tuple[str, ...] = ()     # files with unsynced writes that no longer exist (unlinked)


@dataclass(frozen=True)
class _Undo:
    seq: int
    dev: int
    ino: int
    off: int
    old_size: int
    length: int
    path: str
    data: bytes


@dataclass
class _Journal:
    path: Path
    pid: int
    start_ticks: int
    prefixes: tuple[Path, ...]
    undo: list[_Undo] = field(default_factory=list)


def library() -> Path:
    """The shim's shared library, compiled with gcc on first use (soak/faultio/build.py)."""
    return compile_library()


def environment(control: Path, paths: Sequence[Path], *, power_loss: bool = False) -> dict[str, str]:
    """The variables that put a process under the shim (to merge over its environment): LD_PRELOAD
    (after any already in this process's), XCE_FAULTIO_DIR and XCE_FAULTIO_PATHS. With `power_loss`,
    it keeps undo journals, so `power_loss(control)` can drop its unsynced writes later."""
    control = Path(control).resolve()
    prefixes = [Path(p).resolve() for p in paths]
    if not prefixes:
        raise ValueError("faultio needs at least one path prefix to affect")
    for prefix in prefixes:
        if ":" in str(prefix):
            raise ValueError(f"faultio path prefixes are ':'-separated; {prefix} contains one")
        if control == prefix or prefix in control.parents:
            raise ValueError(f"the control directory {control} lies under an affected path {prefix}")
    control.mkdir(parents=True, exist_ok=True)
    if not (control / CTL).exists():
        set_delays(control)
    if power_loss:
        (control / TRACKING).touch()
    lib = str(library())
    existing = [p for p in os.environ.get("LD_PRELOAD", "").replace(":", " ").split() if p != lib]
    return {"LD_PRELOAD": " ".join([*existing, lib]), "XCE_FAULTIO_DIR": str(control),
            "XCE_FAULTIO_PATHS": ":".join(str(p) for p in prefixes),
            "XCE_FAULTIO_UNDO": "1" if power_loss else "0"}


def set_delays(control: Path, fsync_ms: int = 0, write_ms: int = 0) -> None:
    """From now on (within ~50 ms), every sync of an affected file waits `fsync_ms` and every
    write `write_ms`, in every process of `control`; 0 and 0 end the delays."""
    for name, value in (("fsync_ms", fsync_ms), ("write_ms", write_ms)):
        if not 0 <= value <= MAX_DELAY_MS:
            raise ValueError(f"{name} must be within 0..{MAX_DELAY_MS}, not {value}")
    control = Path(control)
    tmp = control / f"{CTL}.{os.getpid()}.tmp"
    tmp.write_text(f"fsync_ms={int(fsync_ms)} write_ms={int(write_ms)}\n")
    os.replace(tmp, control / CTL)  # a new inode: the shim cannot miss the change


def power_loss(control: Path) -> PowerLossReport:
    """Drop everything the processes of `control` wrote to affected files and did not sync.
    Every one of them must be dead (SIGKILL); their journals are applied newest process first
    and deleted, so the next process starts from the files a power loss would have left."""
    control = Path(control)
    broken = sorted(control.glob(BROKEN_GLOB))
    if broken:
        why = "; ".join(p.read_text(errors="replace").strip() for p in broken)
        raise FaultioError(f"the shim could not keep its undo journal, a power loss would be wrong: {why}")
    journals = [_read_journal(p) for p in sorted(control.glob(JOURNAL_GLOB))]
    if not journals and not (control / TRACKING).exists():
        raise FaultioError(f"{control}: no undo journal; start the process with "
                           "environment(..., power_loss=True) to keep one")
    running = [j.pid for j in journals if _start_ticks(j.pid) == j.start_ticks and j.start_ticks]
    if running:
        raise FaultioError(f"process(es) {running} still run; a power loss needs them dead (SIGKILL)")
    touched: dict[Path, None] = {}
    missing: dict[str, None] = {}
    dropped = records = 0
    for journal in sorted(journals, key=lambda j: j.start_ticks, reverse=True):
        located = _Locator(journal.prefixes)
        for undo in sorted(journal.undo, key=lambda u: u.seq, reverse=True):
            path = located.find(undo)
            if path is None:
                missing[undo.path] = None
                continue
            _restore(path, undo)
            touched[path] = None
            dropped += undo.length
            records += 1
    for journal in journals:
        journal.path.unlink()
    return PowerLossReport(files=tuple(touched), bytes_dropped=dropped, records=records,
                           journals=len(journals), missing=tuple(missing))


# ------------------------------------------------------------------ helpers


def _restore(path: Path, undo: _Undo) -> None:
    """The file as it was before the change `undo` records: its pre-image back, its size back."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    except PermissionError:  # a read-only file of ours: writable for the moment
        mode = stat.S_IMODE(path.stat().st_mode)
        path.chmod(mode | stat.S_IWUSR)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        finally:
            path.chmod(mode)
    try:
        if undo.data:
            os.pwrite(fd, undo.data, undo.off)
        os.ftruncate(fd, undo.old_size)
    finally:
        os.close(fd)


class _Locator:
    """A file by device and inode: at the path it was written under, else anywhere under the
    affected prefixes (renamed since); None if it is gone."""

    def __init__(self, prefixes: tuple[Path, ...]) -> None:
        self.prefixes = prefixes
        self._index: dict[tuple[int, int], Path] | None = None

    def find(self, undo: _Undo) -> Path | None:
        try:
            st = os.stat(undo.path)
            if (st.st_dev, st.st_ino) == (undo.dev, undo.ino):
                return Path(undo.path)
        except OSError:
            pass
        if self._index is None:
            self._index = dict(self._walk())
        return self._index.get((undo.dev, undo.ino))

    def _walk(self) -> Iterator[tuple[tuple[int, int], Path]]:
        for prefix in self.prefixes:
            if prefix.is_file():
                st = prefix.stat()
                yield (st.st_dev, st.st_ino), prefix
            for root, _dirs, files in os.walk(prefix):
                for name in files:
                    path = Path(root) / name
                    try:
                        st = path.lstat()
                    except OSError:
                        continue
                    if stat.S_ISREG(st.st_mode):
                        yield (st.st_dev, st.st_ino), path


def _read_journal(path: Path) -> _Journal:
    """A journal's header and its undo records still pending (syncs applied); a torn tail (the
    process killed while appending, before the change it was about) is left out."""
    raw = path.read_bytes()
    if len(raw) < _HEAD.size:
        raise FaultioError(f"{path}: not a faultio journal (too short)")
    magic, _version, pid, start_ticks, prefixes_len, _ = _HEAD.unpack_from(raw)
    if magic != _JOURNAL_MAGIC:
        raise FaultioError(f"{path}: not a faultio journal")
    at = _HEAD.size + prefixes_len
    prefixes = tuple(Path(p) for p in raw[_HEAD.size:at].decode().split(":") if p)
    journal = _Journal(path, pid, start_ticks, prefixes)
    synced_all = 0
    synced_file: dict[tuple[int, int], int] = {}
    synced_dev: dict[int, int] = {}
    while at + _REC.size <= len(raw):
        (magic, kind, total, seq, dev, ino, off, old_size, length, data_len, path_len,
         _) = _REC.unpack_from(raw, at)
        if magic != _REC_MAGIC or total != _REC.size + path_len + data_len or at + total > len(raw):
            break
        body = at + _REC.size
        if kind == _UNDO:
            name = raw[body:body + path_len].decode(errors="surrogateescape")
            data = raw[body + path_len:body + path_len + data_len]
            journal.undo.append(_Undo(seq, dev, ino, off, old_size, length, name, data))
        elif kind == _SYNC:
            synced_file[dev, ino] = max(off, synced_file.get((dev, ino), 0))
        elif kind == _SYNC_DEV:
            synced_dev[dev] = max(off, synced_dev.get(dev, 0))
        elif kind == _SYNC_ALL:
            synced_all = max(synced_all, off)
        at += total
    journal.undo = [u for u in journal.undo
                    if u.seq >= max(synced_all, synced_file.get((u.dev, u.ino), 0), synced_dev.get(u.dev, 0))]
    return journal


def _start_ticks(pid: int) -> int:
    """Process `pid`'s start time (clock ticks since boot); 0 if it is gone or a zombie."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    fields = text.rsplit(")", 1)[1].split()
    return 0 if fields[0] in ("Z", "X") else int(fields[19])
