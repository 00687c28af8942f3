"""Cluster configuration (TOML): replicas, data directory, queues, limits.

Example:

    cluster_id = "demo"
    password_file = "secret"          # relative to this file; or password = "..."
    data_dir = "data"                 # relative to this file
    default_queue = "normal"
    max_slots_per_job = 1024

    [[replicas]]
    id = 1
    grpc = "127.0.0.1:7101"
    raft = "127.0.0.1:7201"

    [[queues]]
    name = "normal"
    priority = 30
    users = ["all"]                   # who may submit: names, "@group"s (LSF USERS); default everyone
    admins = ["alice"]                # queue administrators
    max_user_priority = 50            # users may not set a job priority above this
    res_req = "select[type == X86_64] rusage[mem=1000]"   # merged with each job's -R (LSF RES_REQ)
    job_pick_plugin = "fairshare"     # this queue's picker: fcfs (the default), lifo, fairshare
    fairshare = { half_life_s = 3600, users = { alice = 3, default = 1 }, projects = { research = 2 } }
                                      # groups = { physics = 3, default = 1 }: user groups' shares
    kill_invalid_depend = false       # kill its jobs whose -w can never hold (Slurm); else they pend
    exclusive = false                 # true: takes -x jobs, which keep whole hosts (LSF EXCLUSIVE = Y)
    chunk_job_size = 0                # LSF CHUNK_JOB_SIZE: one-slot jobs alike go to a slot in chunks
    chunk_job_duration_s = 0          # ... only those with -W (or -We) at most this (0: any)
    backfill = "any"                  # past a waiting job: any | none (in order) | easy | end_before
                                      # | conservative (scheduler/backfill.py)
    preemptive = ["low"]              # may preempt these (each preemptable, of lower priority)
    # preemptable = true, preempt_action = "suspend" | "requeue", preempt_min_run_s = 60,
    # max_preemptions = 3, preemptable_resources = ["gpu"]: on the queues preempted

    [host_groups]                     # LSF HostGroup: -m "gpu_nodes host3", select[gpu_nodes]
    gpu_nodes = ["g1", "g2"]

    [user_groups]                     # LSF UserGroup: bsub -G physics, fair-share groups
    physics = ["alice", "bob"]        # users, or groups (expanded)

    [shared_resources]                # cluster-wide consumables (Slurm Licenses=, LSF shared resources)
    license_x = 10                    # rusage[license_x=1] takes one, whatever the host

    [[limits]]                        # LSF lsb.resources Limit: what running jobs hold together
    name = "users_normal"
    queues = ["normal"]               # consumers (absent: all); users = [...], projects = [...] too
    per_user = true                   # each user apart (per_queue, per_project likewise)
    slots = 64                        # bounds: slots, jobs, resources = { gpu = 8, license_x = 2 }

    [tls]                             # mutual TLS on every gRPC connection (xce/pki.py)
    ca = "tls/ca.crt"                 # the defaults; each replica's cert and key default to
    client_cert = "tls/client-xce.crt"  # tls/replica-<id>.crt|.key
    client_key = "tls/client-xce.key"
    # insecure = true                 # plaintext: never by default; tokens are still required

    [auth]
    private_jobs = false              # true: users see only their own jobs (Slurm PrivateData=jobs)
    max_jobs_per_request = 10000
    max_array_size = 1000000          # LSF MAX_JOB_ARRAY_SIZE: elements of one job array
    max_pend_jobs_per_user = 10000    # LSF MAX_PEND_JOBS: pending (PEND, PSUSP) jobs per user; 0: no limit
    submit_rate_per_user = 1000       # jobs a second a user may submit, sustained; 0: no bound
    submit_burst_per_user = 20000     # ... and at once
    limits_exempt_roles = ["cluster_admin"]   # the two bounds above do not apply to these roles
    max_sync_streams = 4              # concurrent Sync streams per principal
    max_sync_streams_total = 64       # ... and in all, on this replica
    handshake_timeout_s = 10.0        # a connection's TLS handshake must end within this, or it is closed
    idle_connection_timeout_s = 600.0 # a connection without a call this long is closed (GOAWAY)
    munge = false                     # accept MUNGE credentials (uid and gid from the local munged)
    munge_roles = { root = "cluster_admin" }   # role by user name for MUNGE callers; default user
    munge_socket = "/run/munge/munge.socket.2" # munged's socket (this is the default)
    [[auth.tokens]]                   # bootstrap tokens (by SHA-256); more with `xce token create`
    sha256 = "..."
    user = "root"
    role = "cluster_admin"

    [roles.operator]                  # replace a role's permissions (controller/authz.py), or add a role
    permissions = ["jobs.read", "jobs.read.all", "jobs.control.all", "queues.state", "cluster.read"]

Every replica reads the same file; `--id` picks its own entry.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf.message import Message

from client import cluster_file
from client.credentials import CredentialsError, TlsFiles, tls_files
from controller import authz, fsm
from controller.raft import RaftSettings
from xce import host_timing
from xce.errors import ServiceError
from xce.rules import fairshare, user_groups
from xce.rules import limits as xce_limits
from xce.v1 import api_pb2 as api


class ConfigError(Exception):
    """The configuration file is missing, malformed or inconsistent."""


@dataclass(frozen=True)
class Replica:
    id: int
    grpc: str
    raft: str
    cert: Path | None = None      # its TLS certificate and key (None: insecure)
    key: Path | None = None
    metrics: str = ""             # HOST:PORT of its Prometheus /metrics ("": none)


_HOSTS = host_timing.HostTiming()


@dataclass(frozen=True)
class ClusterConfig:
    path: Path
    cluster_id: str
    password: str
    data_dir: Path
    replicas: tuple[Replica, ...]
    queues: tuple[api.Queue, ...]
    default_queue: str = "normal"
    max_slots_per_job: int = 1024
    raft: RaftSettings = field(default_factory=RaftSettings)
    group_commit_max_requests: int = 512
    group_commit_max_bytes: int = 1 << 20
    group_commit_max_in_flight: int = 1
    heartbeat_s: float = _HOSTS.heartbeat_s   # [hosts]: xce/host_timing.py
    heartbeat_timeout_s: float = _HOSTS.heartbeat_timeout_s
    unknown_timeout_s: float = _HOSTS.unknown_timeout_s
    fence_s: float = _HOSTS.fence_s
    load_commit_s: float = _HOSTS.load_commit_s
    resend_s: float = _HOSTS.resend_s
    events_kept: int = 100_000
    clean_period_s: float = 3600.0            # finished jobs leave the live tables (history keeps them)
    history_days: float = 30.0                # history is kept this long
    tls: TlsFiles = field(default_factory=lambda: TlsFiles(None, None, None, insecure=True))
    policy: authz.Policy = field(default_factory=authz.Policy)
    static_tokens: dict[str, authz.StaticToken] = field(default_factory=dict)
    munge: bool = False
    munge_roles: dict[str, str] = field(default_factory=dict)
    munge_socket: str = ""                     # munged's socket, if not the default
    max_sync_streams: int = 4
    max_sync_streams_total: int = 64
    handshake_timeout_s: float = 10.0
    idle_connection_timeout_s: float = 600.0
    host_groups: tuple[api.HostGroup, ...] = ()
    shared: tuple[api.SharedResource, ...] = ()
    limits: tuple[api.Limit, ...] = ()
    user_groups: tuple[api.UserGroup, ...] = ()

    def replica(self, replica_id: int) -> Replica:
        for replica in self.replicas:
            if replica.id == replica_id:
                return replica
        raise ConfigError(f"{self.path}: no replica with id {replica_id} "
                          f"(ids: {', '.join(str(r.id) for r in self.replicas)})")

    def replica_dir(self, replica_id: int) -> Path:
        return self.data_dir / f"replica-{replica_id}"

    def grpc_for_raft(self, raft_address: str | None) -> str | None:
        for replica in self.replicas:
            if replica.raft == raft_address:
                return replica.grpc
        return None

    def replica_token(self) -> str:
        """What replicas of an insecure cluster present to each other (no certificates): derived from
        the Raft password, which every replica has and nothing else should."""
        return "xcer_" + hmac.new(self.password.encode(), f"xce replica {self.cluster_id}".encode(),
                                  hashlib.sha256).hexdigest()

    def digest(self) -> str:
        """What the configuration push carries: changes when queues or limits do."""
        h = hashlib.sha256()
        h.update(f"{self.default_queue}\0{self.max_slots_per_job}\0{self.events_kept}\0".encode())
        for queue in sorted(self.queues, key=lambda q: q.name):
            h.update(queue.SerializeToString(deterministic=True))
        return h.hexdigest()[:16]

    def resources_digest(self) -> str:
        """Of the host groups and shared resources (pushed from entry format 7); "" for none, as
        the committed state without any says."""
        return _digest(b"resources", (*self.host_groups, *self.shared))

    def user_groups_digest(self) -> str:
        """Of the user groups (pushed from entry format 24); "" for none, as the state without any says."""
        return _digest(b"user_groups", self.user_groups)

    def limits_digest(self) -> str:
        """Of the limits (pushed from entry format 11); "" for none, as the state without any says."""
        return _digest(b"limits", self.limits)


def _digest(kind: bytes, messages: Sequence[Message]) -> str:
    """What a push's part carries to say whether it changed: "" for none."""
    if not messages:
        return ""
    h = hashlib.sha256(kind + b"\0")
    for message in messages:
        h.update(message.SerializeToString(deterministic=True))
    return h.hexdigest()[:16]


