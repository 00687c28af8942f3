"""The gateway's clusters file (`xce gateway --clusters FILE`): the other clusters it relays to.

```toml
[clusters.hpc]                       # a Slurm cluster, through slurmrestd
backend = "slurm"
url = "http://127.0.0.1:6820"
token_file = "/etc/xce/slurm-hpc.jwt"   # a JWT of SlurmUser (root): it acts as each caller
bin = "/usr/bin"                     # Slurm's commands, where slurmrestd lacks an operation
env = { SLURM_CONF = "/etc/slurm/slurm.conf" }
run_as_caller = true                 # those commands as the caller's account (the gateway runs as root)
shared_fs = true                     # the gateway reads job output files where the jobs wrote them

[clusters.lsf]                       # an LSF cluster, through its commands
backend = "lsf"
bin = "/opt/lsf/10.1/linux/bin"
env = { LSF_ENVDIR = "/opt/lsf/conf" }
run_as_caller = true                 # each command as the caller's account (the gateway runs as root)
shared_fs = true
```

The local XCE cluster is always there, under its own name (its cluster id). A name is 1 to 64
letters, digits, `_`, `-` or `.`; a file with anything else (an unknown key, a bad URL, a missing
token file) is refused whole, naming the line's table.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gateway.clusters.backend import ClusterBackend
from gateway.clusters.lsf_commands import LsfCommands
from xce import cluster_names

KEYS: dict[str, frozenset[str]] = {
    "lsf": frozenset({"backend", "bin", "env", "run_as_caller", "shared_fs", "timeout_s"}),
    "slurm": frozenset(
        {"backend", "url", "token_file", "bin", "env", "run_as_caller", "shared_fs", "timeout_s"}
    ),
}


class ClustersFileError(ValueError):
    pass


def load(path: str | Path, local: str = "") -> dict[str, ClusterBackend]:
    """The backends of the file, by name; ClustersFileError naming what is wrong."""
    try:
        raw = tomllib.loads(Path(path).read_text())
    except OSError as exc:
        raise ClustersFileError(f"{path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ClustersFileError(f"{path}: {exc}") from None
    unknown = sorted(set(raw) - {"clusters"})
    if unknown:
        raise ClustersFileError(f"{path}: unknown tables {', '.join(unknown)} (only [clusters.NAME])")
    found: dict[str, ClusterBackend] = {}
    for name, table in (raw.get("clusters") or {}).items():
        where = f"{path}: [clusters.{name}]"
        if not cluster_names.valid(name):
            raise ClustersFileError(f"{where}: a name is {cluster_names.RULE}")
        if name == local:
            raise ClustersFileError(f"{where}: {name} is this XCE cluster's own name")
        if not isinstance(table, dict):
            raise ClustersFileError(f"{where}: not a table")
        found[name] = _backend(name, table, where)
    return found


def _backend(name: str, table: dict[str, Any], where: str) -> ClusterBackend:
    kind = table.get("backend")
    if kind not in KEYS:
        raise ClustersFileError(
            f"{where}: backend is one of {', '.join(sorted(KEYS))} (kubernetes is not "
            "supported: docs/GATEWAY.md)"
        )
    unknown = sorted(set(table) - KEYS[kind])
    if unknown:
        raise ClustersFileError(
            f"{where}: unknown keys {', '.join(unknown)} (known: {', '.join(sorted(KEYS[kind]))})"
        )
    text = _typed(table, where, str)
    flag = _typed(table, where, bool)
    env = table.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise ClustersFileError(f"{where}: env is a table of strings")
    timeout = table.get("timeout_s", 30.0)
    if not isinstance(timeout, int | float) or isinstance(timeout, bool) or not 0 < timeout <= 600:
        raise ClustersFileError(f"{where}: timeout_s is a number of seconds, above 0 and at most 600")
    if kind == "lsf":
        return LsfCommands(name, text("bin"), env, flag("run_as_caller"), flag("shared_fs"), float(timeout))
    from gateway.clusters.slurm_rest import SlurmRest

    url = text("url")
    if not url.startswith(("http://", "https://")):
        raise ClustersFileError(f"{where}: url is slurmrestd's http:// or https:// address")
    token_file = text("token_file")
    try:
        token = Path(token_file).read_text().strip() if token_file else ""
    except OSError as exc:
        raise ClustersFileError(f"{where}: token_file {token_file}: {exc.strerror}") from None
    return SlurmRest(
        name, url, token, text("bin"), env, flag("shared_fs"), float(timeout), flag("run_as_caller")
    )


def _typed(table: dict[str, Any], where: str, kind: type) -> Callable[[str], Any]:
    def get(key: str) -> Any:
        value = table.get(key, kind())
        if not isinstance(value, kind):
            raise ClustersFileError(f"{where}: {key} is a {kind.__name__}")
        return value

    return get
