"""One gateway, one MCP server, three clusters: XCE's own; a real Slurm 22.05 through slurmrestd (JWT,
acting as each caller); and an LSF through its commands (XCE's own LSF commands: the only LSF that
runs here), each command run as the caller's account, proven to XCE by MUNGE.

The golden agent sequence (submit -> wait -> output -> analyze) passes on each, named by cluster in
one MCP session; a read-only key writes on none of them; the audit trail names the cluster of every
row; a key scoped to one cluster is refused the others."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import FAST_HOSTS, run_munged, wait_until
from lsf_site import serving
from slurm_peer import slurm_peer
from test_mcp import unwrap, with_agent

from ops.local_cluster import LocalCluster, LocalGateway
from xce import lsf_bin
from xce.v1 import api_pb2 as api

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(shutil.which("munged") is None, reason="munge is not installed"),
    pytest.mark.skipif(os.geteuid() != 0, reason="commands as the caller's account need root"),
]

USER = "nobody"  # a real account with no home: jobs run as it on every cluster


@dataclass
class Three:
    cluster: LocalCluster
    gateway: LocalGateway
    local: str
    jobs_dir: Path  # every cluster's jobs write here (0777): the gateway shares this file system

    def key(self, role: str, clusters: tuple[str, ...] = ()) -> str:
        return self.cluster.new_token(
            USER, role, scope=api.TokenScope(clusters=clusters) if clusters else None
        )

    def rest(self, key: str, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return httpx.request(
            method,
            f"{self.gateway.url}/xce/v1{path}",
            headers={"Authorization": f"Bearer {key}"},
            timeout=60,
            **kwargs,
        )


@pytest.fixture(scope="module")
def three(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Three]:
    with ExitStack() as stack:
        socket = stack.enter_context(run_munged())
        peer = stack.enter_context(slurm_peer())
        home = Path(stack.enter_context(_home()))
        cluster = LocalCluster(
            home / "cluster", extra_config=FAST_HOSTS + f'\n[auth]\nmunge = true\nmunge_socket = "{socket}"\n'
        )
        stack.enter_context(serving(cluster, (("w1", 2),)))
        jwt = home / "slurm.jwt"
        jwt.write_text(peer.token("root"))
        jwt.chmod(0o600)
        lsf_env = {
            "XCE_DATA": str(home / "none"),
            "XCE_CONTROLLERS": ",".join(cluster.addresses),
            "XCE_CA": str(home / "ca.crt"),
            "XCE_CERT": str(home / "client.crt"),
            "XCE_KEY": str(home / "client.key"),
            "XCE_MUNGE": "1",
            "XCE_MUNGE_SOCKET": str(socket),
        }
        for name, copy in (
            ("ca.crt", "ca.crt"),
            ("client-xce.crt", "client.crt"),
            ("client-xce.key", "client.key"),
        ):
            shutil.copy(cluster.data / "tls" / name, home / copy)
            (home / copy).chmod(0o644)
        clusters = home / "clusters.toml"
        clusters.write_text(f"""
[clusters.hpc]
backend = "slurm"
url = "{peer.rest_url}"
token_file = "{jwt}"
bin = "/usr/bin"
env = {{ SLURM_CONF = "{peer.conf}" }}
run_as_caller = true
shared_fs = true

[clusters.lsf]
backend = "lsf"
bin = "{lsf_bin.ensure()}"
env = {{ {", ".join(f'{k} = "{v}"' for k, v in lsf_env.items())} }}
run_as_caller = true
shared_fs = true
""")
        gateway = LocalGateway(cluster, args=["--clusters", str(clusters)])
        stack.callback(gateway.kill)
        gateway.start()
        with cluster.client() as client:
            local = client.who_am_i().cluster_id
        try:
            yield Three(cluster, gateway, local, home / "jobs")
        except BaseException:
            print(peer.logs())
            raise


def _home() -> Any:
    """A /tmp home nobody passes through (0711), with a jobs directory nobody writes in; removed after."""
    import contextlib
    import tempfile

    @contextlib.contextmanager
    def made() -> Iterator[str]:
        home = Path(tempfile.mkdtemp(prefix="xce-three-", dir="/tmp"))
        home.chmod(0o711)
        (home / "jobs").mkdir()
        (home / "jobs").chmod(0o777)
        try:
            yield str(home)
        finally:
            shutil.rmtree(home, ignore_errors=True)

    return made()


def test_the_golden_agent_sequence_on_xce_slurm_and_lsf(three: Three) -> None:
    key = three.key("mcp_operator")
    names = [three.local, "hpc", "lsf"]

    async def script(agent: Any) -> dict[str, Any]:
        seen: dict[str, Any] = {"clusters": unwrap(await agent.call("scheduler_list_clusters"))}
        for name in names:
            command = ["sh", "-c", f"echo out-{name}; echo err-{name} >&2; exit 3"]
            submitted = unwrap(
                await agent.call(
                    "scheduler_submit",
                    command=command,
                    name=f"golden-{name}",
                    cwd=str(three.jobs_dir),
                    cluster=name,
                )
            )
            assert "submitted" in submitted, submitted
            job = submitted["submitted"]
            job_id = str(job["id"]) if name == three.local else job["readable_id"]  # hpc:17, lsf:12
            waited = unwrap(await agent.call("scheduler_wait_job", job_id=job_id, timeout_s=120))
            output = unwrap(await agent.call("scheduler_job_output", job_id=job_id, cluster=name))
            analyzed = unwrap(await agent.call("scheduler_analyze_failure", job_id=job_id, cluster=name))
            status = unwrap(await agent.call("scheduler_cluster_status", cluster=name))
            seen[name] = {
                "job": job,
                "waited": waited,
                "output": output,
                "analyzed": analyzed,
                "status": status,
            }
        # sized and timed from Slurm's own data (slurmrestd's jobs, nodes and partitions)
        seen["suggested"] = unwrap(
            await agent.call("scheduler_suggest_resources", command=["golden-hpc"], cluster="hpc")
        )
        seen["estimated"] = unwrap(
            await agent.call("scheduler_estimate_wait_time", command=["true"], cluster="hpc")
        )
        return seen

    seen = with_agent(three.gateway, key, script)
    listed = {c["name"]: c for c in seen["clusters"]["clusters"]}
    assert set(listed) == set(names) and all(c["healthy"] for c in listed.values()), [
        (c["name"], c["health"]) for c in listed.values()
    ]
    assert (listed["hpc"]["backend"], listed["lsf"]["backend"], listed[three.local]["backend"]) == (
        "slurm",
        "lsf",
        "xce",
    )
    assert "events" in listed["hpc"]["cannot"] and "submit" in listed["lsf"]["supports"]
    for name in names:
        got = seen[name]
        assert got["job"]["user"] == USER and got["job"].get("cluster", three.local) == name, got["job"]
        assert got["waited"]["ended"] and got["waited"]["job"]["state"] == "EXIT", got["waited"]
        assert got["waited"]["exit_code"] == 3, got["waited"]
        assert f"out-{name}" in got["output"]["text"], got["output"]
        assert got["analyzed"]["exit_code"] == 3 and f"err-{name}" in got["analyzed"]["stderr_tail"], got[
            "analyzed"
        ]
        assert got["status"]["hosts"]["total"] >= 1 and got["status"]["jobs_by_state"].get("EXIT", 0) >= 1
    assert seen["hpc"]["analyzed"]["native"]["state"] == "FAILED"
    assert seen["hpc"]["analyzed"]["native"]["exit"] == "3:0"  # Slurm's own words, beside XCE's
    assert seen["hpc"]["status"]["backend"] == "slurm"
    assert seen["suggested"]["based_on"] >= 1 and seen["suggested"]["slots"] == 1, seen["suggested"]
    assert seen["estimated"]["hosts"] == 2 and seen["estimated"]["start_in_s"] is not None, seen["estimated"]


def test_a_read_only_key_writes_on_no_cluster_and_every_row_names_its_cluster(three: Three) -> None:
    operator, readonly = three.key("mcp_operator"), three.key("mcp_readonly")
    held = three.rest(
        operator,
        "POST",
        "/jobs",
        params={"cluster": "hpc"},
        json={"command": ["sleep", "60"], "cwd": str(three.jobs_dir), "name": "victim"},
    )
    assert held.status_code == 201, held.text
    victim = held.json()["jobs"][0]["readable_id"]
    for name in (three.local, "hpc", "lsf"):
        submit = three.rest(
            readonly,
            "POST",
            "/jobs",
            params={"cluster": name},
            json={"command": ["true"], "cwd": str(three.jobs_dir)},
        )
        assert submit.status_code == 403, (name, submit.text)
    kill = three.rest(readonly, "POST", f"/jobs/{victim}/actions", json={"action": "kill"})
    assert kill.status_code == 403 and "jobs.control" in kill.json()["detail"]
    assert three.rest(readonly, "GET", f"/jobs/{victim}").json()["state"] in ("PEND", "RUN")  # still there
    # slurmrestd 22.05 has no requeue: the gateway runs `scontrol requeue` as the caller (nobody)
    wait_until(
        lambda: three.rest(operator, "GET", f"/jobs/{victim}").json()["state"] == "RUN", "victim running"
    )
    requeued = three.rest(operator, "POST", f"/jobs/{victim}/actions", json={"action": "requeue"})
    assert requeued.status_code == 200, requeued.text
    wait_until(  # Slurm ends the running instance, then the job waits again
        lambda: (
            three.rest(operator, "GET", f"/jobs/{victim}").json()["native"]["state"]
            in ("PENDING", "REQUEUED")
        ),
        "the victim requeued",
    )
    dry = three.rest(
        operator, "POST", f"/jobs/{victim}/actions", params={"dry_run": "true"}, json={"action": "kill"}
    )
    assert dry.status_code == 200 and dry.json()["dry_run"].startswith("would kill job")
    killed = three.rest(operator, "POST", f"/jobs/{victim}/actions", json={"action": "kill"})
    assert killed.status_code == 200 and killed.json()["state"] in ("EXIT", "RUN"), killed.text  # RUN: ending

    admin = three.cluster.new_token("root", "cluster_admin")
    rows = three.rest(admin, "GET", "/audit", params={"page_size": 500}).json()["records"]
    mine = [(r["cluster"], r["action"], r["outcome"], r["role"]) for r in rows if r["principal"] == USER]
    for name in (three.local, "hpc", "lsf"):
        assert (name, "submit", "REFUSED", "mcp_readonly") in mine, (name, mine)
    assert ("hpc", "kill", "REFUSED", "mcp_readonly") in mine
    assert ("hpc", "kill", "DRY_RUN", "mcp_operator") in mine and (
        "hpc",
        "kill",
        "CONFIRMED",
        "mcp_operator",
    ) in mine
    assert ("lsf", "submit", "CONFIRMED", "mcp_operator") in mine  # the golden sequence's, or this module's


def test_a_key_scoped_to_one_cluster_is_refused_the_others(three: Three) -> None:
    scoped = three.key("mcp_operator", clusters=("hpc",))
    assert three.rest(scoped, "GET", "/jobs", params={"cluster": "hpc"}).status_code == 200
    for name in (three.local, "lsf"):
        refused = three.rest(scoped, "GET", "/jobs", params={"cluster": name})
        assert refused.status_code == 403 and "not among its clusters" in refused.json()["detail"], (
            refused.text
        )
    listed = three.rest(scoped, "GET", "/clusters").json()["clusters"]
    assert {c["name"]: c["in_scope"] for c in listed} == {three.local: False, "hpc": True, "lsf": False}
    unknown = three.rest(scoped, "GET", "/jobs", params={"cluster": "nowhere"})
    assert unknown.status_code == 404 and "hpc" in unknown.json()["detail"]
    # the local cluster's event stream is the gateway's own: it refuses such a key itself
    events = three.rest(scoped, "GET", "/events")
    assert events.status_code == 403 and "not among its clusters" in events.json()["detail"], events.text
    nameless = httpx.get(f"{three.gateway.url}/xce/v1/jobs", params={"cluster": "nowhere"}, timeout=30)
    assert nameless.status_code == 401  # no key: no word of which clusters there are


def test_what_a_key_may_not_do_elsewhere_it_may_not_do_here_either(three: Three) -> None:
    """Queues of a scope, numeric and administrator names on Slurm, secrets in the trail, revoked keys,
    a dry run that would be refused."""
    queued = three.cluster.new_token(USER, "mcp_operator", scope=api.TokenScope(queues=["debug"]))
    unnamed = three.rest(queued, "POST", "/jobs", params={"cluster": "hpc"}, json={"command": ["true"]})
    assert unnamed.status_code == 403 and "names no queue" in unnamed.json()["detail"], unnamed.text
    for name in ("0", "root"):  # a number is a uid to Slurm; root is the token's own power
        admin_named = three.cluster.new_token(name, "user")
        refused = three.rest(
            admin_named,
            "POST",
            "/jobs",
            params={"cluster": "hpc"},
            json={"command": ["id"], "cwd": str(three.jobs_dir)},
        )
        assert refused.status_code == 403 and "does not act as" in refused.json()["detail"], refused.text
    operator = three.key("mcp_operator")
    secret = three.rest(
        operator,
        "POST",
        "/jobs",
        params={"cluster": "hpc", "dry_run": "true"},
        json={"command": ["true"], "env": {"MYSECRET": "hunter2"}},
    )
    assert secret.status_code == 200, secret.text
    asking_priority = three.rest(
        operator,
        "POST",
        "/jobs",
        params={"cluster": "lsf", "dry_run": "true"},
        json={"command": ["true"], "priority": 7},
    )
    assert asking_priority.status_code == 400 and "does not take priority" in asking_priority.json()["detail"]
    admin = three.cluster.new_token("root", "cluster_admin")
    rows = three.rest(admin, "GET", "/audit", params={"page_size": 50}).json()["records"]
    assert any("MYSECRET" in r["params"] for r in rows) and not any("hunter2" in r["params"] for r in rows)
    listed = three.rest(operator, "GET", "/jobs", params={"cluster": "hpc"})  # no page_size: the default
    assert listed.status_code == 200 and listed.json()["jobs"], listed.text
    assert three.rest(operator, "GET", "/jobs", params={"cluster": "hpc"}).status_code == 200  # remembered
    with three.cluster.client() as client:
        for token in client.list_tokens():
            if token.user == USER and token.role == "mcp_operator" and not token.HasField("scope"):
                client.revoke_token(token.id)
    revoked = three.rest(operator, "POST", "/jobs", params={"cluster": "hpc"}, json={"command": ["true"]})
    assert revoked.status_code == 401, revoked.text  # asked again before any write, not remembered