def load(path: Path) -> ClusterConfig:
    path = Path(path).resolve()
    raw = read_toml(path, ConfigError, "configuration file")
    try:
        return parse(raw, path)
    except ConfigError as exc:
        raise ConfigError(with_line(path, str(exc))) from None


_ARRAYS = {"queue": "queues", "limit": "limits"}


def with_line(path: Path, message: str) -> str:
    """`message` with the line of the file it is about after the path (`FILE:12: queue 'x': priority
    ...`), when the message names a queue's or limit's key, or a [table]'s key, that can be found."""
    import re

    prefix = f"{path}: "
    if not message.startswith(prefix):
        return message
    rest = message[len(prefix):]
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return message
    found = re.match(r"(queue|limit) '([^']*)': (\w+)", rest)
    if found:
        number = _key_in_block(lines, f"[[{_ARRAYS[found[1]]}]]", found[2], found[3])
    elif found := re.match(r"\[([\w.]+)\] (\w+)", rest):
        number = _key_in_table(lines, f"[{found[1]}]", found[2])
    else:
        number = 0
    return f"{path}:{number}: {rest}" if number else message


def _key_in_block(lines: list[str], header: str, name: str, key: str) -> int:
    """The line of `key =` (else of the header) in the `header` block whose name is `name`; 0: none."""
    start, block_name, best = 0, None, 0
    for number, line in enumerate(lines + ["["], 1):
        text = line.strip()
        if text.startswith("["):
            if start and block_name == name:
                return best or start
            start, block_name, best = (number, None, 0) if text.replace(" ", "") == header else (0, None, 0)
        elif start and "=" in text:
            left, _, right = text.partition("=")
            if left.strip() == "name":
                block_name = right.split("#")[0].strip().strip("\"'")
            if left.strip() == key:
                best = number
    return 0


