"""A local cluster of controller processes: `xce cluster up`, tests, bench, soak.

Each replica is a real `xce controller` process on loopback with its own
LMDB files under the data directory. `LocalCluster` writes the configuration
(free ports, a fresh random password, file mode 0600) once, starts, kills and
restarts replicas, and always stops what it started.

Security comes set up: a cluster CA under `tls/` with a certificate for each
replica, the scheduler, each worker and the shared client certificate, and an
admin token for the user who made the cluster (`admin.token`, 0600, found by
the CLI; its hash is a bootstrap token in cluster.toml).
"""

from __future__ import annotations

import functools
import os
import pwd
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import grpc

from client.channel import Client, XceError
from client.credentials import ADMIN_TOKEN_FILE, Credentials, for_cluster, new_token, read_token_file
from xce import pki
from xce.private import write_private

if TYPE_CHECKING:
    from controller.config import Replica as ConfigReplica
    from xce.v1 import api_pb2 as api


def free_ports(count: int) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def write_config(data: Path, replicas: int = 3, base_port: int = 0, cluster_id: str = "local",
                 extra: str = "", hosts: Sequence[str] | None = None, insecure: bool = False,
                 metrics: bool = False) -> Path:
    """Write data/cluster.toml unless it exists; return its path. `hosts`: each
    replica's address (default 127.0.0.1 for all)."""
    # 0711: others may pass through to the workers' spools (job owners reach users/<owner>/ there),
    # never list; what is secret inside is 0600 (keys, password, token) or 0700 (each replica's files).
    data.mkdir(parents=True, exist_ok=True, mode=0o711)
    data.chmod(0o711)
    path = data / "cluster.toml"
    if path.exists():
        return path
    ports = ([base_port + i for i in range(2 * replicas)] if base_port else free_ports(2 * replicas))
    write_private(data / "secret", secrets.token_hex(24).encode())
    tls = data / "tls"
    pki.init_ca(tls, cluster_id)
    pki.issue(tls, "client", "xce")
    token, digest = new_token()
    write_private(data / ADMIN_TOKEN_FILE, (token + "\n").encode())
    lines = [f'cluster_id = "{cluster_id}"', 'password_file = "secret"', 'data_dir = "."',
             'default_queue = "normal"', "max_slots_per_job = 1024", ""]
    for i in range(replicas):
        host = hosts[i] if hosts else "127.0.0.1"
        pki.issue(tls, "replica", str(i + 1), sans=[host, "localhost"])
        lines += ["[[replicas]]", f"id = {i + 1}", f'grpc = "{host}:{ports[i]}"',
                  f'raft = "{host}:{ports[replicas + i]}"',
                  *([f'metrics = "{host}:{free_ports(1)[0]}"'] if metrics else []), ""]
    lines += ["[tls]", 'ca = "tls/ca.crt"', 'client_cert = "tls/client-xce.crt"',
              'client_key = "tls/client-xce.key"', *(["insecure = true"] if insecure else []), "",
              "[[auth.tokens]]", f'sha256 = "{digest}"', f'user = "{_me()}"', 'role = "cluster_admin"', ""]
    lines += ["[[queues]]", 'name = "normal"', "priority = 30", "",
              "[[queues]]", 'name = "priority"', "priority = 43", "",
              "[[queues]]", 'name = "idle"', "priority = 20", ""]
    write_private(path, ("\n".join(lines) + extra).encode())
    return path


def _me() -> str:
    return pwd.getpwuid(os.geteuid()).pw_name


