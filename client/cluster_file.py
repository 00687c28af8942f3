"""What a client reads of the cluster file: the replicas' gRPC addresses (controller/config.py reads
the rest, on replica hosts), and where it last found the leader.

The command line reads the file through `client_table`, which keeps the parsed table in
`$XDG_CACHE_HOME/xce/cluster-<CRC-32 of its path>.json` beside the file's inode, times and size:
parsing TOML costs ~8 ms of every command (tomllib's start), a JSON copy ~1. A copy whose stamp
differs from the file's is parsed again; one not this user's own, or writable by others, is
ignored (it says where the CLI connects and which CA it trusts).

The leader cache (`$XDG_CACHE_HOME/xce/leader-<CRC-32 of the addresses>`) holds the address of the
replica that answered the last command as leader, so the next command goes there first; a wrong
cache costs one redirect (a follower names the leader), a missing or unreadable one nothing.
"""

from __future__ import annotations

import os
import time
import zlib

TYPE_CHECKING = False  # not typing's: importing it is ~2 ms of every command's start
if TYPE_CHECKING:
    from typing import Any

StrPath = str | os.PathLike[str]  # paths as str: pathlib costs a command ~5 ms to import

RACY_S = 2.0
_TABLES: dict[str, dict[str, Any]] = {}  # this process's reads, by real path and stamp


def read_toml(path: StrPath, error: type[Exception], what: str) -> dict[str, Any]:
    """The file's TOML table, or `error` saying plainly what is wrong."""
    import tomllib

    try:
        with open(path, encoding="utf-8") as f:
            return tomllib.loads(f.read())
    except FileNotFoundError as exc:
        raise error(f"no {what} at {path}") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise error(f"{path}: not valid TOML: {exc}") from exc
    except RecursionError:
        raise error(f"{path}: not valid TOML: nested too deeply") from None
    except OSError as exc:
        raise error(f"cannot read {path}: {exc.strerror or exc}") from None


def client_table(path: StrPath, error: type[Exception], what: str = "cluster file") -> dict[str, Any]:
    """read_toml, through this process's copy and the user's cache (module docstring)."""
    real = os.path.realpath(path)
    try:
        info = os.stat(real)
    except FileNotFoundError:
        raise error(f"no {what} at {path}") from None
    except OSError as exc:
        raise error(f"cannot read the {what} {path}: {exc.strerror or exc}") from None
    stamp = [info.st_ino, info.st_mtime_ns, info.st_ctime_ns, info.st_size]
    key = f"{real}\0{stamp}"
    if key in _TABLES:
        return _TABLES[key]
    import json

    cache = os.path.join(_cache_dir(), f"cluster-{zlib.crc32(real.encode()):08x}.json")
    table = _cached_table(cache, real, stamp, json)
    if table is None:
        table = client_part(read_toml(real, error, what))
        try:
            text = json.dumps({"path": real, "stamp": stamp, "table": table})
        except (TypeError, ValueError):  # TOML dates have no JSON: parse every time
            text = None
        # A file changed within the file system's clock tick of this read could change again with
        # the same stamp (git's "racy" entries): only an older one's copy is kept.
        if text is not None and time.time() - info.st_mtime_ns / 1e9 > RACY_S:
            _write_private(cache, text)
    _TABLES[key] = table
    return table


def client_part(table: dict[str, Any]) -> dict[str, Any]:
    """What a client reads of the cluster file (the replicas' addresses, [tls], [auth] munge), and
    nothing else: a file on a replica host may hold the cluster's password, which no cache copies."""
    part: dict[str, Any] = {}
    replicas = table.get("replicas")
    if isinstance(replicas, list):
        part["replicas"] = [{"grpc": r.get("grpc")} if isinstance(r, dict) else r for r in replicas]
    if "tls" in table:
        tls = table["tls"]
        part["tls"] = {k: tls[k] for k in ("ca", "client_cert", "client_key", "insecure") if k in tls} \
            if isinstance(tls, dict) else tls
    auth = table.get("auth")
    if isinstance(auth, dict) and "munge" in auth:
        part["auth"] = {"munge": auth["munge"]}
    return part


def _cached_table(cache: str, real: str, stamp: list[int], json: Any) -> dict[str, Any] | None:
    try:
        fd = os.open(cache, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, encoding="utf-8") as f:
        info = os.fstat(f.fileno())
        if info.st_uid != os.geteuid() or info.st_mode & 0o022:
            return None
        try:
            found = json.loads(f.read())
        except (ValueError, UnicodeDecodeError):
            return None
    if not isinstance(found, dict) or found.get("path") != real or found.get("stamp") != stamp \
            or not isinstance(found.get("table"), dict):
        return None
    table: dict[str, Any] = found["table"]
    return table


def grpc_addresses(path: StrPath, error: type[Exception] = ValueError, cached: bool = False) -> list[str]:
    """The replicas' gRPC addresses from the cluster file, without the rest of it (the password file,
    which only replica hosts hold): what a CLI or a scheduler needs. `cached`: through client_table."""
    table = client_table(path, error) if cached else read_toml(os.path.realpath(path), error,
                                                                 "configuration file")
    replicas = table.get("replicas")
    if not isinstance(replicas, list) or not replicas or not all(
            isinstance(r, dict) and isinstance(r.get("grpc"), str) and r["grpc"] for r in replicas):
        raise error(f"{path}: [[replicas]] with a grpc address each")
    return [r["grpc"] for r in replicas]


def _cache_dir() -> str:
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "xce")


def _cache_path(addresses: list[str]) -> str:
    key = f"{zlib.crc32(chr(10).join(sorted(addresses)).encode()):08x}"  # a name, not a secret
    return os.path.join(_cache_dir(), f"leader-{key}")


def _write_private(path: str, text: str) -> None:
    """Best effort: write `text` to `path` whole (a rename), readable by this user alone."""
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.{os.urandom(6).hex()}"  # a name nobody could have laid a link at
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except (OSError, RuntimeError):
        pass


def cached_leader(addresses: list[str]) -> str | None:
    try:
        with open(_cache_path(addresses), encoding="utf-8") as f:
            found = f.read().strip()
    except (OSError, UnicodeDecodeError, RuntimeError):
        return None
    return found if found in addresses else None


def remember_leader(addresses: list[str], leader: str) -> None:
    """Best effort: a cache that cannot be written costs the next command a redirect at most."""
    if leader not in addresses or cached_leader(addresses) == leader:
        return
    _write_private(_cache_path(addresses), leader + "\n")