def _key_in_table(lines: list[str], header: str, key: str) -> int:
    inside = False
    for number, line in enumerate(lines, 1):
        text = line.strip()
        if text.startswith("["):
            inside = text.replace(" ", "") == header
        elif inside and text.partition("=")[0].strip() == key:
            return number
    return 0


def grpc_addresses(path: Path) -> list[str]:
    """The replicas' gRPC addresses from the cluster file (client/cluster_file.py), as ConfigError."""
    return cluster_file.grpc_addresses(path, ConfigError)


def read_toml(path: Path, error: type[Exception], what: str) -> dict[str, Any]:
    return cluster_file.read_toml(path, error, what)


def parse(raw: dict[str, Any], path: Path) -> ClusterConfig:
    """The cluster's configuration from the file's tables; ConfigError naming the first bad key."""
    base = path.parent
    cluster_id = _cluster_id(raw, path)
    password = _password(raw, path)
    try:
        tls = tls_files(raw, base)
    except CredentialsError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    replicas = tuple(_replica(r, path, None if tls.insecure else base) for r in raw.get("replicas", []))
    if not replicas:
        raise ConfigError(f"{path}: no [[replicas]]")
    if len({r.id for r in replicas}) != len(replicas):
        raise ConfigError(f"{path}: duplicate replica ids")
    user_groups = _user_groups(raw, path)
    queues, default_queue = _queues(raw, path, user_groups)
    max_slots = raw.get("max_slots_per_job", 1024)
    if not isinstance(max_slots, int) or max_slots < 1:
        raise ConfigError(f"{path}: max_slots_per_job must be a positive integer")
    raft_raw = raw.get("raft", {})
    try:
        raft = RaftSettings(**raft_raw)
        raft.check()
        raft.check_voters(len(replicas))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{path}: [raft]: {exc}") from exc
    return ClusterConfig(path=path, cluster_id=cluster_id, password=password,
                         data_dir=base / raw.get("data_dir", "data"), replicas=replicas,
                         queues=queues, default_queue=default_queue, max_slots_per_job=max_slots,
                         raft=raft, **_hosts(raw, path), **_state(raw, path), **_group_commit(raw, path),
                         tls=tls, limits=_limits(raw, path, {q.name for q in queues}),
                         **_auth(raw, path), **_resources(raw, path), user_groups=user_groups)