class LocalCluster:
    def __init__(self, data: Path, replicas: int = 3, base_port: int = 0, extra_config: str = "",
                 log_to_files: bool = True, hosts: Sequence[str] | None = None, insecure: bool = False,
                 prefix: Callable[[int], Sequence[str]] | None = None, cluster_id: str = "local",
                 metrics: bool = False) -> None:
        """`hosts` and `prefix`: each replica's address, and what to run it under
        (soak/netns.py puts each replica in a network namespace of its own)."""
        from controller.config import load

        self.data = Path(data)
        self.prefix = prefix
        self.config_path = write_config(self.data, replicas, base_port, cluster_id=cluster_id,
                                        extra=extra_config, hosts=hosts, insecure=insecure, metrics=metrics)
        self.config = load(self.config_path)
        self.log_to_files = log_to_files
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.env: dict[int, dict[str, str]] = {}  # per replica, over this process's environment
        self.args: dict[int, list[str]] = {}  # per replica, more arguments (--force-new-cluster)
        # Replicas added after the cluster was made (`new_replica`): each has a cluster file of its
        # own, this one's with itself added, and starts with --join until it is a member.
        self.joining: dict[int, Path] = {}

    @property
    def addresses(self) -> list[str]:
        return [r.grpc for r in self.config.replicas]

    @property
    def admin_token(self) -> str:
        token = read_token_file(self.data / ADMIN_TOKEN_FILE, required=True)
        assert token is not None
        return token

    @functools.cached_property
    def credentials(self) -> Credentials:
        """The cluster admin's: the client certificate and the admin token."""
        return for_cluster(self.config_path, token=self.admin_token)

    def credentials_for(self, token: str | None) -> Credentials:
        """A person's credentials: the shared client certificate and `token` (None: no token at all)."""
        return for_cluster(self.config_path, token=token, use_token_search=False)

    def new_token(self, user: str, role: str = "user", expires_ms: int = 0,
                  scope: api.TokenScope | None = None) -> str:
        """A token for `user` with `role` (and `scope`), created by the admin."""
        token, digest = new_token()
        with self.client() as client:
            client.create_token(digest, user, role, expires_ms, scope=scope)
        return token

    def new_user(self, user: str, role: str = "user", expires_ms: int = 0) -> Credentials:
        """That user's credentials, with a new token."""
        return self.credentials_for(self.new_token(user, role, expires_ms))

    def worker_credentials(self, name: str) -> Credentials:
        """What the worker of host `name` presents: its certificate, no token."""
        return self.credentials_for(None).with_certificate(*self.certificate("worker", name))

    def scheduler_credentials(self, name: str) -> Credentials:
        """What scheduler `name` presents: its certificate, no token."""
        return self.credentials_for(None).with_certificate(*self.certificate("scheduler", name))

    def certificate(self, role: str, name: str) -> tuple[Path, Path]:
        """A certificate of the cluster CA for a worker, scheduler or client (issued once)."""
        tls = self.data / "tls"
        cert, key = tls / f"{role}-{name}.crt", tls / f"{role}-{name}.key"
        if not cert.exists():
            pki.issue(tls, role, name)
        return cert, key

    def address(self, replica_id: int) -> str:
        return self.replica_config(replica_id).grpc

    def replica_config(self, replica_id: int) -> ConfigReplica:
        from controller.config import load

        if replica_id in self.joining:
            return load(self.joining[replica_id]).replica(replica_id)
        return self.config.replica(replica_id)

    def replica_ids(self) -> list[int]:
        return sorted({r.id for r in self.config.replicas} | set(self.joining))

    def new_replica(self, replica_id: int, host: str = "127.0.0.1") -> ConfigReplica:
        """A replica to add with `xce member add`: its certificate, free ports, and its own cluster file
        (this cluster's, with it added). `start([replica_id])` runs it with --join."""
        grpc_port, raft_port = free_ports(2)
        pki.issue(self.data / "tls", "replica", str(replica_id), sans=[host, "localhost"])
        path = self.data / f"cluster-{replica_id}.toml"
        metrics = f'metrics = "{host}:{free_ports(1)[0]}"\n' if any(r.metrics for r in self.config.replicas) \
            else ""
        entry = (f'\n[[replicas]]\nid = {replica_id}\ngrpc = "{host}:{grpc_port}"\n'
                 f'raft = "{host}:{raft_port}"\n{metrics}')
        write_private(path, self.config_path.read_bytes() + entry.encode())
        self.joining[replica_id] = path
        return self.replica_config(replica_id)

    def start(self, ids: Sequence[int] | None = None) -> None:
        for replica_id in self.replica_ids():
            if ids is None and replica_id in self.joining:
                continue  # started by name only
            if ids is None or replica_id in ids:
                self._spawn(replica_id)

    def _spawn(self, replica_id: int) -> None:
        config = self.joining.get(replica_id, self.config_path)
        cmd = [*(self.prefix(replica_id) if self.prefix else []), sys.executable, "-m", "cli",
               "controller", "--config", str(config), "--id", str(replica_id),
               *(["--join"] if replica_id in self.joining else []), *self.args.get(replica_id, [])]
        env = {**os.environ, **self.env.get(replica_id, {})}
        if not self.log_to_files:
            self.procs[replica_id] = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, env=env)
            return
        with open(self.data / f"replica-{replica_id}.log", "ab") as out:
            self.procs[replica_id] = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                                      stdin=subprocess.DEVNULL, env=env)

    def kill(self, replica_id: int, sig: int = signal.SIGKILL) -> None:
        proc = self.procs.pop(replica_id, None)
        if proc is not None and proc.poll() is None:
            proc.send_signal(sig)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def restart(self, replica_id: int) -> None:
        self.kill(replica_id)
        self._spawn(replica_id)

    def stop(self) -> None:
        """SIGTERM everything, then SIGKILL what is left after 5 s."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + 5
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()

    def client(self, deadline_s: float = 30.0, credentials: Credentials | None = None) -> Client:
        return Client(self.addresses, credentials or self.credentials, deadline_s=deadline_s)

    def leader(self, timeout_s: float = 20.0, exclude: int | None = None) -> int:
        """The id of a replica that leads and serves writes, waiting for one."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for replica_id in self.replica_ids():
                if replica_id == exclude or replica_id not in self.procs:
                    continue
                address = self.address(replica_id)
                try:
                    with Client([address], self.credentials, deadline_s=0.5, call_timeout_s=0.5) as client:
                        status = client.status(local_only=True).replicas[0]
                except XceError:
                    continue
                if status.role == "leader" and self._serving(address) and self._announced(address):
                    return replica_id
            time.sleep(0.05)
        raise TimeoutError(f"no leader within {timeout_s} s")

    def _announced(self, address: str) -> bool:
        """Every running replica's capabilities are committed, and with every member's, the
        configuration push of their entry format too: the leader proposes no more announcements
        or pushes unless one restarts with other code (tests compare revisions)."""
        try:
            with Client([address], self.credentials, deadline_s=0.3, call_timeout_s=0.3,
                        follow_leader=False) as client:
                status = client.status(local_only=True)
        except XceError:
            return False
        announced = set(status.announced_members)
        members = {m.id for m in status.members}
        if members <= announced and not status.config_current:
            return False
        running = {rid for rid, proc in self.procs.items() if proc.poll() is None}
        return running & members <= announced

    def _serving(self, address: str) -> bool:
        # A write-free probe: a follower or a catching-up leader refuses
        # ModifyJob before looking at the job; a serving leader says NOT_FOUND.
        try:
            with Client([address], self.credentials, deadline_s=0.3, call_timeout_s=0.3,
                        follow_leader=False) as client:
                client.modify(0, priority=0)
        except XceError as exc:
            return bool(exc.code == grpc.StatusCode.NOT_FOUND)
        return True

    @contextmanager
    def running(self) -> Iterator[LocalCluster]:
        """Started, with a serving leader; stopped on the way out whatever happens."""
        try:
            self.start()
            self.leader()
            yield self
        finally:
            self.stop()

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class LocalScheduler:
    """An `xce scheduler` process for a LocalCluster; killed at the end."""

    def __init__(self, cluster: LocalCluster, name: str = "sched-1", lease_s: float = 3.0,
                 metrics: str = "", env: dict[str, str] | None = None) -> None:
        """`env`: more of its environment, over this process's (soak/clockfault.py's clock)."""
        self.cluster = cluster
        self.name = name
        self.lease_s = lease_s
        self.metrics = metrics
        self.env = dict(env or {})
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        cert, key = self.cluster.certificate("scheduler", self.name)
        env = {**os.environ, **self.env}
        env.pop("XCE_TOKEN", None)
        if self.cluster.config.tls.insecure:  # no certificates: a token of role scheduler names it
            env["XCE_TOKEN"] = self.cluster.new_token(self.name, "scheduler")
        with open(self.cluster.data / f"{self.name}.log", "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "cli", "--cluster", str(self.cluster.config_path),
                 "scheduler", "--id", self.name, "--lease-s", str(self.lease_s), "--cert", str(cert),
                 "--key", str(key), *(["--metrics", self.metrics] if self.metrics else [])], env=env,
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def pid(self) -> int:
        assert self.proc is not None, "not started"
        return self.proc.pid

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=10)
        self.proc = None


