"""Hardening against local users and clients without credentials, on real processes: three replicas, a
scheduler, two workers and a gateway, in a directory uid 65534 may pass through, with the attacker a
real process of uid 65534 (setpriv) wherever a local user is the threat."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from ops.local_cluster import LocalCluster, LocalGateway, LocalScheduler, LocalWorkers, free_ports
from tests.conftest import FAST_HOSTS, NOBODY, nobody_cli_env, wait_until, xce_as_nobody

pytestmark = pytest.mark.cluster
HANDSHAKE_S = 3.0
HANDSHAKE = f"\n[auth]\nhandshake_timeout_s = {HANDSHAKE_S}\n"
PARKED = '\n[[queues]]\nname = "parked"\npriority = 10\ninactive = true\n'  # jobs wait there
AS_NOBODY = ["setpriv", f"--reuid={NOBODY.pw_uid}", f"--regid={NOBODY.pw_gid}", "--clear-groups"]


@dataclass
class Site:
    cluster: LocalCluster
    workers: LocalWorkers
    gateway: LocalGateway
    shared: Path  # a directory nobody may use (its jobs' working directory)

    def admin(self) -> httpx.Client:
        return httpx.Client(base_url=f"{self.gateway.url}/xce/v1", timeout=30,
                            headers={"Authorization": f"Bearer {self.cluster.admin_token}"})

    def as_nobody(self, argv: list[str], env: dict[str, str] | None = None,
                  timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
        """`argv` (after the interpreter) run by uid 65534 with a minimal environment."""
        return subprocess.run([*AS_NOBODY, sys.executable, *argv], cwd=self.shared,
                              env={"PATH": "/usr/bin:/bin", "HOME": str(self.shared), **(env or {})},
                              capture_output=True, text=True, timeout=timeout_s)


@pytest.fixture(scope="module")
def site(reachable_by_nobody: None) -> Iterator[Site]:
    # Job owners pass through the spools (their output directories are there): a 0711 directory.
    home = Path(tempfile.mkdtemp(prefix="xce-hardening-", dir="/tmp"))
    home.chmod(0o711)
    shared = home / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    cluster = LocalCluster(home / "cluster", extra_config=FAST_HOSTS + HANDSHAKE + PARKED)
    workers = LocalWorkers(cluster)
    scheduler = LocalScheduler(cluster)
    gateway = LocalGateway(cluster)
    try:
        cluster.start()
        cluster.leader()
        workers.start("w1", 4)
        workers.start("w2", 4)
        scheduler.start()
        gateway.start()
        made = Site(cluster, workers, gateway, shared)
        with made.admin() as admin:
            def joined() -> bool:  # an answer other than 200 (seen once on a busy machine) is waited through
                answer = admin.get("/hosts")
                return answer.status_code == 200 and \
                    [h["status"] for h in answer.json()["hosts"]] == ["HOST_OK"] * 2

            wait_until(joined, "both workers joined")
        yield made
    finally:
        gateway.kill()
        scheduler.kill()
        workers.stop()
        cluster.stop()
        for log in sorted((home / "cluster").glob("*.log")):
            if os.environ.get("XCE_TEST_LOGS"):
                print(f"----- {log.name} -----", log.read_text(errors="replace")[-8000:], sep="\n")
        shutil.rmtree(home, ignore_errors=True)


# ---------------------------------------------------------------------- MCP over HTTP


class McpHttp:
    """`xce mcp --http` started by root the way an admin would have: with root's agent key as its own."""

    def __init__(self, site: Site, server_key: str, port_only: bool = False) -> None:
        self.site = site
        self.port = free_ports(1)[0]
        self.listen = str(self.port) if port_only else f"127.0.0.1:{self.port}"
        self.server_key = server_key
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def __enter__(self) -> McpHttp:
        env = {**os.environ, "XCE_TOKEN": self.server_key}
        with open(self.site.cluster.data / "mcp.log", "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "cli", "mcp", "--gateway", self.site.gateway.url,
                 "--http", self.listen],
                env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

        def answers() -> bool:
            assert self.proc is not None and self.proc.poll() is None, "xce mcp --http exited"
            try:
                return httpx.get(self.url, timeout=2).status_code == 401
            except httpx.HTTPError:
                return False

        wait_until(answers, "xce mcp --http to answer", 30)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def call_as_nobody(self, key: str, *calls: tuple[str, dict[str, Any]]) -> dict[str, Any]:
        client = str(Path(__file__).with_name("mcp_call.py"))
        done = self.site.as_nobody([client, self.url, json.dumps(calls)], {"MCP_KEY": key} if key else {})
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout)  # type: ignore[no-any-return]