def _cluster_id(raw: dict[str, Any], path: Path) -> str:
    cluster_id: str = _get(raw, "cluster_id", str, path)
    if not cluster_id or not all(c.isalnum() or c in "_." for c in cluster_id):
        raise ConfigError(f"{path}: cluster_id must be letters, digits, _ or . (no '-')")
    return cluster_id


def _password(raw: dict[str, Any], path: Path) -> Any:
    password = raw.get("password")
    if password is None and "password_file" in raw:
        try:
            password = (path.parent / raw["password_file"]).read_text().strip()
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read password_file: {exc}") from exc
    if not password:
        raise ConfigError(f"{path}: a password (or password_file) is mandatory")
    return password


def _user_groups(raw: dict[str, Any], path: Path) -> tuple[api.UserGroup, ...]:
    """[user_groups]: names to lists of users and groups (LSF's UserGroup section)."""
    table = raw.get("user_groups", {})
    if not isinstance(table, dict) or not all(
            isinstance(v, list) and all(isinstance(m, str) for m in v) for v in table.values()):
        raise ConfigError(f"{path}: [user_groups] maps group names to lists of user and group names")
    try:
        return user_groups.expand(table)
    except user_groups.UserGroupError as exc:
        raise ConfigError(f"{path}: [user_groups]: {exc}") from None


def _queues(raw: dict[str, Any], path: Path,
            groups: tuple[api.UserGroup, ...] = ()) -> tuple[tuple[api.Queue, ...], str]:
    """The queues, and the default one."""
    queues = tuple(_queue(q, path, groups) for q in raw.get("queues", [{"name": "normal", "priority": 30}]))
    _check_preemption(queues, path)
    if len({q.name for q in queues}) != len(queues):
        raise ConfigError(f"{path}: duplicate queue names")
    default_queue = raw.get("default_queue", queues[0].name if queues else "normal")
    if default_queue not in {q.name for q in queues}:
        raise ConfigError(f"{path}: default_queue {default_queue!r} is not among [[queues]]")
    return queues, str(default_queue)


def _hosts(raw: dict[str, Any], path: Path) -> dict[str, Any]:
    """[hosts]: heartbeats, the timeouts after them, the fence, load commits (xce/host_timing.py)."""
    return dataclasses.asdict(host_timing.parse(raw.get("hosts", {}), path, ConfigError))


def _state(raw: dict[str, Any], path: Path) -> dict[str, Any]:
    """[state]: the events kept, the clean period and the history's retention."""
    state = raw.get("state", {})
    events_kept = state.get("events_kept", 100_000)
    if not isinstance(events_kept, int) or events_kept < 1:
        raise ConfigError(f"{path}: [state] events_kept must be a positive integer")
    clean_period_s, history_days = state.get("clean_period_s", 3600.0), state.get("history_days", 30.0)
    if not all(isinstance(v, int | float) and not isinstance(v, bool) and v > 0
               for v in (clean_period_s, history_days)) or clean_period_s > history_days * 86400:
        raise ConfigError(f"{path}: [state] clean_period_s and history_days must be positive, "
                          "and the clean period at most the history's retention")
    return {"events_kept": events_kept, "clean_period_s": float(clean_period_s),
            "history_days": float(history_days)}


def _group_commit(raw: dict[str, Any], path: Path) -> dict[str, Any]:
    group = raw.get("group_commit", {})
    for key in ("max_requests", "max_bytes", "max_in_flight"):
        if key in group and (not isinstance(group[key], int) or group[key] < 1):
            raise ConfigError(f"{path}: [group_commit] {key} must be a positive integer")
    if group.get("max_bytes", 0) > 1 << 20:  # with one request over it, an entry stays under MAX_ENTRY_BYTES
        raise ConfigError(f"{path}: [group_commit] max_bytes must be at most {1 << 20}")
    return {"group_commit_max_requests": int(group.get("max_requests", 512)),
            "group_commit_max_bytes": int(group.get("max_bytes", 1 << 20)),
            "group_commit_max_in_flight": int(group.get("max_in_flight", 1))}


