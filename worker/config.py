"""Worker configuration (TOML).

    controllers = ["127.0.0.1:7101", "127.0.0.1:7102", "127.0.0.1:7103"]
    # or: cluster_config = "/etc/xce/cluster.toml"   (its replicas' gRPC addresses)
    name = "node17"           # default: this machine's host name
    slots = 8                 # default: the CPU count; 0 closes the host (like LSF MXJ=0)
    memory_mb = 64000         # default: MemTotal from /proc/meminfo
    tags = ["gpu", "ssd"]
    spool_dir = "spool"       # default: xce-spool-<name> beside this file; job output and state
    kill_grace_s = 10         # SIGTERM, then SIGKILL after this long
    draining = false          # true: refuse new jobs (they go back to PEND, attempt + 1)
    journal_keep = 1000       # finished instances kept in the journal (the soak keeps them all)
    [resources]
    gpu = 2

Relative paths are relative to the file. `--name` on the command line wins
over `name`.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller import fsm
from controller.config import read_toml
from worker.journal import KEEP_ACKED
from xce.errors import ServiceError
from xce.v1 import api_pb2 as api


class WorkerConfigError(Exception):
    """The worker configuration is missing, malformed or invalid."""


@dataclass(frozen=True)
class WorkerConfig:
    path: Path
    controllers: tuple[str, ...]
    host: api.HostSpec
    spool_dir: Path
    kill_grace_s: float = 10.0
    draining: bool = False
    journal_keep: int = KEEP_ACKED


def load(path: Path, name: str | None = None) -> WorkerConfig:
    path = Path(path).resolve()
    return parse(read_toml(path, WorkerConfigError, "worker configuration"), path, name)


def parse(raw: dict[str, Any], path: Path, name: str | None = None) -> WorkerConfig:
    controllers = _controllers(raw, path)
    slots = raw.get("slots", os.cpu_count() or 1)
    if not isinstance(slots, int) or isinstance(slots, bool):
        raise WorkerConfigError(f"{path}: slots must be an integer")
    memory_mb = raw.get("memory_mb", _memory_mb())
    if not isinstance(memory_mb, int) or isinstance(memory_mb, bool):
        raise WorkerConfigError(f"{path}: memory_mb must be an integer")
    resources = raw.get("resources", {})
    tags = raw.get("tags", [])
    if not isinstance(resources, dict) or not all(isinstance(v, int | float) for v in resources.values()):
        raise WorkerConfigError(f"{path}: [resources] maps names to numbers")
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise WorkerConfigError(f"{path}: tags must be a list of strings")
    host = api.HostSpec(name=name or str(raw.get("name") or socket.gethostname()), slots=slots,
                        memory_mb=memory_mb, resources={k: float(v) for k, v in resources.items()},
                        tags=tags)
    try:
        fsm.check_host_spec(host)
    except ServiceError as exc:
        raise WorkerConfigError(f"{path}: {exc.message}") from None
    grace = raw.get("kill_grace_s", 10.0)
    if not isinstance(grace, int | float) or isinstance(grace, bool) or grace < 0:
        raise WorkerConfigError(f"{path}: kill_grace_s must be a number >= 0")
    draining = raw.get("draining", False)
    if not isinstance(draining, bool):
        raise WorkerConfigError(f"{path}: draining must be true or false")
    keep = raw.get("journal_keep", KEEP_ACKED)
    if not isinstance(keep, int) or isinstance(keep, bool) or keep < 0:
        raise WorkerConfigError(f"{path}: journal_keep must be an integer >= 0")
    spool = path.parent / str(raw.get("spool_dir", f"xce-spool-{host.name}"))
    return WorkerConfig(path=path, controllers=controllers, host=host, spool_dir=spool,
                        kill_grace_s=float(grace), draining=draining, journal_keep=keep)


def _controllers(raw: dict[str, Any], path: Path) -> tuple[str, ...]:
    if "controllers" in raw:
        controllers = raw["controllers"]
        if not isinstance(controllers, list) or not controllers or \
                not all(isinstance(c, str) and c for c in controllers):
            raise WorkerConfigError(f"{path}: controllers must be a non-empty list of host:port")
        return tuple(controllers)
    if "cluster_config" in raw:
        from controller.config import ConfigError
        from controller.config import load as load_cluster

        try:
            return tuple(r.grpc for r in load_cluster(path.parent / raw["cluster_config"]).replicas)
        except ConfigError as exc:
            raise WorkerConfigError(f"{path}: cluster_config: {exc}") from exc
    raise WorkerConfigError(f"{path}: needs controllers = [...] or cluster_config = PATH")


def _memory_mb() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    except OSError:
        pass
    return 0
