"""Worker configuration (TOML).

    controllers = ["127.0.0.1:7101", "127.0.0.1:7102", "127.0.0.1:7103"]
    # or: cluster_config = "/etc/xce/cluster.toml"   (its replicas' gRPC addresses)
    name = "node17"           # default: this machine's host name
    slots = 8                 # default: the CPU count; 0 closes the host (like LSF MXJ=0)
    memory_mb = 64000         # default: MemTotal from /proc/meminfo
    tags = ["gpu", "ssd", "type=X86_64"]   # select[defined(gpu)], select[type == X86_64]
    ncpus = 16                # default: the CPU count (select[ncpus >= 8])
    spool_dir = "spool"       # default: xce-spool-<name> beside this file; job output and state
    kill_grace_s = 10         # SIGTERM, then SIGKILL after this long
    draining = false          # true: refuse new jobs (they go back to PEND, attempt + 1)
    journal_keep = 1000       # finished instances kept in the journal (the soak keeps them all)
    tls_cert = "tls/worker-node17.crt"   # its certificate (role worker, CN = the host name); the default
    tls_key = "tls/worker-node17.key"
    ca = "tls/ca.crt"         # default: the cluster file's [tls] ca; not needed with cluster_config
    # token_file = "worker.token"  # with an insecure cluster: a token of role worker for this host
    allow_root_jobs = false   # run jobs whose owner is root (uid 0)
    usage_report_s = 30       # how often each running job's CPU and RSS go to the controllers (M6)
    memory_poll_s = 1.0       # how often jobs' memory is read, against their limits (-M, rusage[mem=])
    mail_command = ["/usr/sbin/sendmail", "-oi"]  # job mail (bsub -B -N -u): the address is appended
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

from client import cluster_file
from client.cluster_file import read_toml
from client.credentials import Credentials, CredentialsError, TlsFiles, for_cluster, read_token_file
from worker.journal import KEEP_ACKED
from xce import host_timing
from xce.errors import ServiceError
from xce.host_spec import check_host_spec
from xce.v1 import api_pb2 as api

# Tags every worker of this code gives its host: what it carries out (bsub -E, -Ep, -t, -I).
CODE_TAGS = ("xce_lsf",)


class WorkerConfigError(Exception):
    """The worker configuration is missing, malformed or invalid."""


class _ClusterFileError(Exception):
    """The cluster file named by cluster_config (said as the worker configuration's error)."""


@dataclass(frozen=True)
class WorkerConfig:
    path: Path
    controllers: tuple[str, ...]
    host: api.HostSpec
    spool_dir: Path
    kill_grace_s: float = 10.0
    draining: bool = False
    journal_keep: int = KEEP_ACKED
    credentials: Credentials = Credentials(insecure=True)
    allow_root_jobs: bool = False
    usage_report_s: float = 30.0
    memory_poll_s: float = 1.0
    metrics: str = ""  # HOST:PORT of its Prometheus /metrics ("": none)
    mail_command: tuple[str, ...] = ("/usr/sbin/sendmail", "-oi")  # job mail (worker/mail.py)


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
    ncpus = raw.get("ncpus", os.cpu_count() or 1)
    if not isinstance(ncpus, int) or isinstance(ncpus, bool) or not 0 <= ncpus < 1 << 20:
        raise WorkerConfigError(f"{path}: ncpus must be a whole number")
    # What this worker's code carries out, as a tag jobs may select: an older worker lacks it, so a job
    # needing it is never sent to one during a rolling upgrade (cli/lsf/bsub.py).
    tags = [*tags, *(t for t in CODE_TAGS if t not in tags)]
    host = api.HostSpec(name=name or str(raw.get("name") or socket.gethostname()), slots=slots,
                        memory_mb=memory_mb, resources={k: float(v) for k, v in resources.items()},
                        tags=tags, ncpus=ncpus)
    try:
        check_host_spec(host)
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
    _check_fence(raw, path, float(grace))
    spool = path.parent / str(raw.get("spool_dir", f"xce-spool-{host.name}"))
    allow_root = raw.get("allow_root_jobs", False)
    if not isinstance(allow_root, bool):
        raise WorkerConfigError(f"{path}: allow_root_jobs must be true or false")
    periods = {}
    for key, default, least in (("usage_report_s", 30.0, 1.0), ("memory_poll_s", 1.0, 0.1)):
        value = raw.get(key, default)
        if not isinstance(value, int | float) or isinstance(value, bool) or value < least:
            raise WorkerConfigError(f"{path}: {key} must be a number of seconds >= {least}")
        periods[key] = float(value)
    metrics = raw.get("metrics", "")
    if not isinstance(metrics, str) or metrics and not _address(metrics):
        raise WorkerConfigError(f"{path}: metrics is HOST:PORT, not {metrics!r}")
    mail = raw.get("mail_command", ["/usr/sbin/sendmail", "-oi"])
    if not isinstance(mail, list) or not mail or not all(isinstance(w, str) and w for w in mail) or \
            not mail[0].startswith("/"):
        raise WorkerConfigError(f"{path}: mail_command is a command's words, the first an absolute path")
    return WorkerConfig(path=path, controllers=controllers, host=host, spool_dir=spool,
                        kill_grace_s=float(grace), draining=draining, journal_keep=keep,
                        credentials=_credentials(raw, path, host.name), allow_root_jobs=allow_root,
                        metrics=metrics, mail_command=tuple(mail), **periods)


def _address(text: str) -> bool:
    from xce.metrics import split

    try:
        split(text)
    except ValueError:
        return False
    return True


def _credentials(raw: dict[str, Any], path: Path, name: str) -> Credentials:
    """The worker proves its host with its certificate (or, on an insecure cluster, a worker token)."""
    base = path.parent
    cert = base / str(raw.get("tls_cert", f"tls/worker-{name}.crt"))
    key = base / str(raw.get("tls_key", f"tls/worker-{name}.key"))
    try:
        token = read_token_file(base / str(raw["token_file"]), required=True) if "token_file" in raw else None
        if "cluster_config" in raw:
            credentials = for_cluster(base / raw["cluster_config"], token=token, use_token_search=False)
            if credentials.insecure:
                return credentials
            return credentials.with_certificate(cert, key)
        if raw.get("insecure", False) is True:
            return Credentials(insecure=True, token=token)
        if "ca" not in raw:
            raise WorkerConfigError(f"{path}: needs ca = PATH (the cluster CA), or cluster_config")
        ca = base / str(raw["ca"])
        return Credentials(ca=ca.read_bytes(), token=token,
                           files=TlsFiles(ca, None, None)).with_certificate(cert, key)
    except CredentialsError as exc:
        raise WorkerConfigError(f"{path}: {exc}") from None
    except OSError as exc:
        raise WorkerConfigError(f"{path}: cannot read ca: {exc}") from None


def _controllers(raw: dict[str, Any], path: Path) -> tuple[str, ...]:
    if "controllers" in raw:
        controllers = raw["controllers"]
        if not isinstance(controllers, list) or not controllers or \
                not all(isinstance(c, str) and c for c in controllers):
            raise WorkerConfigError(f"{path}: controllers must be a non-empty list of host:port")
        return tuple(controllers)
    if "cluster_config" in raw:
        try:
            return tuple(cluster_file.grpc_addresses((path.parent / raw["cluster_config"]).resolve(),
                                                     _ClusterFileError))
        except _ClusterFileError as exc:
            raise WorkerConfigError(f"{path}: cluster_config: {exc}") from exc
    raise WorkerConfigError(f"{path}: needs controllers = [...] or cluster_config = PATH")


def _check_fence(raw: dict[str, Any], path: Path, grace_s: float) -> None:
    """A fenced job must be dead before the leader requeues it: with the cluster file at hand, refuse a
    kill grace that the fence and it together would reach unknown_timeout_s (the leader's give-up)."""
    if "cluster_config" not in raw:
        return  # the worker learns the fence when it joins, and then kills fenced jobs without a grace
    cluster_path = (path.parent / raw["cluster_config"]).resolve()
    try:
        table = read_toml(cluster_path, _ClusterFileError, "configuration file")
        cluster = host_timing.parse(table.get("hosts", {}), cluster_path, _ClusterFileError)
    except _ClusterFileError as exc:
        raise WorkerConfigError(f"{path}: cluster_config: {exc}") from exc
    if cluster.fence_s and cluster.fence_s + grace_s >= cluster.unknown_timeout_s:
        raise WorkerConfigError(
            f"{path}: kill_grace_s {grace_s:g} + the cluster's [hosts] fence_s {cluster.fence_s:g} must be "
            f"less than its unknown_timeout_s {cluster.unknown_timeout_s:g}: a fenced job must be dead "
            "before the leader requeues it")


def _memory_mb() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    except OSError:
        pass
    return 0