def _line_of(path: Path, table: str) -> str:
    """":N", the line of the file where `[table]` (or `table =`) starts; "" if it cannot be found."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    for number, line in enumerate(lines, 1):
        text = line.strip().replace(" ", "")
        if text.startswith((f"[{table}]", f"{table}=")):
            return f":{number}"
    return ""


def _auth(raw: dict[str, Any], path: Path) -> dict[str, Any]:
    auth = raw.get("auth", {})
    if not isinstance(auth, dict):
        raise ConfigError(f"{path}: [auth] must be a table")
    # The roles table is the authorization of every request: a bad one stops the replica at start,
    # naming the line, rather than refusing everyone later (the seed's API server answered 403 to all).
    raw_roles = raw.get("roles", {})
    if not isinstance(raw_roles, dict):
        raise ConfigError(f"{path}{_line_of(path, 'roles')}: [roles] must be tables [roles.NAME] with "
                          "permissions = [...]")
    try:
        roles = authz.roles_from_config(raw_roles)
    except ValueError as exc:
        named = re.search(r"\[roles\.([^\]]+)\]", str(exc))
        raise ConfigError(f"{path}{_line_of(path, 'roles.' + named[1]) if named else ''}: {exc}") from None
    ints = _auth_ints(auth, path)
    rate = auth.get("submit_rate_per_user", 1000)
    if not isinstance(rate, (int, float)) or isinstance(rate, bool) or rate < 0:
        raise ConfigError(f"{path}: [auth] submit_rate_per_user must be a number of jobs a second >= 0")
    exempt = auth.get("limits_exempt_roles", ["cluster_admin"])
    if not isinstance(exempt, list) or not all(isinstance(r, str) and r in roles for r in exempt):
        raise ConfigError(f"{path}: [auth] limits_exempt_roles must list roles ({', '.join(sorted(roles))})")
    floats: dict[str, float] = {}
    for name, seconds in (("handshake_timeout_s", 10.0), ("idle_connection_timeout_s", 600.0)):
        given = auth.get(name, seconds)
        if not isinstance(given, (int, float)) or isinstance(given, bool) or not 0 < given <= 86400:
            raise ConfigError(f"{path}: [auth] {name} must be a number of seconds above 0 (at most a day)")
        floats[name] = float(given)
    for key in ("private_jobs", "munge"):
        if not isinstance(auth.get(key, False), bool):
            raise ConfigError(f"{path}: [auth] {key} must be true or false")
    static = _static_tokens(auth, path, roles)
    munge_roles = auth.get("munge_roles", {})
    if not isinstance(munge_roles, dict) or \
            not all(isinstance(v, str) and v in roles for v in munge_roles.values()):
        raise ConfigError(f"{path}: [auth] munge_roles maps user names to roles")
    policy = authz.Policy(roles=roles, private_jobs=bool(auth.get("private_jobs", False)),
                          max_jobs_per_request=ints["max_jobs_per_request"],
                          max_pend_jobs_per_user=ints["max_pend_jobs_per_user"],
                          max_array_size=ints["max_array_size"], submit_rate_per_user=float(rate),
                          submit_burst_per_user=ints["submit_burst_per_user"],
                          limits_exempt_roles=frozenset(exempt))
    socket = auth.get("munge_socket", "")
    if not isinstance(socket, str):
        raise ConfigError(f"{path}: [auth] munge_socket must be a path")
    return {"policy": policy, "static_tokens": static, "munge": bool(auth.get("munge", False)),
            "munge_socket": socket,
            "munge_roles": dict(munge_roles), "max_sync_streams": ints["max_sync_streams"],
            "max_sync_streams_total": ints["max_sync_streams_total"], **floats}


def _auth_ints(auth: dict[str, Any], path: Path) -> dict[str, int]:
    ints = {}
    for key, default, least in (("max_jobs_per_request", 10_000, 1), ("max_sync_streams", 4, 1),
                                ("max_sync_streams_total", 64, 1), ("max_pend_jobs_per_user", 10_000, 0),
                                ("max_array_size", 1_000_000, 1), ("submit_burst_per_user", 20_000, 1)):
        value = auth.get(key, default)
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise ConfigError(f"{path}: [auth] {key} must be an integer >= {least}")
        ints[key] = value
    return ints


def _static_tokens(auth: dict[str, Any], path: Path,
                   roles: dict[str, frozenset[str]]) -> dict[str, authz.StaticToken]:
    """[[auth.tokens]]: by the token's SHA-256, its user and role."""
    static: dict[str, authz.StaticToken] = {}
    for item in auth.get("tokens", []):
        sha, user, role = item.get("sha256"), item.get("user"), item.get("role")
        if not (isinstance(sha, str) and len(sha) == 64 and isinstance(user, str) and user
                and isinstance(role, str)):
            raise ConfigError(f"{path}: [[auth.tokens]] needs sha256 (64 hex digits), user and role")
        if role not in roles:
            raise ConfigError(f"{path}: [[auth.tokens]] role {role!r} is not a role "
                              f"({', '.join(sorted(roles))})")
        static[sha.lower()] = authz.StaticToken(user, role)
    return static


