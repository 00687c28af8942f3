"""Who may do what, tried by a real unprivileged user (uid 65534) against a root cluster.

Each test is an attack that worked before identity landed: the
attacker is the `xce` command run as `nobody` through setpriv, with nobody's
own token, the shared client certificate, and whatever it chooses to put in
its environment or its requests.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from conftest import NOBODY, nobody_cli_env, xce_as_nobody

from client.channel import Client, XceError
from client.credentials import Credentials, new_token, token_hash
from ops.local_cluster import LocalCluster, LocalWorkers
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

pytestmark = [pytest.mark.cluster,
              pytest.mark.skipif(os.geteuid() != 0, reason="attacks as another uid need root to start them")]

ROOT = Path(__file__).resolve().parents[2]
HOSTS = "\n[hosts]\nheartbeat_s = 0.2\nheartbeat_timeout_s = 1.5\n"


@pytest.fixture(scope="module")
def shared() -> Iterator[Path]:
    """A directory nobody may use: its jobs' working directory, and the CLI's TLS files."""
    path = Path(tempfile.mkdtemp(prefix="xce-identity-", dir="/tmp"))
    path.chmod(0o777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def fleet(reachable_by_nobody: None, shared: Path) -> Iterator[tuple[LocalCluster, LocalWorkers]]:
    # The workers' spools must be reachable by job owners (their output directories are in them),
    # as /var/spool is: the cluster lives in a directory others may pass through (0711), not pytest's 0700.
    home = Path(tempfile.mkdtemp(prefix="xce-identity-cluster-", dir="/tmp"))
    home.chmod(0o711)
    cluster = LocalCluster(home / "cluster", extra_config=HOSTS)
    workers = LocalWorkers(cluster)
    try:
        cluster.start()
        cluster.leader()
        workers.start("w1", 4)
        workers.start("w2", 4)
        _wait(lambda: _hosts_ok(cluster) >= {"w1", "w2"}, "workers joined")
        yield cluster, workers
    finally:
        workers.stop()
        cluster.stop()
        shutil.rmtree(home, ignore_errors=True)


class Attacker:
    """The xce command as uid 65534, with its own token (or none)."""

    def __init__(self, cluster: LocalCluster, shared: Path, token: str | None) -> None:
        self.cluster = cluster
        self.shared = shared
        self.token = token
        self.env = nobody_cli_env(cluster, shared) | ({"XCE_TOKEN": token} if token else {})

    def run(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return xce_as_nobody(list(args), {**self.env, **(env or {})}, self.shared)

    def refused(self, code: str, *args: str) -> str:
        done = self.run(*args)
        assert done.returncode != 0 and code in done.stderr, (args, done.returncode, done.stdout, done.stderr)
        return done.stderr


@pytest.fixture(scope="module")
def nobody(fleet: tuple[LocalCluster, LocalWorkers], shared: Path) -> Attacker:
    cluster, _ = fleet
    return Attacker(cluster, shared, cluster.new_token("nobody"))


def _wait(condition: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting: {what}")


def _wait_job(cluster: LocalCluster, job_id: int, condition: Callable[[api.Job], bool], what: str) -> api.Job:
    """Wait for the job to get there; else fail with the job and the workers' logs."""
    deadline = time.monotonic() + 30.0
    while time.monotonic() < deadline:
        job = _job(cluster, job_id)
        if condition(job):
            return job
        time.sleep(0.05)
    logs = "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}"
                     for p in sorted(cluster.data.glob("worker-*.log")))
    raise AssertionError(f"timed out waiting: {what}\n{job}\n{logs}")


def _hosts_ok(cluster: LocalCluster) -> set[str]:
    with cluster.client() as client:
        return {h.spec.name for h in client.list_hosts().hosts if h.status == api.HOST_OK}


def _job(cluster: LocalCluster, job_id: int) -> api.Job:
    with cluster.client() as client:
        return client.get_job(job_id)


def _revision(cluster: LocalCluster) -> int:
    with Client([cluster.address(cluster.leader())], cluster.credentials) as client:
        return client.status(local_only=True).replicas[0].applied_index


# What the cluster commits on its own while an attack runs: its hosts' load and liveness (a busy
# machine can miss a heartbeat), and the replicas' announcements. An attack may commit nothing.
BACKGROUND = {"host_loads", "host_status", "host_statuses", "announce"}


