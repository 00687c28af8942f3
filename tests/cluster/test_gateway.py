"""The REST gateway (`xce gateway`) against a real three-replica cluster: jobs, keys, roles, bad input."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from ops.local_cluster import LocalCluster, LocalGateway
from tests.conftest import wait_until

pytestmark = pytest.mark.cluster  # real replicas and a gateway

V1 = "/xce/v1"


@pytest.fixture
def gateway(cluster: LocalCluster) -> Iterator[LocalGateway]:
    gw = LocalGateway(cluster)
    try:
        gw.start()
        yield gw
    finally:
        gw.kill()


def http(gw: LocalGateway, key: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.Client(base_url=gw.url + V1, headers=headers, timeout=60)


def revision(admin: httpx.Client) -> int:
    return int(admin.get("/jobs").json()["revision"])


def test_jobs_through_rest(cluster: LocalCluster, gateway: LocalGateway) -> None:
    with http(gateway, cluster.admin_token) as admin:
        made = admin.post("/jobs", json={"command": ["sleep", "60"], "name": "one"})
        assert made.status_code == 201, made.text
        [job] = made.json()["jobs"]
        assert job["state"] == "PEND" and job["spec"]["user"] == pwd_name()
        batch = admin.post("/jobs", json={"jobs": [{"command": ["true"], "name": "sweep[1-3]%2"},
                                                   {"command": ["true"], "priority": 7}]},
                           headers={"Idempotency-Key": "batch-1"})
        assert batch.status_code == 201, batch.text
        array, seventh = batch.json()["jobs"]
        assert array["spec"]["array"]["limit"] == 2 and seventh["spec"]["priority"] == 7
        again = admin.post("/jobs", json={"jobs": [{"command": ["true"], "name": "sweep[1-3]%2"},
                                                   {"command": ["true"], "priority": 7}]},
                           headers={"Idempotency-Key": "batch-1"})
        assert [j["id"] for j in again.json()["jobs"]] == [array["id"], seventh["id"]]  # one submit

        by_number = admin.get(f"/jobs/{job['id']}").json()
        by_name = admin.get(f"/jobs/{job['readable_id']}").json()
        assert by_number == by_name and by_number["spec"]["name"] == "one"
        listed = admin.get("/jobs", params={"filter": ["priority:eq:7", "state:eq:PEND"]}).json()
        assert [j["id"] for j in listed["jobs"]] == [seventh["id"]]
        paged = admin.get("/jobs", params={"page_size": 1}).json()
        assert len(paged["jobs"]) == 1 and paged["next_page_token"]

        held = admin.post(f"/jobs/{job['id']}/actions", json={"action": "hold"})
        assert held.status_code == 200 and held.json()["state"] == "PSUSP"
        changed = admin.patch(f"/jobs/{job['id']}", json={"priority": 9, "queue": "priority"}).json()
        assert changed["spec"]["priority"] == 9 and changed["spec"]["queue"] == "priority"
        assert admin.post(f"/jobs/{job['id']}/actions", json={"action": "release"}).json()["state"] == "PEND"
        assert admin.post(f"/jobs/{job['id']}/actions", json={"action": "kill"}).json()["state"] == "EXIT"
        history = admin.get("/history", params={"state": ["EXIT"]}).json()["jobs"]
        assert [j["id"] for j in history] == [job["id"]]

        assert {q["name"] for q in admin.get("/queues").json()["queues"]} >= {"normal", "priority"}
        assert admin.get("/hosts").status_code == 200
        assert len(admin.get("/status").json()["replicas"]) == 3
        assert admin.get("/whoami").json()["role"] == "cluster_admin"
        spec = admin.get("/openapi.json").json()
        assert {"/xce/v1/jobs", "/xce/v1/jobs/{job_id}/actions", "/xce/v1/apikeys"} <= set(spec["paths"])


def pwd_name() -> str:
    import os
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name


def bad_requests(job_id: str) -> list[tuple[str, str, dict[str, Any], int, str]]:
    """(method, path, httpx arguments, status, words in the detail): every endpoint's bad inputs."""
    return [
        ("POST", "/jobs", {"content": b"{not json"}, 400, "not JSON"),
        ("POST", "/jobs", {"json": ["sleep"]}, 400, "JSON object"),
        ("POST", "/jobs", {"json": {"command": ["x"], "colour": 1}}, 400, "colour"),
        ("POST", "/jobs", {"json": {"name": "x"}}, 400, "command"),
        ("POST", "/jobs", {"json": {"command": ["x"], "slots": 2 ** 40}}, 400, "out of range"),
        ("POST", "/jobs", {"json": {"command": ["x"], "slots": 0}}, 400, "slots"),
        ("POST", "/jobs", {"json": {"command": ["x"], "name": "a[1-99999999999999999999]"}}, 400, "array"),
        ("POST", "/jobs", {"json": {"command": ["x"], "queue": "nope"}}, 400, "unknown queue"),
        ("POST", "/jobs", {"json": {"command": ["x"], "resource_req": "select[mem>"}}, 400, ""),
        ("POST", "/jobs", {"content": b"x" * (2 << 20)}, 413, "bytes"),
        ("POST", "/jobs", {"content": b"command=x", "headers": {"content-type": "text/plain"}}, 415, "json"),
        ("GET", "/jobs", {"params": {"filter": "bogus"}}, 400, "field:op:value"),
        ("GET", "/jobs", {"params": {"filter": "colour:eq:red"}}, 400, "colour"),
        ("GET", "/jobs", {"params": {"page_size": "-1"}}, 400, "page_size"),
        ("GET", "/jobs", {"params": {"page_size": "many"}}, 400, "page_size"),
        ("GET", "/jobs/999999", {}, 404, "999999"),
        ("GET", "/jobs/not-a-job", {}, 400, ""),
        ("POST", f"/jobs/{job_id}/actions", {"json": {"action": "explode"}}, 400, "one of kill"),
        ("POST", f"/jobs/{job_id}/actions", {"json": {}}, 400, "action"),
        ("POST", "/jobs/999999/actions", {"json": {"action": "kill"}}, 404, "999999"),
        ("PATCH", f"/jobs/{job_id}", {"json": {"user": "eve"}}, 400, "only priority"),
        ("PATCH", f"/jobs/{job_id}", {"json": {"priority": "high"}}, 400, "32-bit"),
        ("PATCH", f"/jobs/{job_id}", {"json": {"queue": "nope"}}, 400, "nope"),
        ("GET", "/history", {"params": {"state": "RUN"}}, 400, "DONE or EXIT"),
        ("GET", "/history", {"params": {"since_ms": "-5"}}, 400, "since_ms"),
        ("GET", "/audit", {"params": {"since_ms": str(10 ** 20)}}, 400, "since_ms"),
        ("POST", "/apikeys", {"json": {"user": "a"}}, 400, "role"),
        ("POST", "/apikeys", {"json": {"user": "a", "role": "wizard"}}, 400, "wizard"),
        ("DELETE", "/apikeys/0000000000000000", {}, 404, ""),
        ("GET", "/hosts", {"params": {"stale": "maybe"}}, 400, "stale"),
        ("GET", "/queues", {"params": {"stale": "maybe"}}, 400, "stale"),
        ("GET", f"/jobs/{job_id}/output", {"params": {"tail": "0"}}, 400, "tail"),
        ("GET", f"/jobs/{job_id}/output", {"params": {"stream": "both"}}, 400, "stdout or stderr"),
        ("GET", "/events", {"headers": {"Last-Event-ID": "x.1"}}, 400, "event id"),
        ("GET", "/audit", {"params": {"page_token": "zz"}}, 400, "page token"),
        ("POST", "/apikeys", {"json": {"user": "a", "role": "user", "scope": {"actions": ["fly"]}}},
         400, "fly"),
        ("GET", "/nothing/here", {}, 404, "no such path"),
        ("DELETE", "/jobs", {}, 405, ""),
    ]


def test_bad_input_is_a_problem_and_changes_nothing(cluster: LocalCluster, gateway: LocalGateway) -> None:
    with http(gateway, cluster.admin_token) as admin:
        job_id = admin.post("/jobs", json={"command": ["sleep", "60"]}).json()["jobs"][0]["id"]
        before = revision(admin)
        for method, path, kwargs, status, words in bad_requests(job_id):
            answer = admin.request(method, path, **kwargs)
            what = f"{method} {path} {kwargs}"[:120]
            assert answer.status_code == status, f"{what}: {answer.status_code} {answer.text[:300]}"
            assert answer.headers["content-type"] == "application/problem+json", what
            problem = answer.json()
            assert problem["status"] == status and problem["title"] and problem["type"] == "about:blank", what
            assert words.lower() in problem["detail"].lower(), f"{what}: {problem['detail']}"
        assert revision(admin) == before  # nothing was committed by any of them
        assert admin.get(f"/jobs/{job_id}").json()["state"] == "PEND"


def test_keys_are_checked_and_survive_restarts(cluster: LocalCluster, gateway: LocalGateway) -> None:
    with http(gateway, None) as anonymous:
        for method, path in (("GET", "/jobs"), ("POST", "/jobs"), ("GET", "/status"), ("GET", "/apikeys")):
            answer = anonymous.request(method, path, json={"command": ["x"]})
            assert answer.status_code == 401 and "API key" in answer.json()["detail"]
            assert answer.headers["www-authenticate"].startswith("Bearer")
    with http(gateway, "xce_not-a-key") as wrong:
        assert wrong.get("/jobs").status_code == 401
    for odd in ("xce_\u00e9\u00e9", "x" * 600):  # not a key XCE makes: a 401, never a 500
        header = f"Bearer {odd}".encode("latin-1")
        answer = httpx.get(gateway.url + V1 + "/jobs", headers={"Authorization": header})
        assert answer.status_code == 401 and "printable ASCII" in answer.json()["detail"]
    with http(gateway, cluster.admin_token) as admin:
        made = admin.post("/apikeys", json={"user": "alice", "role": "user", "description": "alice's"})
        assert made.status_code == 201, made.text
        key, key_id = made.json()["key"], made.json()["id"]
        assert key.startswith("xce_")
        listed = admin.get("/apikeys").json()["keys"]
        assert any(k["id"] == key_id and k["user"] == "alice" for k in listed)
        assert all("key" not in k for k in listed)  # only the hash is kept: the key is shown once
    with http(gateway, key) as alice:
        assert alice.post("/jobs", json={"command": ["true"]}).json()["jobs"][0]["spec"]["user"] == "alice"
        assert alice.get("/apikeys").status_code == 403

    gateway.kill()
    gateway.start()
    with http(gateway, key) as alice:
        assert alice.get("/whoami").json()["name"] == "alice"

    for replica_id in cluster.replica_ids():  # every replica at once: the keys are in their LMDB files
        cluster.kill(replica_id)
    cluster.start()
    cluster.leader()
    with http(gateway, key) as alice:  # the same gateway finds the new leader on its own
        whoami = wait_until(lambda: _ok(alice.get("/whoami")), "the gateway to reach the restarted cluster")
        assert whoami["name"] == "alice"
    with http(gateway, cluster.admin_token) as admin:
        assert admin.delete(f"/apikeys/{key_id}").status_code == 200
    with http(gateway, key) as alice:
        refused = alice.get("/jobs")
        assert refused.status_code == 401 and "revoked" in refused.json()["detail"]


def _ok(answer: httpx.Response) -> Any:
    return answer.json() if answer.status_code == 200 else None


# Each role's answer on each endpoint: what the defaults of controller/authz.py promise, written out
# here so that a change of them shows. "own" rows act on a job of another user (the admin's).
ROLES = ("cluster_admin", "operator", "user", "readonly", "mcp_readonly", "mcp_operator")
MATRIX: dict[str, tuple[str, str, int, tuple[int, ...]]] = {
    # name: (method, path, success status, statuses per role in ROLES order)
    "list jobs": ("GET", "/jobs", 200, (200, 200, 200, 200, 200, 200)),
    "get a job": ("GET", "/jobs/{job}", 200, (200, 200, 200, 200, 200, 200)),
    "submit": ("POST", "/jobs", 201, (201, 201, 201, 403, 403, 201)),
    "hold another's job": ("POST", "/jobs/{job}/actions", 200, (200, 200, 403, 403, 403, 200)),
    "modify another's job": ("PATCH", "/jobs/{job}", 200, (200, 200, 403, 403, 403, 200)),
    "hosts": ("GET", "/hosts", 200, (200,) * 6),
    "queues": ("GET", "/queues", 200, (200,) * 6),
    "status": ("GET", "/status", 200, (200,) * 6),
    "history": ("GET", "/history", 200, (200,) * 6),
    "whoami": ("GET", "/whoami", 200, (200,) * 6),
    "make a key": ("POST", "/apikeys", 201, (201, 403, 403, 403, 403, 403)),
    "list keys": ("GET", "/apikeys", 200, (200, 403, 403, 403, 403, 403)),
    "revoke a key": ("DELETE", "/apikeys/{key}", 200, (200, 403, 403, 403, 403, 403)),
}
BODIES = {"POST /jobs": {"command": ["true"]}, "POST /jobs/{job}/actions": {"action": "hold"},
          "PATCH /jobs/{job}": {"priority": 3}, "POST /apikeys": {"user": "someone", "role": "user"}}


def test_role_by_endpoint_matrix(cluster: LocalCluster, gateway: LocalGateway) -> None:
    keys = {role: cluster.new_token(f"u-{role}", role) for role in ROLES}
    seen: dict[tuple[str, str], int] = {}
    with http(gateway, cluster.admin_token) as admin:
        for name, (method, path, _, _) in MATRIX.items():
            for role in ROLES:
                job = admin.post("/jobs", json={"command": ["sleep", "60"]}).json()["jobs"][0]["id"]
                spare = admin.post("/apikeys", json={"user": "spare", "role": "user"}).json()["id"]
                with http(gateway, keys[role]) as caller:
                    answer = caller.request(method, path.format(job=job, key=spare),
                                            json=BODIES.get(f"{method} {path}"))
                seen[(name, role)] = answer.status_code
                if answer.status_code == 403:
                    assert answer.json()["code"] == "PERMISSION_DENIED"
    expected = {(name, role): row[3][i] for name, row in MATRIX.items() for i, role in enumerate(ROLES)}
    assert seen == expected


def test_dry_runs_scopes_and_the_audit_trail(cluster: LocalCluster, gateway: LocalGateway) -> None:
    """A dry run changes no job and adds one audit row; a scoped agent key's write outside its scope
    is refused, naming the scope, and audited; every write through the gateway is in the trail."""
    from tests.conftest import xce_cli

    with http(gateway, cluster.admin_token) as admin:
        scope = {"queues": ["normal"], "actions": ["submit", "kill", "modify"], "max_jobs": 2}
        made = admin.post("/apikeys", json={"user": "agent", "role": "mcp_operator", "scope": scope})
        assert made.status_code == 201, made.text
        assert made.json()["scope"]["max_jobs"] == 2
        agent_key = made.json()["key"]
        target = admin.post("/jobs", json={"command": ["sleep", "60"], "name": "theirs"}).json()["jobs"][0]
        jobs_before = admin.get("/jobs").json()
        with http(gateway, agent_key) as agent:
            dry = agent.post("/jobs", params={"dry_run": "true"}, json={"command": ["true"], "name": "try"})
            assert dry.status_code == 200, dry.text
            assert dry.json()["dry_run"].startswith("would submit job 'try' in queue normal")
            assert dry.json()["jobs"][0]["spec"]["queue"] == "normal"
            job = target["id"]
            dry_kill = agent.post(f"/jobs/{job}/actions", params={"dry_run": "1"}, json={"action": "kill"})
            assert dry_kill.json()["dry_run"] == f"would kill job {target['id']}: PEND -> EXIT"
            assert dry_kill.json()["job"]["state"] == "PEND"
            dry_modify = agent.patch(f"/jobs/{job}", params={"dry_run": "true"}, json={"priority": 4})
            assert "priority 0 -> 4" in dry_modify.json()["dry_run"]
            assert admin.get("/jobs").json()["jobs"] == jobs_before["jobs"]  # nothing changed

            outside = agent.post("/jobs", json={"command": ["true"], "queue": "priority"})
            assert outside.status_code == 403, outside.text
            detail = outside.json()["detail"]
            assert "outside the scope of key" in detail and "'priority'" in detail
            held = agent.post(f"/jobs/{target['id']}/actions", json={"action": "hold"})
            assert held.status_code == 403 and "hold is not among its actions" in held.json()["detail"]
            for name in ("a", "b"):
                assert agent.post("/jobs", json={"command": ["true"], "name": name}).status_code == 201
            third = agent.post("/jobs", json={"command": ["true"], "name": "c"})
            assert third.status_code == 403 and "max_jobs 2" in third.json()["detail"]
            assert agent.post(f"/jobs/{job}/actions", json={"action": "kill"}).json()["state"] == "EXIT"
            own = agent.get("/audit").json()["records"]  # without audit.read: its own rows only
        everyone = admin.get("/audit").json()["records"]
    expected = [("kill", "CONFIRMED"), ("submit", "REFUSED"), ("submit", "CONFIRMED"),
                ("submit", "CONFIRMED"), ("hold", "REFUSED"), ("submit", "REFUSED"), ("modify", "DRY_RUN"),
                ("kill", "DRY_RUN"), ("submit", "DRY_RUN")]
    assert [(r["action"], r["outcome"]) for r in own] == expected
    assert all(r["principal"] == "agent" and r["via"] == "mcp" for r in own)
    assert own[0]["result"] == "OK" and "max_jobs" in own[1]["result"]
    assert '"queue": "priority"' in own[5]["params"]
    admins = [r for r in everyone if r["principal"] == "root"]  # the admin's own writes, via rest
    assert [(r["action"], r["outcome"], r["via"]) for r in admins][:2] == [
        ("submit", "CONFIRMED", "rest"), ("createtoken", "CONFIRMED", "rest")]  # (then the gateway's key)
    shown = json.loads(xce_cli(cluster, "audit", "--user", "agent", "--json"))["records"]
    assert [(r["action"], r["outcome"]) for r in shown] == expected
    assert "refused" in xce_cli(cluster, "audit", "-n", "3")