PREEMPT_ACTIONS = {"suspend": api.PREEMPT_SUSPEND, "requeue": api.PREEMPT_REQUEUE}


BACKFILL = ("any", "none", "easy", "end_before", "conservative")  # scheduler/core.py: _Order


def _preemption(raw: dict[str, Any], queue: api.Queue, where: str) -> None:
    """A queue's preemption keys (LSF's PREEMPTION): preemptive, preemptable, preempt_action,
    preempt_min_run_s, max_preemptions, preemptable_resources."""
    for key in ("preemptive", "preemptable_resources"):
        values = raw.get(key, [])
        if not isinstance(values, list) or not all(isinstance(v, str) and v for v in values):
            raise ConfigError(f"{where}: {key}: a list of names")
        getattr(queue, key).extend(values)
    preemptable = raw.get("preemptable", False)
    if not isinstance(preemptable, bool):
        raise ConfigError(f"{where}: preemptable: true or false")
    queue.preemptable = preemptable
    action = raw.get("preempt_action", "suspend")
    if action not in PREEMPT_ACTIONS:
        raise ConfigError(f"{where}: preempt_action: suspend or requeue, not {action!r}")
    queue.preempt_action = PREEMPT_ACTIONS[action]
    backfill = raw.get("backfill", "any")
    if backfill not in BACKFILL:
        raise ConfigError(f"{where}: backfill: one of {', '.join(BACKFILL)}, not {str(backfill)[:40]!r}")
    queue.backfill = "" if backfill == "any" else backfill
    for key in ("preempt_min_run_s", "max_preemptions"):
        value = raw.get(key, 0)
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**31:
            raise ConfigError(f"{where}: {key}: a whole number >= 0 (0: none)")
        setattr(queue, key, value)


def _check_preemption(queues: tuple[api.Queue, ...], path: Path) -> None:
    """Across queues: each name in `preemptive` is a preemptable queue of lower priority, and no
    queue preempts itself through others (a cycle)."""
    by_name = {q.name: q for q in queues}
    for queue in queues:
        for name in queue.preemptive:
            where = f"{path}: queue {queue.name!r}: preemptive"
            if name not in by_name:
                raise ConfigError(f"{where}: no queue {name!r}")
    for queue in queues:  # a cycle first: it is the clearer message when priorities also disagree
        seen: set[str] = set()
        todo = list(queue.preemptive)
        while todo:
            name = todo.pop()
            if name == queue.name:
                through = ", ".join(sorted(seen)) or "itself"
                raise ConfigError(f"{path}: queue {queue.name!r}: preemptive: a preemption cycle: "
                                  f"{queue.name!r} preempts itself through {through}")
            if name not in seen:
                seen.add(name)
                todo.extend(by_name[name].preemptive)
    for queue in queues:
        for name in queue.preemptive:
            where = f"{path}: queue {queue.name!r}: preemptive"
            other = by_name[name]
            if not other.preemptable:
                raise ConfigError(f"{where}: queue {name!r} is not preemptable (preemptable = true there)")
            if other.priority >= queue.priority:
                raise ConfigError(f"{where}: queue {name!r} has priority {other.priority}, not below "
                                  f"{queue.priority}: a job is never preempted for one of equal or lower "
                                  "priority")


FAIRSHARE_KEYS = frozenset({"half_life_s", "users", "projects", "groups"})


def _fairshare(raw: Any, where: str, groups: tuple[api.UserGroup, ...] = ()) -> api.FairShare:
    """A queue's [queues.fairshare]: half_life_s, users = { alice = 3 }, projects = { research = 2 },
    groups = { physics = 3 } (of [user_groups], whose members the record carries)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: a table of half_life_s, users and projects")
    for key in sorted(set(raw) - FAIRSHARE_KEYS):
        raise ConfigError(f"{where}: {key}: not a key of fairshare ({', '.join(sorted(FAIRSHARE_KEYS))})")
    half = raw.get("half_life_s", 0)
    if not isinstance(half, int) or isinstance(half, bool):
        raise ConfigError(f"{where}: half_life_s: whole seconds")
    config = api.FairShare(half_life_s=half)
    for key in ("users", "projects", "groups"):
        table = raw.get(key, {})
        if not isinstance(table, dict) or not all(isinstance(v, int) and not isinstance(v, bool)
                                                  for v in table.values()):
            raise ConfigError(f"{where}: {key}: a table of names to whole shares")
        getattr(config, key).update(table)
    for name in sorted(config.groups):
        group = user_groups.find(groups, name)
        if group is not None:
            config.group_members.append(group)
    try:
        fairshare.check(config, where)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return config


LIMIT_KEYS = frozenset({"name", "users", "per_user", "queues", "per_queue", "projects", "per_project",
                        "slots", "jobs", "resources"})


def _limits(raw: dict[str, Any], path: Path, queues: set[str]) -> tuple[api.Limit, ...]:
    """[[limits]] (LSF's Limit sections); each error names the limit and the key."""
    items = raw.get("limits", [])
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise ConfigError(f"{path}: [[limits]] are tables, each with a name and bounds")
    found = []
    for number, item in enumerate(items, 1):
        name = item.get("name")
        if not isinstance(name, str):
            raise ConfigError(f"{path}: limit #{number}: name must be a string")
        where = f"{path}: limit {name!r}"
        for key in sorted(set(item) - LIMIT_KEYS):
            raise ConfigError(f"{where}: {key}: not a key of a limit ({', '.join(sorted(LIMIT_KEYS))})")
        limit = api.Limit(name=name)
        for key in ("users", "queues", "projects"):
            values = item.get(key, [])
            if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
                raise ConfigError(f"{where}: {key}: a list of names")
            getattr(limit, key).extend(values)
        for key in ("per_user", "per_queue", "per_project"):
            value = item.get(key, False)
            if not isinstance(value, bool):
                raise ConfigError(f"{where}: {key}: true or false")
            setattr(limit, key, value)
        for key in ("slots", "jobs"):
            value = item.get(key, 0)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ConfigError(f"{where}: {key}: a whole number (0: no bound)")
            setattr(limit, key, value)
        resources = item.get("resources", {})
        if not isinstance(resources, dict) or not all(
                isinstance(v, int) and not isinstance(v, bool) for v in resources.values()):
            raise ConfigError(f"{where}: resources: a table of names to whole numbers")
        limit.resources.update(resources)
        for queue in limit.queues:
            if queue not in queues and queue != "all":
                raise ConfigError(f"{where}: queues: no queue {queue!r} in this file")
        found.append(limit)
    try:
        xce_limits.check(found)
    except xce_limits.LimitError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return tuple(found)


def _resources(raw: dict[str, Any], path: Path) -> dict[str, Any]:
    groups_raw, shared_raw = raw.get("host_groups", {}), raw.get("shared_resources", {})
    if not isinstance(groups_raw, dict) or not all(
            isinstance(v, list) and all(isinstance(m, str) for m in v) for v in groups_raw.values()):
        raise ConfigError(f"{path}: [host_groups] maps group names to lists of host names")
    if not isinstance(shared_raw, dict) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in shared_raw.values()):
        raise ConfigError(f"{path}: [shared_resources] maps names to whole totals")
    groups = tuple(api.HostGroup(name=name, members=sorted(set(members)))
                   for name, members in sorted(groups_raw.items()))
    shared = tuple(api.SharedResource(name=name, total=total) for name, total in sorted(shared_raw.items()))
    try:
        fsm.resources.check_resources(groups, shared)
    except ServiceError as exc:
        raise ConfigError(f"{path}: {exc.message}") from None
    return {"host_groups": groups, "shared": shared}


def _get(raw: dict[str, Any], key: str, kind: type, path: Path) -> Any:
    if key not in raw:
        raise ConfigError(f"{path}: missing {key}")
    if not isinstance(raw[key], kind):
        raise ConfigError(f"{path}: {key} must be a {kind.__name__}")
    return raw[key]


def _replica(raw: dict[str, Any], path: Path, tls_base: Path | None) -> Replica:
    replica_id = _get(raw, "id", int, path)
    cert = key = None
    if tls_base is not None:
        cert = tls_base / str(raw.get("cert", f"tls/replica-{replica_id}.crt"))
        key = tls_base / str(raw.get("key", f"tls/replica-{replica_id}.key"))
    metrics = raw.get("metrics", "")
    if not isinstance(metrics, str) or (metrics and not _is_address(metrics)):
        raise ConfigError(f"{path}: replica {replica_id}: metrics is HOST:PORT, not {metrics!r}")
    return Replica(id=replica_id, grpc=_get(raw, "grpc", str, path), raft=_get(raw, "raft", str, path),
                   cert=cert, key=key, metrics=metrics)


def _is_address(text: str) -> bool:
    from xce.metrics import split

    try:
        split(text)
    except ValueError:
        return False
    return True


def _queue(raw: dict[str, Any], path: Path, groups: tuple[api.UserGroup, ...] = ()) -> api.Queue:
    name = _get(raw, "name", str, path)
    priority = raw.get("priority", 30)
    if not isinstance(priority, int) or isinstance(priority, bool) or not -(2**31) <= priority < 2**31:
        raise ConfigError(f"{path}: queue {name!r}: priority must be an integer (32-bit)")
    closed, inactive = raw.get("closed", False), raw.get("inactive", False)
    if not isinstance(closed, bool) or not isinstance(inactive, bool):
        raise ConfigError(f"{path}: queue {name!r}: closed and inactive must be true or false")
    kill_invalid_depend, exclusive = raw.get("kill_invalid_depend", False), raw.get("exclusive", False)
    if not isinstance(kill_invalid_depend, bool) or not isinstance(exclusive, bool):
        raise ConfigError(f"{path}: queue {name!r}: kill_invalid_depend and exclusive must be true or false")
    slot_limit = raw.get("slot_limit", 0)
    if not isinstance(slot_limit, int) or isinstance(slot_limit, bool) or not 0 <= slot_limit < 2**31:
        raise ConfigError(f"{path}: queue {name!r}: slot_limit must be an integer >= 0 (0: no limit)")
    users, admins = raw.get("users", []), raw.get("admins", [])
    if not all(isinstance(v, list) and all(isinstance(x, str) for x in v) for v in (users, admins)):
        raise ConfigError(f"{path}: queue {name!r}: users and admins are lists of names and @groups")
    res_req = raw.get("res_req", "")
    if not isinstance(res_req, str):
        raise ConfigError(f"{path}: queue {name!r}: res_req must be a string (a resource requirement)")
    queue = api.Queue(name=name, priority=priority, description=str(raw.get("description", "")),
                      closed=closed, inactive=inactive, job_pick_plugin=str(raw.get("job_pick_plugin", "")),
                      slot_limit=slot_limit, users=users, admins=admins, res_req=res_req,
                      kill_invalid_depend=kill_invalid_depend, exclusive=exclusive)
    _preemption(raw, queue, f"{path}: queue {name!r}")
    chunk_bounds = (("chunk_job_size", fsm.validation.MAX_CHUNK), ("chunk_job_duration_s", 10 * 365 * 86400))
    for key, most in chunk_bounds:
        value = raw.get(key, 0)
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= most:
            raise ConfigError(f"{path}: queue {name!r}: {key} must be a whole number from 0 to {most}")
        setattr(queue, key, value)
    if "fairshare" in raw:
        queue.fairshare.CopyFrom(_fairshare(raw["fairshare"], f"{path}: queue {name!r}: fairshare", groups))
    if "max_user_priority" in raw:
        cap = raw["max_user_priority"]
        if not isinstance(cap, int) or isinstance(cap, bool) or not -(2**31) <= cap < 2**31:
            raise ConfigError(f"{path}: queue {name!r}: max_user_priority must be an integer (32-bit)")
        queue.max_user_priority = cap
    try:
        fsm.check_queue(queue)
    except ServiceError as exc:
        raise ConfigError(f"{path}: {exc.message}") from None
    return queue