def _nothing_written_since(cluster: LocalCluster, revision: int, refusals: bool = False) -> None:
    """Every entry committed after `revision` (read from the Sync stream's events) is the cluster's
    own background, none from the attacker; but, with `refusals`, the audit rows of its denied job
    writes (recorded before it is told: each a REFUSED row, checked in the trail)."""
    if refusals:
        with cluster.client() as client:
            rows = client.list_audit(api.ListAuditRequest(principal="nobody"))
        assert all(r.outcome == api.REFUSED for r in rows if r.revision > revision), rows
    upto = _revision(cluster)
    if upto <= revision:
        return
    with cluster.client() as client:
        cluster_id = client.status().cluster_id
    with cluster.credentials.channel(cluster.address(cluster.leader())) as channel:
        sync = channel.unary_stream("/xce.v1.SyncService/Sync",
                                    request_serializer=log.SyncRequest.SerializeToString,
                                    response_deserializer=log.SyncMessage.FromString)
        call = sync(log.SyncRequest(from_revision=revision, cluster_id=cluster_id),
                    metadata=cluster.credentials.metadata(), timeout=30)
        for message in call:
            body = message.WhichOneof("body")
            assert body == "event", f"the Sync stream sent {body} (revision {revision} compacted?)"
            event = message.event
            recorded = refusals and event.kind == "audit"
            assert recorded or (event.kind in BACKGROUND and not any("nobody" in p for p in event.by)), \
                f"entry {event.revision} ({event.kind}, by {list(event.by)}) committed during the attack"
            if event.revision >= upto:
                break
        call.cancel()


def test_the_check_that_an_attack_wrote_nothing_sees_a_write(
        fleet: tuple[LocalCluster, LocalWorkers]) -> None:
    cluster, _ = fleet
    before = _revision(cluster)
    with cluster.client() as client:
        job = client.submit([api.JobSpec(command=["true"], cwd="/tmp")]).jobs[0]
    with pytest.raises(AssertionError, match=r"\(submit, by \['.*'\]\) committed during the attack"):
        _nothing_written_since(cluster, before)
    with cluster.client() as client:
        client.control(job.id, api.KILL)


# ---------------------------------------------------------------- jobs run as their owner


def test_user_root_in_the_environment_runs_as_the_caller(fleet: tuple[LocalCluster, LocalWorkers],
                                                         nobody: Attacker, shared: Path) -> None:
    cluster, _ = fleet
    done = nobody.run("submit", "--json", "-o", "ids", "--", "sh", "-c", "id -u; id -g; echo $HOME $USER",
                      env={"USER": "root", "LOGNAME": "root"})
    assert done.returncode == 0, done.stderr
    job_id = int(json.loads(done.stdout)["id"])
    assert _job(cluster, job_id).spec.user == "nobody"  # the owner is who proved it
    with cluster.client() as client:
        client.run(job_id, "w1")
    _wait_job(cluster, job_id, lambda j: j.state == api.DONE, "the job ran")
    uid, gid, home, user = (shared / "ids").read_text().split()
    assert (int(uid), int(gid)) == (NOBODY.pw_uid, NOBODY.pw_gid)
    assert (home, user) == (NOBODY.pw_dir, "nobody")  # a clean baseline for the owner
    info = (shared / "ids").stat()
    assert info.st_uid == NOBODY.pw_uid and stat.S_IMODE(info.st_mode) == 0o600  # opened by the owner