def test_a_scoped_key_stays_inside_its_limits_and_job_work(cluster: LocalCluster,
                                                           gateway: LocalGateway) -> None:
    """Its max_jobs holds against requeues of finished jobs and against submits sent all at once; it
    may not read the state's streams, tokens or backups, and what it is refused is audited."""
    import threading

    from client.channel import XceError
    from xce.v1 import api_pb2 as api

    with http(gateway, cluster.admin_token) as admin:
        scoped = admin.post("/apikeys", json={"user": "agent", "role": "cluster_admin",
                                              "scope": {"max_jobs": 2}})
        key = scoped.json()["key"]
        readonly = admin.post("/apikeys", json={"user": "watcher", "role": "mcp_readonly"}).json()["key"]
    with http(gateway, key) as agent:
        first = agent.post("/jobs", json={"command": ["sleep", "60"]}).json()["jobs"][0]["id"]
        assert agent.post(f"/jobs/{first}/actions", json={"action": "kill"}).json()["state"] == "EXIT"
        second = agent.post("/jobs", json={"command": ["sleep", "60"]}).json()["jobs"][0]["id"]
        assert agent.post("/jobs", json={"command": ["sleep", "60"]}).status_code == 201  # now 2 unfinished
        requeued = agent.post(f"/jobs/{first}/actions", json={"action": "requeue"})
        assert requeued.status_code == 403 and "max_jobs 2" in requeued.json()["detail"]
        assert agent.post(f"/jobs/{second}/actions", json={"action": "kill"}).status_code == 200
    codes: list[int] = []

    def submit() -> None:
        with http(gateway, key) as racer:
            codes.append(racer.post("/jobs", json={"command": ["sleep", "60"]}).status_code)

    racers = [threading.Thread(target=submit) for _ in range(12)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(60)
    assert sorted(codes) == [201] + [403] * 11  # 1 unfinished + 1 more = its 2, however they race
    with cluster.client(credentials=cluster.credentials_for(key)) as client, open(os.devnull, "wb") as sink:
        for call in (client.list_tokens, lambda: client.put_queue(api.Queue(name="mine"), create=True),
                     lambda: client.save_snapshot(sink)):
            with pytest.raises(XceError) as refused:
                call()
            assert refused.value.code_name == "PERMISSION_DENIED" and "scoped key" in refused.value.message
    with http(gateway, readonly) as watcher:
        denied = watcher.post("/jobs", json={"command": ["true"]})
        assert denied.status_code == 403 and "jobs.submit" in denied.json()["detail"]
    with http(gateway, cluster.admin_token) as admin:
        rows = admin.get("/audit").json()["records"]
    refused_rows = [(r["principal"], r["action"]) for r in rows if r["outcome"] == "REFUSED"]
    assert ("watcher", "submit") in refused_rows  # denied by its role: recorded too
    assert ("agent", "createqueue") in refused_rows and ("agent", "requeue") in refused_rows
    assert refused_rows.count(("agent", "submit")) == 11


def test_every_write_is_audited_naming_its_key_and_how_it_came(cluster: LocalCluster,
                                                                gateway: LocalGateway) -> None:
    """The command line's writes are in the trail as the gateway's are: each row names the key (its id,
    as `xce token list` shows it, and its description) and how the write came: cli (the command line
    says so), rest (the gateway proves it with its own key), grpc (any other client). A client that
    claims to be the MCP server, or the gateway, with a key that is neither is recorded as grpc."""
    import subprocess
    import sys

    from client.credentials import Credentials
    from tests.conftest import xce_cli
    from xce.v1 import api_pb2 as api

    with http(gateway, cluster.admin_token) as admin:
        made = admin.post("/apikeys", json={"user": "ann", "role": "user", "description": "ann's laptop"})
        assert made.status_code == 201, made.text
        key, key_id = made.json()["key"], made.json()["id"]

    def as_ann(*args: str) -> str:
        env = {**os.environ, "XCE_DATA": str(cluster.data), "XCE_TOKEN": key}
        env.pop("XCE_CONTROLLERS", None)
        done = subprocess.run([sys.executable, "-m", "cli", *args], capture_output=True, text=True, env=env,
                              timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout

    out = as_ann("submit", "-J", "by-cli", "--", "sleep", "60")
    job_id = out.split("<", 1)[1].split(">", 1)[0]
    assert "now EXIT" in as_ann("kill", job_id)
    with http(gateway, key) as ann:
        assert ann.post("/jobs", json={"command": ["true"], "name": "by-rest"}).status_code == 201
    mine = Credentials(cluster.credentials.insecure, cluster.credentials.ca, cluster.credentials.cert,
                       cluster.credentials.key, token=key, relay=key, client="mcp")  # two false claims
    with cluster.client(credentials=mine) as client:
        client.submit([api.JobSpec(command=["true"], name="by-grpc")],
                      audit=api.AuditRequest(via="mcp", key_id="forged", key_description="forged"))
    with http(gateway, cluster.admin_token) as admin:
        rows = admin.get("/audit", params={"principal": "ann"}).json()["records"]
    assert [(r["action"], r["via"], r["key_id"], r["key_description"], r["outcome"]) for r in rows] == [
        ("submit", "grpc", key_id, "ann's laptop", "CONFIRMED"),
        ("submit", "rest", key_id, "ann's laptop", "CONFIRMED"),
        ("kill", "cli", key_id, "ann's laptop", "CONFIRMED"),
        ("submit", "cli", key_id, "ann's laptop", "CONFIRMED")]
    assert '"by-cli"' in rows[3]["params"] and rows[2]["result"] == "OK"
    shown = json.loads(xce_cli(cluster, "audit", "--user", "ann", "--json"))["records"]
    assert [(r["via"], r["key_id"]) for r in shown] == [(r["via"], r["key_id"]) for r in rows]
    table = xce_cli(cluster, "audit", "--user", "ann", "-n", "1")
    assert "KEY" in table and key_id in table and "ann's laptop" in table
    # An admin's write other than a job's, from the command line: in the trail too, under its key.
    xce_cli(cluster, "token", "create", "--user", "bob", "--role", "user", "--description", "bob's")
    [row] = json.loads(xce_cli(cluster, "audit", "--user", "root", "-n", "1", "--json"))["records"]
    assert (row["action"], row["via"], row["outcome"]) == ("createtoken", "cli", "CONFIRMED")
    assert row["key_id"] and "bob's" in row["params"] and "sha256" not in row["params"]
