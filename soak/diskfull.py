"""A replica's own small filesystem, which the soak fills to the last byte and then empties.

Each replica's directory (its Raft log and state, both LMDB) is a tmpfs of its own with a size
(`mount -t tmpfs -o size=...`), so a full disk is real: every write that needs a new block gets
ENOSPC from the kernel, whoever makes it. `fill()` writes a ballast file until the filesystem
refuses; `release()` deletes it. Needs root (mount); `available()` says why not.
"""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

SIZE_MB = 256
CHUNK = 1 << 20
BALLAST = "ballast.soak"


def available() -> str | None:
    if os.geteuid() != 0:
        return "a filesystem of a replica's own needs root (mount)"
    return None


def mount(path: Path, size_mb: int = SIZE_MB) -> None:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,mode=0700", "tmpfs", str(path)],
                   check=True, capture_output=True, timeout=30)


def unmount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)


def fill(path: Path) -> int:
    """Write the ballast until the filesystem is full; the bytes written."""
    written = 0
    chunk = b"\0" * CHUNK
    with open(path / BALLAST, "ab", buffering=0) as out:
        while True:
            try:
                written += out.write(chunk) or 0
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                if len(chunk) == 1:
                    return written
                chunk = chunk[: len(chunk) // 2]  # the last partial block too: nothing left


def release(path: Path) -> None:
    (path / BALLAST).unlink(missing_ok=True)


def free_bytes(path: Path) -> int:
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize
