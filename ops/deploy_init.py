"""`xce init`: what a deployment on real hosts needs, one bundle per host.

Theory of operation. From the replicas' addresses and the worker hosts' names
it makes the cluster CA, a certificate for every daemon, the Raft password and
the first admin token, and lays them out as they go on each host:

    OUT/README.txt              what goes where, and how to start it
    OUT/ca/ca.crt, ca.key       the cluster CA: keep ca.key off the hosts; more
                                certificates later with `xce ca issue --dir OUT/ca`
    OUT/admin/token             the first cluster_admin token (0600), for the
                                admin's ~/.config/xce/token
    OUT/hosts/HOST/             the contents of /etc/xce on HOST:
        cluster.toml            every host: replicas, TLS, the admin token's hash, queues
        secret                  replica hosts only: the Raft password (0600)
        tls/ca.crt              every host
        tls/client-xce.crt|key  every host: the shared certificate that admits a CLI's
                                connection and proves nothing (0644: every user's CLI reads it)
        tls/replica-ID.crt|key  replica hosts
        tls/scheduler-ID.crt|key  scheduler hosts (by default each replica host runs one)
        tls/worker-HOST.crt|key, worker.toml   worker hosts

`xce init-replica --deploy OUT --id N --address HOST:GRPC[:RAFT]` later makes
the bundle of a replica to add (OUT/hosts/HOST/, from the CA and an existing
replica host's bundle in OUT): the cluster file with the new replica added,
the password, its certificate, and controller-N.env, which starts it with
--join (a learner, until `xce member add`).

Private keys and secrets are 0600, the rest 0644, directories 0755 (0700 for
`ca/` and `admin/`): copied with their modes (`cp -a`, `rsync -a`, `scp -p`)
they are right on the host once owned by the daemon's user. Nothing is ever
overwritten: OUT must not exist or be empty, since a second CA would lock
every existing daemon out.
"""

from __future__ import annotations

import ipaddress
import re
import secrets
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from client.credentials import new_token
from xce import pki
from xce.private import write_private

DEFAULT_DATA_DIR = "/var/lib/xce"
DEFAULT_SPOOL_DIR = "/var/spool/xce"
RAFT_PORT_OFFSET = 100  # a replica's Raft port, unless given: its gRPC port + this
_HOST = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$")


class InitError(Exception):
    """A bad argument, or an output directory that is in use."""


@dataclass(frozen=True)
class ReplicaAddress:
    id: int
    host: str
    grpc_port: int
    raft_port: int

    @property
    def grpc(self) -> str:
        return f"{self.host}:{self.grpc_port}"

    @property
    def raft(self) -> str:
        return f"{self.host}:{self.raft_port}"


@dataclass(frozen=True)
class Plan:
    """Who runs where: `xce init`'s arguments, checked."""

    cluster_id: str
    replicas: tuple[ReplicaAddress, ...]
    workers: tuple[str, ...] = ()
    schedulers: tuple[str, ...] = ()  # hosts; each runs the scheduler `sched-HOST`
    admin: str = "root"
    data_dir: str = DEFAULT_DATA_DIR
    spool_dir: str = DEFAULT_SPOOL_DIR
    queues: tuple[tuple[str, int], ...] = field(default=(("normal", 30), ("priority", 43), ("idle", 20)))

    def hosts(self) -> list[str]:
        """Every host named, replicas' first, each once."""
        return list(dict.fromkeys([*(r.host for r in self.replicas), *self.schedulers, *self.workers]))


def parse_replicas(text: str) -> tuple[ReplicaAddress, ...]:
    """`HOST:GRPC[:RAFT],...` (the Raft port defaults to the gRPC port + 100); ids 1, 2, ... in order."""
    replicas = []
    for i, item in enumerate((part.strip() for part in text.split(",")), start=1):
        fields = item.rsplit(":", 2) if item.count(":") >= 2 else item.rsplit(":", 1)
        if len(fields) < 2:
            raise InitError(f"replica {item!r}: expected HOST:GRPC_PORT or HOST:GRPC_PORT:RAFT_PORT")
        host = _host(fields[0], f"replica {item!r}")
        grpc_port = _port(fields[1], f"replica {item!r}")
        what = f"replica {item!r}"
        raft_port = _port(fields[2], what) if len(fields) == 3 else grpc_port + RAFT_PORT_OFFSET
        if raft_port > 65535:
            raise InitError(f"replica {item!r}: the Raft port {raft_port} (gRPC + {RAFT_PORT_OFFSET}) "
                            "is out of range: give it as HOST:GRPC:RAFT")
        replicas.append(ReplicaAddress(i, host, grpc_port, raft_port))
    if not replicas:
        raise InitError("at least one replica")
    endpoints = [e for r in replicas for e in (r.grpc, r.raft)]
    if len(set(endpoints)) != len(endpoints):
        raise InitError("two replicas (or a replica's gRPC and Raft ports) share an address: "
                        + ", ".join(sorted({e for e in endpoints if endpoints.count(e) > 1})))
    return tuple(replicas)


def parse_names(text: str, what: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    for name in names:
        _host(name, what)
    if len(set(names)) != len(names):
        raise InitError(f"{what}: a name appears twice")
    return names


def plan(cluster_id: str, replicas: str, workers: str = "", schedulers: str | None = None,
         admin: str = "root", data_dir: str = DEFAULT_DATA_DIR, spool_dir: str = DEFAULT_SPOOL_DIR) -> Plan:
    """The checked plan; `schedulers` None: one on each replica host."""
    if not cluster_id or not all(c.isalnum() or c in "_." for c in cluster_id):
        raise InitError("the cluster id must be letters, digits, _ or . (no '-')")
    addresses = parse_replicas(replicas)
    hosts = (tuple(dict.fromkeys(r.host for r in addresses)) if schedulers is None
             else parse_names(schedulers, "schedulers"))
    if not admin or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", admin):
        raise InitError(f"admin {admin!r}: a user name")
    for what, path in (("data dir", data_dir), ("spool dir", spool_dir)):
        if not path.startswith("/"):
            raise InitError(f"the {what} must be an absolute path, not {path!r}")
    return Plan(cluster_id, addresses, parse_names(workers, "workers"), hosts, admin, data_dir, spool_dir)


def write(plan: Plan, out: Path) -> list[Path]:
    """Write every bundle under `out` (which must not exist or be empty); the host directories."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InitError(f"{out} exists and is not empty: xce init never overwrites (a new CA would lock "
                        "out every daemon holding the old one)")
    out.mkdir(parents=True, exist_ok=True, mode=0o755)
    ca = out / "ca"
    ca.mkdir(mode=0o700)
    pki.init_ca(ca, plan.cluster_id)
    admin = out / "admin"
    admin.mkdir(mode=0o700)
    token, digest = new_token()
    write_private(admin / "token", (token + "\n").encode())
    password = secrets.token_hex(24)
    cluster_toml = _cluster_toml(plan, digest)
    replica_hosts = {r.host for r in plan.replicas}
    client_cert, client_key = pki.issue(ca, "client", "xce", out=out / "client")
    written = []
    for host in plan.hosts():
        etc = out / "hosts" / host
        tls = etc / "tls"
        tls.mkdir(parents=True, mode=0o755)
        etc.chmod(0o755)
        tls.chmod(0o755)
        _copy(ca / "ca.crt", tls / "ca.crt", 0o644)
        _copy(client_cert, tls / client_cert.name, 0o644)
        _copy(client_key, tls / client_key.name, 0o644)  # proves nothing; every user's CLI reads it
        write_private(etc / "cluster.toml", cluster_toml.encode(), mode=0o644)
        if host in replica_hosts:
            write_private(etc / "secret", (password + "\n").encode())
        for replica in plan.replicas:
            if replica.host == host:
                pki.issue(ca, "replica", str(replica.id), sans=[host], out=tls)
        if host in plan.schedulers:
            pki.issue(ca, "scheduler", f"sched-{host}", out=tls)
        if host in plan.workers:
            pki.issue(ca, "worker", host, out=tls)
            write_private(etc / "worker.toml", _worker_toml(plan, host).encode(), mode=0o644)
        written.append(etc)
    shutil.rmtree(out / "client")
    write_private(out / "README.txt", readme(plan).encode(), mode=0o644)
    return written


def add_replica(out: Path, replica_id: int, address: str) -> Path:
    """The bundle of a new replica (module docstring) in OUT/hosts/HOST; its directory."""
    out = Path(out)
    ca = out / "ca"
    if not (ca / "ca.key").exists():
        raise InitError(f"{out} is not an `xce init` output: no {ca / 'ca.key'}")
    if replica_id <= 0:
        raise InitError("the replica id is a positive number")
    (new,) = parse_replicas(address)
    new = ReplicaAddress(replica_id, new.host, new.grpc_port, new.raft_port)
    source = next((d for d in sorted((out / "hosts").glob("*")) if (d / "secret").exists()), None)
    if source is None:
        raise InitError(f"no replica host's bundle under {out / 'hosts'} to take the password and the "
                        "cluster file from")
    cluster_toml = (source / "cluster.toml").read_text()
    for line in cluster_toml.splitlines():
        if line.strip() == f"id = {replica_id}" or f'"{new.grpc}"' in line or f'"{new.raft}"' in line:
            raise InitError(f"replica {replica_id}, or its address, is in {source / 'cluster.toml'} already")
    etc = out / "hosts" / new.host
    if etc.exists():
        raise InitError(f"{etc} exists: the new replica's host needs a bundle of its own (choose another "
                        "host, or move that bundle away)")
    tls = etc / "tls"
    tls.mkdir(parents=True, mode=0o755)
    etc.chmod(0o755)
    for name in ("ca.crt", "client-xce.crt", "client-xce.key"):
        _copy(source / "tls" / name, tls / name, 0o644)
    entry = f'\n[[replicas]]  # added by xce init-replica\nid = {replica_id}\ngrpc = "{new.grpc}"\n' \
            f'raft = "{new.raft}"\n'
    write_private(etc / "cluster.toml", (cluster_toml + entry).encode(), mode=0o644)
    _copy(source / "secret", etc / "secret", 0o600)
    pki.issue(ca, "replica", str(replica_id), sans=[new.host], out=tls)
    write_private(etc / f"controller-{replica_id}.env", b"XCE_CONTROLLER_ARGS=--join\n", mode=0o644)
    return etc


def _cluster_toml(plan: Plan, admin_digest: str) -> str:
    lines = [f'cluster_id = "{plan.cluster_id}"', 'password_file = "secret"  # replica hosts only',
             f'data_dir = "{plan.data_dir}"', f'default_queue = "{plan.queues[0][0]}"',
             "max_slots_per_job = 1024", ""]
    for r in plan.replicas:
        lines += ["[[replicas]]", f"id = {r.id}", f'grpc = "{r.grpc}"', f'raft = "{r.raft}"', ""]
    lines += ["[tls]", 'ca = "tls/ca.crt"', 'client_cert = "tls/client-xce.crt"',
              'client_key = "tls/client-xce.key"', "",
              "[[auth.tokens]]  # the first admin's token (OUT/admin/token); more with `xce token create`",
              f'sha256 = "{admin_digest}"', f'user = "{plan.admin}"', 'role = "cluster_admin"', ""]
    for name, priority in plan.queues:
        lines += ["[[queues]]", f'name = "{name}"', f"priority = {priority}", ""]
    return "\n".join(lines)


def _worker_toml(plan: Plan, host: str) -> str:
    controllers = ", ".join(f'"{r.grpc}"' for r in plan.replicas)
    return "\n".join([
        f'name = "{host}"', f"controllers = [{controllers}]", 'ca = "tls/ca.crt"',
        f'tls_cert = "tls/worker-{host}.crt"', f'tls_key = "tls/worker-{host}.key"',
        f'spool_dir = "{plan.spool_dir}"',
        "# slots = 8          # default: the CPU count", "# memory_mb = 64000  # default: MemTotal",
        "# tags = [\"ssd\"]", ""])


def readme(plan: Plan) -> str:
    replicas = "\n".join(f"  replica {r.id}: {r.host}  gRPC {r.grpc_port}, Raft {r.raft_port}"
                         for r in plan.replicas)
    return f"""XCE deployment bundle for cluster {plan.cluster_id}, made by `xce init`.

{replicas}
  schedulers: {", ".join(f"sched-{h} on {h}" for h in plan.schedulers) or "none"}
  workers: {", ".join(plan.workers) or "none"}

On each host, copy hosts/HOST/ to /etc/xce with its modes (as root):

  rsync -a hosts/HOST/ HOST:/etc/xce/

then install the units and start the daemons (docs/DEPLOY.md in the XCE
sources says it step by step). ca/ holds the CA's key: keep it off the
hosts. admin/token is the first cluster admin's ({plan.admin}) token: put it
in that user's ~/.config/xce/token (mode 0600) and make more with
`xce token create`.

The replicas' state lives in {plan.data_dir}, the workers' spools in {plan.spool_dir}.
"""


def _copy(source: Path, target: Path, mode: int) -> None:
    write_private(target, source.read_bytes(), mode=mode)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _host(text: str, what: str) -> str:
    if _is_ip(text) or _HOST.match(text):
        return text
    raise InitError(f"{what}: {text!r} is not a host name or IP address")


def _port(text: str, what: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise InitError(f"{what}: {text!r} is not a port (1-65535)")
    return int(text)