class LocalGateway:
    """An `xce gateway` process (the REST API) for a LocalCluster, on a free port; killed at the end."""

    def __init__(self, cluster: LocalCluster, name: str = "gateway", args: Sequence[str] = ()) -> None:
        self.cluster = cluster
        self.name = name
        self.args = list(args)  # more of `xce gateway`'s options (its limits)
        self.port = free_ports(1)[0]
        self.key: str | None = None
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 30.0) -> None:
        """Start it and wait until it answers."""
        self.launch()
        self.wait_serving(timeout_s)

    def launch(self) -> None:
        """Start it; `wait_serving` waits for it (other daemons may start meanwhile)."""
        if self.key is None:  # its own key (role gateway) for the event stream; callers bring theirs
            self.key = self.cluster.new_token(self.name, "gateway")
        env = {**os.environ, "XCE_TOKEN": self.key}
        with open(self.cluster.data / f"{self.name}.log", "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "cli", "--cluster", str(self.cluster.config_path), "gateway",
                 "--listen", f"127.0.0.1:{self.port}", *self.args], env=env,
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def wait_serving(self, timeout_s: float = 30.0) -> None:
        """Until it answers (its /metrics, which needs no key and builds nothing)."""
        import urllib.request

        assert self.proc is not None, "not launched"
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the gateway exited with {self.proc.returncode}: see {self.name}.log")
            try:
                with urllib.request.urlopen(f"{self.url}/metrics", timeout=2):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the gateway did not answer within {timeout_s:.0f} s") from None
                time.sleep(0.05)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=10)
        self.proc = None