def test_the_job_environment_never_reaches_a_privileged_process(fleet: tuple[LocalCluster, LocalWorkers],
                                                                nobody: Attacker, shared: Path) -> None:
    """LD_PRELOAD and PYTHONPATH planted by the submitter run, if at all, as the submitter."""
    cluster, _ = fleet
    record = shared / "euids"
    evil = shared / "evil"
    evil.mkdir(mode=0o755, exist_ok=True)
    (evil / "sitecustomize.py").write_text(
        f"import os\nopen({str(record)!r}, 'a').write(f'{{os.geteuid()}}\\n')\n")
    env_args = ["PYTHONPATH=" + str(evil)]
    if shutil.which("gcc"):
        source = evil / "evil.c"
        source.write_text('#include <stdio.h>\n#include <unistd.h>\n'
                          '__attribute__((constructor)) static void e(void)'
                          f' {{ FILE *f = fopen("{record}", "a");'
                          ' if (f) { fprintf(f, "%d\\n", (int)geteuid()); fclose(f); } }\n')
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(evil / "evil.so"), str(source)], check=True)
        env_args.append("LD_PRELOAD=" + str(evil / "evil.so"))
    with Client(cluster.addresses, cluster.credentials_for(nobody.token)) as client:
        # The system's python, not this venv's (whose interpreter may live where nobody cannot go).
        python = shutil.which("python3", path="/usr/bin:/bin") or "python3"
        job = client.submit([api.JobSpec(command=[python, "-c", "pass"], cwd=str(shared),
                                         env=dict(a.split("=", 1) for a in env_args))]).jobs[0]
    with cluster.client() as client:
        client.run(job.id, "w2")
    _wait_job(cluster, job.id, lambda j: j.state in (api.DONE, api.EXIT), "the job ended")
    euids = set(record.read_text().split())
    assert euids == {str(NOBODY.pw_uid)}  # the job's own process loaded them; the root shim never did


def test_an_owner_without_an_account_pends_with_a_reason_and_nothing_runs(
        fleet: tuple[LocalCluster, LocalWorkers], shared: Path) -> None:
    cluster, _ = fleet
    marker = shared / "ghost-ran"
    ghost = cluster.new_user("ghost-xce-no-account")
    with Client(cluster.addresses, ghost) as client:
        job = client.submit([api.JobSpec(command=["touch", str(marker)], cwd="/")]).jobs[0]
    with cluster.client() as client:
        client.run(job.id, "w1")
    pending = _wait_job(cluster, job.id, lambda j: j.attempt == 1, "the dispatch failed")
    assert pending.state == api.PEND
    assert "ghost-xce-no-account has no account on host" in pending.pending_reason
    assert not marker.exists()


# ---------------------------------------------------------------- what a user may do to others


def test_another_users_job_and_the_cluster_are_not_the_attackers(fleet: tuple[LocalCluster, LocalWorkers],
                                                                 nobody: Attacker) -> None:
    cluster, _ = fleet
    with cluster.client() as client:
        victim = client.submit([api.JobSpec(command=["sleep", "60"], cwd="/tmp", priority=1)]).jobs[0]
        client.control(victim.id, api.HOLD)
    before = _revision(cluster)
    for args in (["kill", str(victim.id)], ["release", str(victim.id)], ["requeue", str(victim.id)],
                 ["modify", str(victim.id), "--priority", "99"], ["run", str(victim.id), "--host", "w1"],
                 ["queue", "update", "normal", "--closed"], ["queue", "create", "mine"],
                 ["host", "close", "w1"], ["host", "open", "w1"],
                 ["token", "create", "--user", "nobody", "--role", "cluster_admin"], ["token", "list"]):
        stderr = nobody.refused("PERMISSION_DENIED", *args)
        assert "needs " in stderr  # the message names the permission
    _nothing_written_since(cluster, before, refusals=True)
    before = _revision(cluster)
    with Client(cluster.addresses, cluster.credentials_for(nobody.token)) as client:
        lease = api.LeaseRequest(scheduler_id="nobody", duration_s=3600)
        for call in (lambda c: c.call("SchedulerService", "AcquireLease", lease, api.LeaseResponse),
                     lambda c: c.call("SchedulerService", "SubmitDecisions",
                                      api.DecisionBatch(scheduler_id="x"), api.DecisionBatchResponse)):
            with pytest.raises(XceError) as caught:
                call(client)
            assert caught.value.code == grpc.StatusCode.PERMISSION_DENIED
    _nothing_written_since(cluster, before)
    assert _job(cluster, victim.id).state == api.PSUSP


def test_another_users_array_and_its_elements_are_not_the_attackers(fleet: tuple[LocalCluster, LocalWorkers],
                                                                    nobody: Attacker) -> None:
    cluster, _ = fleet
    with cluster.client() as client:
        indices = api.ArraySpec(ranges=[api.IndexRange(start=1, end=1000)])
        array = client.submit([api.JobSpec(command=["sleep", "60"], cwd="/tmp", name="victim",
                                           array=indices)]).jobs[0]
        client.control(str(array.id), api.HOLD)
        element = client.list_jobs([f"array:eq:{array.id}"], page_size=1)[0]
    before = _revision(cluster)
    for target in (str(array.id), f"{array.id}[1-1000]", f"{array.id}[7]", str(element.id)):
        for args in (["release", target], ["kill", target], ["requeue", target],
                     ["modify", target, "--priority", "99"]):
            assert "needs " in nobody.refused("PERMISSION_DENIED", *args)
    _nothing_written_since(cluster, before, refusals=True)  # nothing but the refusals' rows
    with cluster.client() as client:
        assert client.get_job(str(array.id)).array.counts[api.PSUSP] == 1000
        client.control(str(array.id), api.KILL)


def test_a_user_cannot_keep_whole_hosts_in_a_queue_that_does_not_take_exclusive_jobs(
        fleet: tuple[LocalCluster, LocalWorkers], nobody: Attacker) -> None:
    cluster, _ = fleet
    before = _revision(cluster)
    stderr = nobody.refused("INVALID_ARGUMENT", "submit", "-x", "-n", "4", "--", "sleep", "60")
    assert "queue normal does not take exclusive jobs" in stderr
    _nothing_written_since(cluster, before)  # nothing reached the log


def test_a_user_controls_its_own_jobs_within_the_queue_cap(fleet: tuple[LocalCluster, LocalWorkers],
                                                           nobody: Attacker) -> None:
    cluster, _ = fleet
    with cluster.client() as client:
        queue = [q for q in client.list_queues().queues if q.name == "idle"][0]
        queue.max_user_priority = 10
        client.put_queue(queue, create=False)
    done = nobody.run("submit", "--json", "-q", "idle", "--priority", "5", "--", "true")
    assert done.returncode == 0, done.stderr
    job_id = json.loads(done.stdout)["id"]
    assert nobody.run("hold", job_id).returncode == 0
    assert nobody.run("modify", job_id, "--priority", "3").returncode == 0  # lowering is always allowed
    assert "max_user_priority" in nobody.refused("PERMISSION_DENIED", "modify", job_id, "--priority", "11")
    assert "max_user_priority" in nobody.refused("PERMISSION_DENIED", "submit", "-q", "idle", "--priority",
                                                 "50", "--", "true")
    assert nobody.run("kill", job_id).returncode == 0


# ---------------------------------------------------------------- what others see


def test_env_values_are_hidden_from_other_users_and_readonly(fleet: tuple[LocalCluster, LocalWorkers],
                                                            nobody: Attacker) -> None:
    cluster, _ = fleet
    with cluster.client() as client:
        secret = client.submit([api.JobSpec(command=["true"], cwd="/tmp", env={"API_KEY": "s3cr3t"})]).jobs[0]
        client.control(secret.id, api.HOLD)
    for who in (cluster.credentials_for(nobody.token), cluster.new_user("auditor", "readonly")):
        with Client(cluster.addresses, who) as client:
            seen = client.get_job(secret.id)
            assert seen.spec.env["API_KEY"] == "" and "API_KEY" in seen.spec.env
            listed = [j for j in client.list_jobs() if j.id == secret.id]
            assert listed and listed[0].spec.env["API_KEY"] == ""
    done = nobody.run("job", str(secret.id), "--json")
    assert done.returncode == 0 and "s3cr3t" not in done.stdout
    with cluster.client() as client:
        assert client.get_job(secret.id).spec.env["API_KEY"] == "s3cr3t"  # the owner (and admins) see it
    # Sync carries every job in full: only schedulers and admins may open it.
    user = cluster.credentials_for(nobody.token)
    with user.channel(cluster.address(cluster.leader())) as channel:
        sync = _sync_method(channel)
        with pytest.raises(grpc.RpcError) as caught:
            list(sync(log.SyncRequest(), timeout=10, metadata=user.metadata()))
    assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED


# ---------------------------------------------------------------- workers


def _connect(channel: grpc.Channel, metadata: tuple[tuple[str, str], ...], join: str) -> grpc.RpcError:
    connect = channel.stream_stream("/xce.v1.WorkerService/Connect",
                                    request_serializer=api.WorkerMessage.SerializeToString,
                                    response_deserializer=api.ControllerMessage.FromString)
    try:
        list(connect(iter([api.WorkerMessage(join=api.HostSpec(name=join, slots=1))]), timeout=10,
                     metadata=metadata))
    except grpc.RpcError as exc:
        return exc
    raise AssertionError("the stream was not refused")


def test_a_worker_joins_only_as_the_host_of_its_certificate(fleet: tuple[LocalCluster, LocalWorkers],
                                                            nobody: Attacker) -> None:
    cluster, _ = fleet
    leader = cluster.address(cluster.leader())
    before = _revision(cluster)
    with cluster.worker_credentials("w2").channel(leader) as channel:
        refused = _connect(channel, (), "w1")
    assert refused.code() == grpc.StatusCode.PERMISSION_DENIED and "w2" in (refused.details() or "")
    with cluster.credentials_for(None).channel(leader) as channel:  # the client certificate proves no host
        assert _connect(channel, (), "w1").code() == grpc.StatusCode.UNAUTHENTICATED
    user = cluster.credentials_for(nobody.token)
    with user.channel(leader) as channel:  # a person is not a worker
        assert _connect(channel, user.metadata(), "w1").code() == grpc.StatusCode.PERMISSION_DENIED
    with grpc.insecure_channel(leader) as channel:  # no TLS at all: no gRPC status, the handshake fails
        assert _connect(channel, (), "w1").code() == grpc.StatusCode.UNAVAILABLE
    _nothing_written_since(cluster, before)
    assert _hosts_ok(cluster) >= {"w1", "w2"}


def test_no_token_expired_and_revoked_tokens_are_unauthenticated(fleet: tuple[LocalCluster, LocalWorkers],
                                                                 shared: Path) -> None:
    cluster, _ = fleet
    assert "UNAUTHENTICATED" in Attacker(cluster, shared, None).refused("UNAUTHENTICATED", "jobs")
    anyone = cluster.credentials_for(None)
    with anyone.channel(cluster.address(cluster.leader())) as channel:
        who = channel.unary_unary("/xce.v1.AdminService/WhoAmI",
                                  request_serializer=api.WhoAmIRequest.SerializeToString,
                                  response_deserializer=api.WhoAmIResponse.FromString)
        with pytest.raises(grpc.RpcError) as caught:  # not a bearer token
            who(api.WhoAmIRequest(), timeout=10, metadata=(("authorization", "Basic bm9ib2R5Og=="),))
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "Bearer" in (caught.value.details() or "")
    assert Attacker(cluster, shared, "xce_made-up").refused("UNAUTHENTICATED", "jobs")
    expired = cluster.new_token("nobody", expires_ms=int(time.time() * 1000) + 5000)
    assert Attacker(cluster, shared, expired).run("jobs").returncode == 0
    _wait(lambda: Attacker(cluster, shared, expired).run("jobs").returncode != 0, "the token expired", 20)
    assert "expired" in Attacker(cluster, shared, expired).refused("UNAUTHENTICATED", "jobs")
    revoked = cluster.new_token("nobody")
    with cluster.client() as client:
        client.revoke_token(token_hash(revoked)[:16])
    assert "revoked" in Attacker(cluster, shared, revoked).refused("UNAUTHENTICATED", "jobs")


def test_tokens_are_made_listed_and_revoked_by_admins_only(fleet: tuple[LocalCluster, LocalWorkers],
                                                           shared: Path) -> None:
    cluster, _ = fleet
    token, digest = new_token()
    operator = cluster.new_user("op", "operator")
    with Client(cluster.addresses, operator) as client:
        for call in (lambda c: c.create_token(digest, "op", "cluster_admin"), lambda c: c.list_tokens()):
            with pytest.raises(XceError) as caught:
                call(client)
            assert caught.value.code == grpc.StatusCode.PERMISSION_DENIED
    with cluster.client() as client:
        made = client.create_token(digest, "carol", "user").token
        listed = {t.id: t for t in client.list_tokens()}
        assert listed[made.id].user == "carol" and listed[made.id].created_by == pwd.getpwuid(0).pw_name
        assert token not in repr(listed) and digest not in repr(listed)  # never the token, not even its hash
    assert Attacker(cluster, shared, token).run("whoami").stdout.startswith("carol (role user")


