"""Compiling the faultio shim: gcc, once per version of faultio.c, into a cache directory.

The library is named for the SHA-256 of its source (`faultio-<sha>.so`), so an edited shim is
built afresh and an unchanged one never again. It is compiled to a temporary name beside its
final one and renamed into place: processes building it at once each get a whole library.
The cache is `<venv>/lib/faultio/` (XCE_FAULTIO_CACHE overrides it).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

SOURCE = Path(__file__).with_name("faultio.c")
CFLAGS = ("-O2", "-g", "-shared", "-fPIC", "-Wall", "-Wextra", "-Wno-unused-parameter")
LIBS = ("-ldl", "-lpthread")
COMPILE_TIMEOUT_S = 120.0


class FaultioBuildError(RuntimeError):
    """The shim could not be compiled (no gcc, or gcc refused the source)."""


def cache_dir() -> Path:
    override = os.environ.get("XCE_FAULTIO_CACHE")
    return Path(override) if override else Path(sys.prefix) / "lib" / "faultio"


def own_dir(folder: Path) -> Path:
    """`folder`, made if missing, refused unless it is a real directory (no symlink) of this user's that
    no one else may write: a library loaded into every daemon must not come from where others could
    put one."""
    folder.mkdir(mode=0o755, parents=True, exist_ok=True)
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
        raise FaultioBuildError(f"{folder} is not a directory of this user's alone (a symlink, another "
                                "owner, or writable by others): remove it")
    return folder


def library_path(source: Path = SOURCE) -> Path:
    """Where the library built from `source` is (or will be)."""
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    return cache_dir() / f"faultio-{digest}.so"


def build(source: Path = SOURCE) -> Path:
    """The shared library compiled from `source`, compiling it if it is not in the cache."""
    target = library_path(source)
    own_dir(target.parent)
    if target.exists():
        return target
    gcc = shutil.which("gcc")
    if gcc is None:
        raise FaultioBuildError("faultio compiles its LD_PRELOAD shim with gcc, and gcc is not on PATH "
                                "(install it: apt-get install gcc)")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    try:
        done = subprocess.run([gcc, *CFLAGS, "-o", str(tmp), str(source), *LIBS], capture_output=True,
                              text=True, timeout=COMPILE_TIMEOUT_S)
        if done.returncode != 0:
            raise FaultioBuildError(f"gcc failed on {source} (exit {done.returncode}):\n{done.stderr}")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target