class LocalWorkers:
    """`xce worker` processes joined to a LocalCluster; every one is killed at the end."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.env: dict[str, dict[str, str]] = {}  # per worker, over this process's environment

    def config_path(self, name: str) -> Path:
        return self.cluster.data / f"worker-{name}.toml"

    def spool(self, name: str) -> Path:
        return self.cluster.data / f"xce-spool-{name}"

    def start(self, name: str, slots: int, extra: str = "", prefix: Sequence[str] = ()) -> None:
        """`prefix`: what to run the worker under (a network namespace's `ip netns exec NS`)."""
        path = self.config_path(name)
        cert, key = self.cluster.certificate("worker", name)
        # Jobs run as their owners; the tests' and demo's owner is whoever made the cluster, root in CI.
        root = "allow_root_jobs = true\n" if os.geteuid() == 0 and "allow_root_jobs" not in extra else ""
        token = ""
        if self.cluster.config.tls.insecure:  # no certificates: a token of role worker names the host
            token_path = self.cluster.data / f"worker-{name}.token"
            write_private(token_path, self.cluster.new_token(name, "worker").encode())
            token = f'token_file = "{token_path}"\n'
        path.write_text(f'cluster_config = "cluster.toml"\nname = "{name}"\nslots = {slots}\n'
                        f'tls_cert = "{cert}"\ntls_key = "{key}"\n{token}{root}{extra}')
        with open(self.cluster.data / f"worker-{name}.log", "ab") as out:
            self.procs[name] = subprocess.Popen(
                [*prefix, sys.executable, "-m", "cli", "worker", "--config", str(path)],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**os.environ, **self.env.get(name, {})})

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        proc = self.procs.pop(name)
        proc.send_signal(sig)
        proc.wait(timeout=10)

    def stop(self) -> None:
        """Kill the workers, and the jobs they left running (they outlive a worker on purpose)."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        self.procs.clear()
        kill_jobs_under(self.cluster.data)


def kill_jobs_under(data: Path) -> None:
    """SIGKILL every job process group whose worker spool lies under `data`."""
    marker = f"XCE_SPOOL={Path(data).resolve()}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if not any(item.startswith(marker) for item in env):
            continue
        pid = int(entry.name)
        try:  # its group: the shim that leads it (a served shim's environment is its server's)
            group = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[2])
        except (OSError, ValueError, IndexError):
            group = 0
        for kill, target in ((os.killpg, group), (os.kill, pid)):
            if target > 1 and target != os.getpgrp():
                try:
                    kill(target, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass


class LocalStack:
    """What `xce cluster up` runs: the replicas, a scheduler, workers and the REST gateway, every one
    serving Prometheus /metrics on a free loopback port of its own (the gateway on its own address);
    `xce status` lists them all (the replicas' from the cluster file, the others' as they connected)."""

    def __init__(self, data: Path, replicas: int = 3, base_port: int = 0, workers: int = 2, slots: int = 4,
                 extra_config: str = "") -> None:
        self.cluster = LocalCluster(data, replicas, base_port, extra_config=extra_config, metrics=True)
        # A cluster file written without metrics addresses (an older data directory): ports for this run.
        for replica in self.cluster.config.replicas:
            if not replica.metrics:
                self.cluster.args[replica.id] = ["--metrics", f"127.0.0.1:{free_ports(1)[0]}"]
        ports = free_ports(workers + 1)
        self.scheduler = LocalScheduler(self.cluster, metrics=f"127.0.0.1:{ports[0]}")
        self.fleet = LocalWorkers(self.cluster)
        self.workers = {f"node{i + 1}": f"127.0.0.1:{port}" for i, port in enumerate(ports[1:])}
        self.slots = slots
        self.gateway = LocalGateway(self.cluster)

    def start(self, leader_timeout_s: float = 30.0) -> int:
        """Start everything, and wait until the leader and the gateway serve; the leader's id."""
        self.cluster.start()
        leader = self.cluster.leader(timeout_s=leader_timeout_s)
        self.gateway.launch()  # the slowest to start: the others start while it does
        self.scheduler.start()
        for name, metrics in self.workers.items():
            self.fleet.start(name, self.slots, f'metrics = "{metrics}"\n')
        self.gateway.wait_serving()
        return leader

    def stop(self) -> None:
        """Stop everything it started, whatever state it is in."""
        self.gateway.kill(signal.SIGTERM)
        self.scheduler.kill(signal.SIGTERM)
        self.fleet.stop()
        self.cluster.stop()


