"""Files only their owner may read: state, logs of jobs' environments, keys, tokens.

The state holds every job's environment and command, the keys and tokens
prove identities: each is created with its final mode from the first byte
(no window at the umask's mode), and an existing one of an older build is
tightened when it is opened again.
"""

from __future__ import annotations

import os
from pathlib import Path

LMDB_FILES = ("data.mdb", "lock.mdb")


def private_dir(path: Path) -> Path:
    """`path` as a directory only its owner may use (0700), made if missing."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.chmod(0o700)
    return path


def private_lmdb(path: Path) -> Path:
    """An LMDB environment's directory, 0700, and its files 0600 if they exist already."""
    private_dir(path)
    for name in LMDB_FILES:
        try:
            (path / name).chmod(0o600)
        except FileNotFoundError:
            pass
    return path


def open_private(path: Path | str) -> int:
    """A file descriptor of `path`, created or truncated, 0600 from the first byte."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    os.fchmod(fd, 0o600)
    return fd


def write_private(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Create (or replace, atomically) the file, readable by its owner only (or with `mode`, from
    the first byte too)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = open_private(tmp)
    os.fchmod(fd, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
