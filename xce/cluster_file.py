"""What a client reads of the cluster file: the replicas' gRPC addresses (controller/config.py reads
the rest, on replica hosts), and where it last found the leader.

The leader cache (`$XDG_CACHE_HOME/xce/leader-<CRC-32 of the addresses>`) holds the address of the
replica that answered the last command as leader, so the next command goes there first; a wrong
cache costs one redirect (a follower names the leader), a missing or unreadable one nothing.
"""

from __future__ import annotations

import os
import tomllib
import zlib
from pathlib import Path
from typing import Any


def read_toml(path: Path, error: type[Exception], what: str) -> dict[str, Any]:
    """The file's TOML table, or `error` saying plainly what is wrong."""
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise error(f"no {what} at {path}") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise error(f"{path}: not valid TOML: {exc}") from exc


def grpc_addresses(path: Path, error: type[Exception] = ValueError) -> list[str]:
    """The replicas' gRPC addresses from the cluster file, without the rest of it (the password file,
    which only replica hosts hold): what a CLI or a scheduler needs."""
    path = Path(path).resolve()
    replicas = read_toml(path, error, "configuration file").get("replicas")
    if not isinstance(replicas, list) or not replicas or not all(
            isinstance(r, dict) and isinstance(r.get("grpc"), str) and r["grpc"] for r in replicas):
        raise error(f"{path}: [[replicas]] with a grpc address each")
    return [r["grpc"] for r in replicas]


def _cache_path(addresses: list[str]) -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    key = f"{zlib.crc32(chr(10).join(sorted(addresses)).encode()):08x}"  # a name, not a secret
    return Path(base) / "xce" / f"leader-{key}"


def cached_leader(addresses: list[str]) -> str | None:
    try:
        found = _cache_path(addresses).read_text().strip()
    except (OSError, UnicodeDecodeError, RuntimeError):
        return None
    return found if found in addresses else None


def remember_leader(addresses: list[str], leader: str) -> None:
    """Best effort: a cache that cannot be written costs the next command a redirect at most."""
    if leader not in addresses or cached_leader(addresses) == leader:
        return
    try:
        path = _cache_path(addresses)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = path.with_name(f"{path.name}.{os.getpid()}")
        tmp.write_text(leader + "\n")
        os.replace(tmp, path)
    except (OSError, RuntimeError):
        pass