def up(data: Path, replicas: int, base_port: int, workers: int = 2, slots: int = 4) -> int:
    """`xce cluster up`: replicas, a scheduler, workers and the gateway; run until Ctrl-C."""
    stack = LocalStack(data, replicas, base_port, workers, slots)
    cluster = stack.cluster
    stopping = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        leader = stack.start()
        print(f"xce: cluster {cluster.config.cluster_id} up: {replicas} replicas (leader {leader}), "
              f"a scheduler, {workers} workers of {slots} slots, the REST gateway at {stack.gateway.url}")
        print(f"xce: admin token for {_me()} in {cluster.data / ADMIN_TOKEN_FILE} (the CLI finds it there)")
        if os.geteuid() == 0:
            print("xce: started as root: this local cluster's workers run root's jobs "
                  "(allow_root_jobs = true); deployments default to false")
        print(f"xce: configuration {cluster.config_path}")
        print(f"xce: controllers {','.join(cluster.addresses)}")
        print("xce: every daemon serves Prometheus /metrics; `xce status` lists where")
        print(f"xce: try `XCE_DATA={data} xce submit -- sleep 1`; Ctrl-C stops the cluster", flush=True)
        while not stopping:
            for replica_id, proc in list(cluster.procs.items()):
                if proc.poll() is not None:
                    print(f"xce: replica {replica_id} exited with {proc.returncode}; restarting", flush=True)
                    cluster.restart(replica_id)
            time.sleep(0.2)
    finally:
        print("xce: stopping the cluster", flush=True)
        stack.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(up(Path(os.environ.get("XCE_DATA", "xce-data")), 3, 0))