def _audit_rows(site: Site, principal: str) -> list[dict[str, Any]]:
    with site.admin() as admin:
        return admin.get("/audit", params={"principal": principal, "page_size": 1000}).json()["records"]  # type: ignore[no-any-return]


def _job_count(site: Site) -> int:
    with site.admin() as admin:
        return len(admin.get("/jobs", params={"page_size": 5000}).json()["jobs"])


def test_mcp_http_takes_no_request_without_a_key_of_the_caller_s_own(site: Site) -> None:
    """Started by root with root's agent key: a local user (uid 65534) without a key is answered 401
    with WWW-Authenticate and nothing is called; the server's own key, stolen, is refused too."""
    server_key = site.cluster.new_token("root", "mcp_operator")
    rows, jobs = len(_audit_rows(site, "root")), _job_count(site)
    with McpHttp(site, server_key) as mcp:
        submit = ("scheduler_submit", {"command": ["id", "-u"], "cwd": str(site.shared)})
        keyless = mcp.call_as_nobody("", submit)
        assert keyless["refused"] == 401 and keyless["www_authenticate"].startswith("Bearer"), keyless
        stolen = mcp.call_as_nobody(server_key, submit)
        assert stolen["refused"] == 401, stolen
        forged = mcp.call_as_nobody("xce_" + "0" * 43, submit)
        assert forged["refused"] == 401, forged
    assert _job_count(site) == jobs  # nothing was submitted
    assert len(_audit_rows(site, "root")) == rows  # and nothing done or tried under root's key


def test_mcp_http_acts_as_the_key_each_request_carries(site: Site) -> None:
    """uid 65534 with a read-only key reads but no write tool works; with its own user key its job runs
    as uid 65534, not as the root who started the server, and is audited under its own name."""
    server_key = site.cluster.new_token("root", "mcp_operator")
    readonly = site.cluster.new_token("nobody", "mcp_readonly")
    own = site.cluster.new_token("nobody", "user")
    with site.admin() as admin:
        roots = admin.post("/jobs", json={"command": ["sleep", "300"], "name": "root's",
                                          "cwd": "/tmp"}).json()["jobs"][0]["id"]
    jobs = _job_count(site)
    with McpHttp(site, server_key) as mcp:
        submit = ("scheduler_submit", {"command": ["id", "-u"], "cwd": str(site.shared)})
        answered = mcp.call_as_nobody(readonly, ("scheduler_list_jobs", {}), submit,
                                      ("scheduler_cancel", {"job_id": str(roots)}),
                                      ("scheduler_hold", {"job_id": str(roots)}))
        looked = answered["results"]
        assert "scheduler_list_jobs" in answered["tools"] and "scheduler_submit" not in answered["tools"]
        assert any(j["id"] == roots for j in looked[0]["jobs"])
        for refused in looked[1:]:
            assert "Forbidden" in refused["error"] and "mcp_readonly" in refused["error"], refused
        assert _job_count(site) == jobs
        answered = mcp.call_as_nobody(own, ("scheduler_submit", {"command": ["id", "-u"],
                                                                  "cwd": str(site.shared), "name": "mine"}))
        assert "scheduler_submit" in answered["tools"]  # the same server: each request its own key's list
        ran = answered["results"][0]
        job = ran["submitted"]["id"]
        assert ran["submitted"]["user"] == "nobody"
        ended = mcp.call_as_nobody(own, ("scheduler_wait_job", {"job_id": str(job), "timeout_s": 60}),
                                   ("scheduler_job_output", {"job_id": str(job)}))["results"]
        assert ended[0]["ended"] and ended[0]["job"]["state"] == "DONE", ended
        assert ended[1]["text"] == f"{NOBODY.pw_uid}\n"
        killed = mcp.call_as_nobody(own, ("scheduler_cancel", {"job_id": str(roots)}))["results"][0]
        assert "Forbidden" in killed["error"]  # a user key may not kill root's job either
    with site.admin() as admin:
        assert admin.get(f"/jobs/{roots}").json()["state"] == "RUN" or \
            admin.get(f"/jobs/{roots}").json()["state"] == "PEND"
        admin.post(f"/jobs/{roots}/actions", json={"action": "kill"})
    mine = [r for r in _audit_rows(site, "nobody") if r["action"] == "submit" and r["outcome"] == "CONFIRMED"]
    assert [(r["role"], r["via"]) for r in mine] == [("user", "rest")]  # its own key, not an agent's
    refused = [r for r in _audit_rows(site, "nobody") if r["outcome"] == "REFUSED"]
    assert {r["role"] for r in refused} == {"mcp_readonly", "user"}


def test_mcp_http_binds_loopback_and_another_address_only_with_tls(site: Site) -> None:
    port = free_ports(1)[0]
    done = subprocess.run([sys.executable, "-m", "cli", "mcp", "--gateway", site.gateway.url,
                           "--http", f"0.0.0.0:{port}"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "not a loopback address" in done.stderr and "--tls-cert" in done.stderr
    with McpHttp(site, "", port_only=True) as mcp:  # a port alone: 127.0.0.1
        assert httpx.get(mcp.url, timeout=5).status_code == 401


# ---------------------------------------------------------------------- connection hygiene


def _descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _as_nobody_in_background(mode: str, port: int, seconds: float, count: int = 5000,
                             source: str = "127.0.0.2", once: bool = False) -> subprocess.Popen[str]:
    """tests/cluster/slow_client.py run by uid 65534: `count` connections it never finishes, for `seconds`."""
    argv = [str(Path(__file__).with_name("slow_client.py")), mode, "127.0.0.1", str(port), source, str(count),
            str(seconds), *(["once"] if once else [])]
    return subprocess.Popen([*AS_NOBODY, sys.executable, *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={"PATH": "/usr/bin:/bin"})


def test_a_slowloris_of_5000_connections_leaves_the_gateway_serving(site: Site) -> None:
    """uid 65534 holds 5,000 connections to the gateway from 127.0.0.2, each a request it never
    finishes: a caller at 127.0.0.1 is served throughout, the gateway never holds more than its
    per-peer cap of them, closes them at the header deadline, and its log grows by less than 1 MB."""
    gateway = LocalGateway(site.cluster, "gateway-guarded", ["--header-timeout-s", "2",
                                                            "--max-connections-per-peer", "64"])
    gateway.start()
    try:
        assert gateway.proc is not None
        log = site.cluster.data / "gateway-guarded.log"
        log_before, fds_before = log.stat().st_size, _descriptors(gateway.proc.pid)
        attack = _as_nobody_in_background("http", gateway.port, seconds=8)
        served, slowest, most_fds = 0, 0.0, 0
        try:
            with httpx.Client(base_url=f"{gateway.url}/xce/v1", timeout=10,
                              headers={"Authorization": f"Bearer {site.cluster.admin_token}"}) as me:
                while attack.poll() is None:
                    started = time.monotonic()
                    assert me.get("/whoami").status_code == 200
                    slowest = max(slowest, time.monotonic() - started)
                    served += 1
                    most_fds = max(most_fds, _descriptors(gateway.proc.pid))
                    time.sleep(0.1)
            out, err = attack.communicate(timeout=60)
        finally:
            attack.kill()
        held = json.loads(out)
        assert held["opened"] >= 5000, (held, err)
        assert held["closed_by_server"] >= 5000 - 64, held  # past the cap at once, the rest at the deadline
        assert served >= 20 and slowest < 5.0, (served, slowest)
        assert most_fds < fds_before + 64 + 32, (most_fds, fds_before)
        assert log.stat().st_size - log_before < 1 << 20
        print(f"slowloris: {held}; {served} requests served, slowest {slowest:.3f} s; at most {most_fds} "
              f"descriptors (from {fds_before}); log +{log.stat().st_size - log_before} bytes")
    finally:
        gateway.kill()


_HANG_UPS = """
import socket, sys
source, port = sys.argv[1], int(sys.argv[2])
for _ in range(300):  # connect and hang up at once, five times the cap
    s = socket.socket(); s.bind((source, 0)); s.connect(("127.0.0.1", port)); s.close()
"""


def test_connections_that_hang_up_at_once_give_their_place_back(site: Site) -> None:
    """uid 65534 connects and hangs up 300 times from 127.0.0.3, past its cap of 64: each place is
    given back when the connection closes (not when its socket is collected, which may take minutes),
    so the same address, and everyone else, is served right after."""
    gateway = LocalGateway(site.cluster, "gateway-hangups", ["--max-connections-per-peer", "64"])
    gateway.start()
    try:
        attack = subprocess.run([*AS_NOBODY, sys.executable, "-c", _HANG_UPS, "127.0.0.3", str(gateway.port)],
                                capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin"})
        assert attack.returncode == 0, attack.stderr

        def served_from(source: str) -> bool:
            try:
                with httpx.Client(transport=httpx.HTTPTransport(local_address=source), timeout=5) as c:
                    return c.get(f"{gateway.url}/healthz").status_code == 200
            except httpx.TransportError:
                return False

        wait_until(lambda: served_from("127.0.0.3"), "the address that hung up 300 times served again",
                   timeout_s=20)
        assert served_from("127.0.0.1")
    finally:
        gateway.kill()


def test_a_spoofed_via_header_is_not_believed(site: Site) -> None:
    """Any REST client may send `X-XCE-Via: mcp`: its row says rest, as its key is not an agent's."""
    key = site.cluster.new_token("nobody", "user")
    with httpx.Client(base_url=f"{site.gateway.url}/xce/v1", timeout=30,
                      headers={"Authorization": f"Bearer {key}", "X-XCE-Via": "mcp"}) as spoofer:
        made = spoofer.post("/jobs", params={"dry_run": "true"}, json={"command": ["true"], "name": "spoof"})
        assert made.status_code == 200, made.text
    [row] = [r for r in _audit_rows(site, "nobody") if '"spoof"' in r["params"]]
    assert (row["via"], row["outcome"]) == ("rest", "DRY_RUN")


def test_event_streams_are_capped_per_user(site: Site) -> None:
    """One user holds at most --max-event-streams (16) streams at once; another user is not held up."""
    key = site.cluster.new_token("nobody", "user")
    with httpx.Client(base_url=f"{site.gateway.url}/xce/v1", timeout=30) as http, \
            contextlib.ExitStack() as streams:
        mine = {"Authorization": f"Bearer {key}"}
        for _ in range(16):
            assert streams.enter_context(http.stream("GET", "/events", headers=mine)).status_code == 200
        with http.stream("GET", "/events", headers=mine) as refused:
            refused.read()
            assert refused.status_code == 429 and "at most 16" in refused.json()["detail"]
        other = site.cluster.new_token("someone-else", "user")
        with http.stream("GET", "/events", headers={"Authorization": f"Bearer {other}"}) as served:
            assert served.status_code == 200


def test_5000_half_open_tls_handshakes_neither_stop_submits_nor_keep_descriptors(site: Site) -> None:
    """uid 65534 opens 5,000 TLS connections to the leader and never finishes a handshake, holding
    them: the leader keeps taking root's submits throughout, and closes them at the handshake
    deadline, its descriptors back near where they were."""
    from client.channel import Client
    from xce.v1 import api_pb2 as api

    cluster = site.cluster
    leader = cluster.leader()
    pid = cluster.procs[leader].pid
    port = int(cluster.address(leader).rsplit(":", 1)[1])
    before = _descriptors(pid)
    attack = _as_nobody_in_background("tls", port, seconds=HANDSHAKE_S + 6, once=True)
    submitted, slowest, most = 0, 0.0, 0
    try:
        with Client(cluster.addresses, cluster.credentials, deadline_s=30) as client:
            started = time.monotonic()
            while time.monotonic() - started < HANDSHAKE_S + 4:
                most = max(most, _descriptors(pid))
                began = time.monotonic()
                client.submit([api.JobSpec(command=["true"], cwd="/tmp", name="through")])
                slowest = max(slowest, time.monotonic() - began)
                submitted += 1
                time.sleep(0.1)
            closed = wait_until(lambda: _descriptors(pid) < before + 50 and _descriptors(pid),
                                "the leader to close the half-open connections", HANDSHAKE_S + 5)
        out, err = attack.communicate(timeout=60)
    finally:
        attack.kill()
    held = json.loads(out)
    assert held["opened"] >= 5000 and most > before + 4000, (held, most, before, err)  # they were there
    assert held["closed_by_server"] >= 4900, held  # the server closed them, not the attacker
    assert submitted >= 10 and slowest < 5.0, (submitted, slowest)
    print(f"half-open TLS: {held}; {submitted} submits, slowest {slowest:.3f} s; descriptors {before} -> "
          f"{most} -> {closed}")


HOLD_LAUNCH_SLOTS = """
import json, socket, sys, time
held = []
for _ in range(int(sys.argv[2])):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(sys.argv[1])
    except OSError:
        continue
    held.append(sock)
time.sleep(1.0)
closed = 0
for sock in held:
    sock.setblocking(False)
    try:
        closed += sock.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        pass
print(json.dumps({"connected": len(held), "closed_by_worker": closed}), flush=True)
sys.stdin.read()
"""


def test_one_user_cannot_take_every_launch_slot(site: Site) -> None:
    """uid 65534 opens 300 connections to a worker's launch socket and holds them: the worker keeps
    at most 128 of one uid, and another user's launch is still answered."""
    from worker.launch_socket import read_frame, write_frame
    from xce.v1 import api_pb2 as api

    path = site.workers.spool("w1") / "launch.sock"
    holder = subprocess.Popen([*AS_NOBODY, sys.executable, "-c", HOLD_LAUNCH_SLOTS, str(path), "300"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env={"PATH": "/usr/bin:/bin"})
    try:
        assert holder.stdout is not None
        held = json.loads(holder.stdout.readline() or "{}")
        assert held.get("connected") == 300 and held["closed_by_worker"] == 300 - 128, held
        import socket

        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as mine:
            mine.connect(str(path))
            write_frame(mine, api.LaunchTask(job_id=999999, attempt=0, task_id="t", host="w2",
                                             credential="0" * 64, command=["true"]).SerializeToString())
            answer = read_frame(mine, time.monotonic() + 10)
        assert answer is not None, "the worker closed another user's launch unanswered"
        state = api.TaskState.FromString(answer)
        assert state.phase == api.TASK_REFUSED and state.reason, state
    finally:
        holder.kill()
        holder.communicate(timeout=10)


def test_an_idempotency_key_is_the_caller_s_own(site: Site) -> None:
    """A key uid 65534 used first never answers root's submit with its job; root's retry finds root's
    job; root's other request under the same key is a 409; nobody sees root's request id."""
    theirs = site.cluster.new_token("nobody", "user")
    key = {"Idempotency-Key": "nightly-build"}
    body = {"command": ["true"], "name": "build", "cwd": "/tmp"}
    with httpx.Client(base_url=f"{site.gateway.url}/xce/v1", timeout=30,
                      headers={"Authorization": f"Bearer {theirs}"}) as attacker, site.admin() as admin:
        planted = attacker.post("/jobs", json=body, headers=key)
        assert planted.status_code == 201, planted.text
        mine = admin.post("/jobs", json=body, headers=key)
        assert mine.status_code == 201, mine.text
        [planted_job], [my_job] = planted.json()["jobs"], mine.json()["jobs"]
        assert my_job["id"] != planted_job["id"] and my_job["spec"]["user"] == "root"
        again = admin.post("/jobs", json=body, headers=key)
        assert [j["id"] for j in again.json()["jobs"]] == [my_job["id"]]  # a retry: the same job
        other = admin.post("/jobs", json={**body, "name": "another"}, headers=key)
        assert other.status_code == 409 and other.headers["content-type"] == "application/problem+json"
        assert other.json()["code"] == "ALREADY_EXISTS" and "nightly-build" in other.json()["detail"]
        assert admin.get(f"/jobs/{my_job['id']}").json()["request_id"] == "nightly-build"  # its own, as sent
        seen = attacker.get(f"/jobs/{my_job['id']}").json()
        assert seen["spec"]["user"] == "root" and "request_id" not in seen  # empty: not rendered
        names = [j["spec"]["name"] for j in admin.get("/jobs", params={"page_size": 5000}).json()["jobs"]]
        assert names.count("build") == 2 and "another" not in names


def test_one_user_s_200000_submits_stop_at_the_default_pending_limit(site: Site) -> None:
    """A user key submits 200,000 jobs (an array of 10,000, then 19 requests of 10,000): past the
    default max_pend_jobs_per_user (10,000) each is RESOURCE_EXHAUSTED naming it; another user's job
    runs as on an idle cluster, and `xce limits` shows the flooder where it stands."""
    from client.channel import Client, XceError
    from xce.v1 import api_pb2 as api

    flooder = site.cluster.new_token("nobody", "user")
    refusals: list[str] = []
    with Client(site.cluster.addresses, site.cluster.credentials_for(flooder), deadline_s=60) as client:
        elements = api.ArraySpec(ranges=[api.IndexRange(start=1, end=10_000)])
        [array] = client.submit([api.JobSpec(command=["true"], name="flood", queue="parked", cwd="/tmp",
                                             array=elements)]).jobs
        batch = [api.JobSpec(command=["true"], name="more", queue="parked", cwd="/tmp")] * 10_000
        for _ in range(19):
            try:
                client.submit(batch)
            except XceError as exc:
                refusals.append(f"{exc.code_name}: {exc.message}")
    try:
        assert len(refusals) == 19 and all(r.startswith("RESOURCE_EXHAUSTED") for r in refusals), refusals[:2]
        assert "nobody has 10000 pending jobs; 10000 more would pass 10000 ([auth] max_pend_jobs_per_user)" \
            in refusals[0]
        other = site.cluster.new_token("daemon", "user")  # another account of the host
        with Client(site.cluster.addresses, site.cluster.credentials_for(other), deadline_s=60) as client:
            began = time.monotonic()
            [job] = client.submit([api.JobSpec(command=["true"], cwd="/tmp")]).jobs
            done = wait_until(lambda: client.get_job(str(job.id)).state == api.DONE, "another user's job", 30)
            took = time.monotonic() - began
        assert done and took < 5.0, took
        env = nobody_cli_env(site.cluster, site.shared) | {"XCE_TOKEN": flooder}
        shown = xce_as_nobody(["limits"], env, site.shared)
        assert shown.returncode == 0, shown.stderr
        assert "pending jobs     10000/10000" in shown.stdout and "max_pend_jobs_per_user" in shown.stdout
        assert "1000 jobs/s, 20000 at once" in shown.stdout
        print(f"200,000 submits: 10,000 taken, 19 requests refused; another user's job DONE in {took:.2f} s")
    finally:
        with site.admin() as admin:
            admin.post(f"/jobs/{array.id}/actions", json={"action": "kill"})


# ---------------------------------------------------------------------- output reads


def test_peek_reads_as_the_owner_through_no_symbolic_link(site: Site) -> None:
    """A file of uid 65534's sits in a directory only root may enter. Its job's output directory,
    swapped for a link to that directory after the job ended, shows nothing of it through `xce peek`
    (not even whether a file is there); and a job's output in a directory its owner can no longer
    enter is not shown either: the read is the owner's, not root's."""
    rootonly = site.shared.parent / "rootonly"
    rootonly.mkdir(mode=0o700)
    secret = rootonly / "secret.txt"
    secret.write_text("SECRET\n")
    os.chown(secret, NOBODY.pw_uid, NOBODY.pw_gid)
    work = site.shared / "peek"
    env = nobody_cli_env(site.cluster, site.shared) | {"XCE_TOKEN": site.cluster.new_token("nobody", "user")}
    for directory in (work, work / "out", work / "closed"):
        directory.mkdir()
        os.chown(directory, NOBODY.pw_uid, NOBODY.pw_gid)

    def submit(output: str) -> str:
        done = xce_as_nobody(["submit", "-o", output, "--", "sh", "-c", "echo mine"], env, work)
        assert done.returncode == 0, done.stderr
        return done.stdout.split("<", 1)[1].split(">", 1)[0]

    swapped, missing, closed = submit("out/secret.txt"), submit("out/nothing.txt"), submit("closed/mine.txt")
    with site.admin() as admin:
        for job in (swapped, missing, closed):
            wait_until(lambda: admin.get(f"/jobs/{job}").json()["state"] == "DONE", f"job {job} to end")  # noqa: B023
    assert xce_as_nobody(["peek", swapped], env, work).stdout == "mine\n"  # before the swap: its own
    # What a hostile owner does next: the directory becomes a link to root's.
    subprocess.run([*AS_NOBODY, "sh", "-c", f"rm -r {work}/out && ln -s {rootonly} {work}/out"], check=True)
    for job in (swapped, missing):
        peeked = xce_as_nobody(["peek", job], env, work)
        assert peeked.returncode != 0 and "SECRET" not in peeked.stdout, peeked
        assert f"{work}/out is a symbolic link" in peeked.stderr, peeked.stderr  # alike: nothing on existence
    os.chown(work / "closed", 0, 0)  # an admin takes the directory away: its owner may not enter now
    (work / "closed").chmod(0o700)
    shut = xce_as_nobody(["peek", closed], env, work)
    assert shut.returncode != 0 and "mine" not in shut.stdout and "Permission denied" in shut.stderr, shut


def test_deep_nesting_is_refused_as_bad_input(site: Site) -> None:
    """4,000 `!` in -R or -w, and a JSON body 5,000 arrays deep: a clear INVALID_ARGUMENT / 400 that
    names the bound, never a RecursionError (a 500), and nothing is made."""
    jobs = _job_count(site)
    key = site.cluster.new_token("nobody", "user")
    env = nobody_cli_env(site.cluster, site.shared) | {"XCE_TOKEN": key}
    for option, text in (("-R", "select[" + "!" * 4000 + "gpu]"), ("-w", "!" * 4000 + "done(1)")):
        done = xce_as_nobody(["submit", option, text, "--", "true"], env, site.shared)
        assert done.returncode != 0 and "INVALID_ARGUMENT" in done.stderr, done.stderr[-500:]
        assert "nested more than 64 levels deep" in done.stderr and "Recursion" not in done.stderr
    with httpx.Client(base_url=f"{site.gateway.url}/xce/v1", timeout=30,
                      headers={"Authorization": f"Bearer {key}"}) as rest:
        for body in ({"command": ["true"], "resource_req": "select[" + "!" * 4000 + "gpu]"},
                     {"command": ["true"], "depend": "!" * 4000 + "done(1)"}):
            answer = rest.post("/jobs", json=body)
            assert answer.status_code == 400 and "nested more than 64" in answer.json()["detail"], answer.text
        deep = rest.post("/jobs", content=b"[" * 5000 + b"]" * 5000,
                         headers={"Content-Type": "application/json"})
        assert deep.status_code == 400 and "more than 32 deep" in deep.json()["detail"], deep.text
        modify = rest.patch("/jobs/1", json={"resource_req": "select[" + "-" * 3000 + "1 > 0]"})
        assert modify.status_code == 400 and "nested more than 64" in modify.json()["detail"], modify.text
    assert _job_count(site) == jobs