# ---------------------------------------------------------------- at rest


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_files_at_rest_are_their_owners_only(fleet: tuple[LocalCluster, LocalWorkers],
                                            nobody: Attacker) -> None:
    cluster, _ = fleet
    done = nobody.run("submit", "--json", "--", "true")  # default output: the owner's spool directory
    job_id = int(json.loads(done.stdout)["id"])
    with cluster.client() as client:
        client.run(job_id, "w1")
    _wait_job(cluster, job_id, lambda j: j.state == api.DONE, "the job ran")
    for replica in cluster.config.replicas:
        home = cluster.config.replica_dir(replica.id)
        assert _mode(home) == 0o700
        for env in ("state", "wal"):
            assert _mode(home / env) == 0o700 and _mode(home / env / "data.mdb") == 0o600
    for secret in ("secret", "admin.token", "tls/ca.key", "tls/client-xce.key", "tls/worker-w1.key"):
        assert _mode(cluster.data / secret) == 0o600, secret
    spool = cluster.data / "xce-spool-w1"
    assert _mode(spool) == 0o711  # owners pass through to their own directory; nobody lists it
    assert _mode(spool / "journal") == 0o700 and _mode(spool / "journal" / "data.mdb") == 0o600
    assert _mode(spool / f"{job_id}.0.status") == 0o600
    mine = spool / "users" / "nobody"
    assert _mode(mine) == 0o700 and mine.stat().st_uid == NOBODY.pw_uid
    out = mine / f"{job_id}.0.out"
    assert _mode(out) == 0o600 and out.stat().st_uid == NOBODY.pw_uid


def test_a_job_cannot_change_the_host_file_the_hosts_other_jobs_share(
        fleet: tuple[LocalCluster, LocalWorkers], nobody: Attacker) -> None:
    """A one-host job's host file is shared by every job of its size there (worker/instances.py):
    uid 65534's job may read it, never change, replace or remove it."""
    cluster, _ = fleet
    attack = ('cat "$LSB_DJOB_HOSTFILE"; echo w9 >> "$LSB_DJOB_HOSTFILE"; rm -f "$LSB_DJOB_HOSTFILE"; '
              'mv "$LSB_DJOB_HOSTFILE" "$LSB_DJOB_HOSTFILE.x"; ln -sf /tmp "$LSB_DJOB_HOSTFILE"; true')
    done = nobody.run("submit", "--json", "--", "sh", "-c", attack)
    job_id = int(json.loads(done.stdout)["id"])
    with cluster.client() as client:
        client.run(job_id, "w1")
    _wait_job(cluster, job_id, lambda j: j.state == api.DONE, "the job ran")
    shared = cluster.data / "xce-spool-w1" / "hosts" / "here.1"
    assert shared.read_text() == "w1\n" and not shared.is_symlink()
    assert _mode(shared) == 0o644 and shared.stat().st_uid == 0
    assert sorted(p.name for p in shared.parent.iterdir()) == ["here.1"]
    mine = cluster.data / "xce-spool-w1" / "users" / "nobody"
    said = (mine / f"{job_id}.0.out").read_text() + (mine / f"{job_id}.0.err").read_text()
    assert said.startswith("w1\n") and "denied" in said  # it read the file, and every change was refused


def test_a_worker_cannot_report_on_a_job_that_is_not_on_its_host(fleet: tuple[LocalCluster, LocalWorkers],
                                                                  shared: Path) -> None:
    cluster, _ = fleet
    with cluster.client() as client:
        job = client.submit([api.JobSpec(command=["sleep", "60"], cwd=str(shared))]).jobs[0]
        client.run(job.id, "w1")
    running = _wait_job(cluster, job.id, lambda j: j.pid > 0, "the job started on w1")
    forged = api.JobReport(job_id=job.id, attempt=running.attempt,
                           finished=api.JobFinished(exit_code=0, time_ms=int(time.time() * 1000)))
    messages = [api.WorkerMessage(join=api.HostSpec(name="w3", slots=1)), api.WorkerMessage(report=forged)]
    acked, tries, deadline = False, 0, time.monotonic() + 90
    while not acked and time.monotonic() < deadline:  # again on the new leader if leadership moved
        tries += 1
        done = threading.Event()

        def requests(done: threading.Event = done) -> Iterator[api.WorkerMessage]:
            yield from messages
            done.wait(15)  # the stream stays open until the answer came: hanging up would end it

        with cluster.worker_credentials("w3").channel(cluster.address(cluster.leader())) as channel:
            connect = channel.stream_stream("/xce.v1.WorkerService/Connect",
                                            request_serializer=api.WorkerMessage.SerializeToString,
                                            response_deserializer=api.ControllerMessage.FromString)
            call = connect(requests(), timeout=15)
            try:
                for frame in call:
                    inner = list(frame.commands.commands) if frame.HasField("commands") else [frame]
                    if any(m.HasField("ack") for m in inner):
                        acked = True  # committed (and refused by apply: the job is not on w3)
                        break
            except grpc.RpcError:
                pass
            done.set()
            call.cancel()
    assert acked, f"no answer to the forged report in {tries} tries"
    after = _job(cluster, job.id)
    assert after.state == api.RUN and after.host == "w1"  # unchanged
    with cluster.client() as client:
        client.control(job.id, api.KILL)


def _sync_method(channel: grpc.Channel) -> grpc.UnaryStreamMultiCallable:
    return channel.unary_stream("/xce.v1.SyncService/Sync",
                                request_serializer=log.SyncRequest.SerializeToString,
                                response_deserializer=log.SyncMessage.FromString)


def _open_syncs(sync: grpc.UnaryStreamMultiCallable, admin: Credentials, count: int) -> list[grpc.Call]:
    """`count` Sync streams, each open (its first message arrived), left unread."""
    calls = []
    for _ in range(count):
        call = sync(log.SyncRequest(), timeout=30, metadata=admin.metadata())
        next(call)
        calls.append(call)
    return calls


def test_sync_streams_are_bounded_per_principal(fleet: tuple[LocalCluster, LocalWorkers]) -> None:
    cluster, _ = fleet
    admin = cluster.credentials
    leader = cluster.address(cluster.leader())
    calls = []
    with admin.channel(leader) as channel:
        sync = _sync_method(channel)
        try:
            calls += _open_syncs(sync, admin, cluster.config.max_sync_streams)
            with pytest.raises(grpc.RpcError) as caught:
                next(sync(log.SyncRequest(), timeout=10, metadata=admin.metadata()))
            assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "max_sync_streams" in (caught.value.details() or "")
        finally:
            for call in calls:
                call.cancel()


def test_sync_streams_are_bounded_in_all(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster(extra_config="\n[auth]\nmax_sync_streams = 10\nmax_sync_streams_total = 3\n")
    cluster.start()
    admin = cluster.credentials
    leader = cluster.address(cluster.leader())
    calls = []
    with admin.channel(leader) as channel:
        sync = _sync_method(channel)
        try:
            calls += _open_syncs(sync, admin, 3)
            with pytest.raises(grpc.RpcError) as caught:
                next(sync(log.SyncRequest(), timeout=10, metadata=admin.metadata()))
            assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "max_sync_streams_total" in (caught.value.details() or "")
            calls.pop().cancel()  # one closes: room for one more (once the server saw it close)
            deadline = time.monotonic() + 30
            while True:
                try:
                    call = sync(log.SyncRequest(), timeout=30, metadata=admin.metadata())
                    next(call)
                    calls.append(call)
                    break
                except grpc.RpcError as exc:
                    assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and time.monotonic() < deadline
                    time.sleep(0.1)
        finally:
            for call in calls:
                call.cancel()


def test_replaying_another_users_request_id_finds_nothing_of_theirs(fleet: tuple[LocalCluster, LocalWorkers],
                                                                     nobody: Attacker) -> None:
    """Request ids are each caller's own (controller/request_ids.py): another user's id makes the
    replayer's own job, and shows nothing of the first (nor its id, to anyone but its owner)."""
    cluster, _ = fleet
    with cluster.client() as client:
        secret = client.submit([api.JobSpec(command=["true"], cwd="/tmp", env={"PASSWORD": "hunter2"})],
                               request_id="admin-request-1").jobs[0]
        client.control(secret.id, api.HOLD)
    with Client(cluster.addresses, cluster.credentials_for(nobody.token)) as client:
        replayed = client.submit([api.JobSpec(command=["true"], cwd="/tmp")],
                                 request_id="admin-request-1").jobs
        assert [j.spec.user for j in replayed] == ["nobody"] and replayed[0].id != secret.id
        seen = client.get_job(str(secret.id))
        assert seen.spec.env["PASSWORD"] == "" and seen.request_id == ""
