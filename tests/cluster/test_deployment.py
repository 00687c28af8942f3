"""A three-host deployment set up only with the documented commands (docs/DEPLOY.md): `xce init`, then
one daemon per "host" with its bundle, the replicas each in a network namespace of its own. It runs
jobs, survives a leader kill, and `xce status` shows three voters; a replica replaced on a fourth host
with `xce init-replica` and `xce member add` gets its bundle from the same CA."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ops.local_cluster import kill_jobs_under
from soak.netns import Net, available
from tests.conftest import print_logs_if_failed, wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.skipif(available() is not None, reason=str(available()))]


class Hosts:
    """The daemons of the deployment, each run as the units run it; all killed at the end."""

    def __init__(self, tmp: Path, net: Net) -> None:
        self.tmp, self.net = tmp, net
        self.deploy = tmp / "deploy"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.env = {**os.environ, "XCE_TOKEN_FILE": str(self.deploy / "admin" / "token")}
        self.env.pop("XCE_TOKEN", None)
        self.env.pop("XCE_CONTROLLERS", None)

    def etc(self, host: str) -> Path:
        return self.deploy / "hosts" / host

    def run(self, name: str, args: list[str], prefix: list[str] | None = None) -> None:
        command = [*(prefix or []), sys.executable, "-m", "cli", *args]
        with open(self.tmp / f"{name}.log", "ab") as out:
            self.procs[name] = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                                stdin=subprocess.DEVNULL, env=self.env)

    def replica(self, i: int, host: str, join: bool = False) -> None:
        config = str(self.etc(host) / "cluster.toml")
        join_args = ["--join"] if join else []
        self.run(f"replica-{i}", ["controller", "--config", config, "--id", str(i), *join_args],
                 prefix=list(self.net.prefix(i - 1)))

    def xce(self, host: str, *args: str) -> str:
        """The CLI on `host`, as its bundle sets it up (/etc/xce/cluster.toml there), as the admin."""
        command = [sys.executable, "-m", "cli", "--cluster", str(self.etc(host) / "cluster.toml"), *args]
        done = subprocess.run(command, capture_output=True, text=True, env=self.env, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def kill(self, name: str) -> None:
        proc = self.procs.pop(name)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        self.procs.clear()
        kill_jobs_under(self.tmp)


@pytest.fixture
def hosts(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Hosts]:
    net = Net(4)
    deployment = Hosts(tmp_path, net)
    try:
        yield deployment
    finally:
        deployment.stop()
        net.close()
        print_logs_if_failed(request, tmp_path)


def _status(hosts: Hosts, host: str) -> dict[int, str]:
    status = json.loads(hosts.xce(host, "status", "--json"))
    return {int(r["id"]): r["role"] for r in status["replicas"]}


def test_a_three_host_deployment_from_the_bundles_runs_jobs_through_a_leader_kill(hosts: Hosts,
                                                                                  tmp_path: Path) -> None:
    a, b, c, d = hosts.net.addresses
    replicas = ",".join(f"{h}:7101" for h in (a, b, c))
    made = subprocess.run(
        [sys.executable, "-m", "cli", "init", "--cluster-id", "prod", "--replicas", replicas, "--workers",
         "n1", "--data-dir", str(tmp_path / "var-lib-xce"), "--spool-dir", str(tmp_path / "var-spool-xce"),
         "--admin", "root", "--out", str(hosts.deploy)], capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    # The worker host's configuration, edited as DEPLOY.md says (the jobs here are root's).
    with open(hosts.etc("n1") / "worker.toml", "a") as f:
        f.write("slots = 2\nallow_root_jobs = true\n")
    for i, host in enumerate((a, b, c), start=1):
        hosts.replica(i, host)
        cert = hosts.etc(host) / "tls" / f"scheduler-sched-{host}"
        config = str(hosts.etc(host) / "cluster.toml")
        hosts.run(f"scheduler-{host}", ["--cluster", config, "scheduler", "--id", f"sched-{host}",
                                        "--cert", f"{cert}.crt", "--key", f"{cert}.key"])
    hosts.run("worker-n1", ["worker", "--config", str(hosts.etc("n1") / "worker.toml")])
    wait_until(lambda: sorted(_status(hosts, "n1").values()) == ["follower", "follower", "leader"],
               "three voters, one of them leading")

    def run_jobs(tag: str) -> None:
        out = json.loads(hosts.xce("n1", "submit", "--json", "--cwd", "/tmp", "--", "sh", "-c",
                                   f"echo {tag} > {tmp_path}/{tag}"))
        job_id = str(out["id"])
        wait_until(lambda: json.loads(hosts.xce("n1", "job", job_id, "--json")).get("state") == "DONE",
                   f"job {tag} to run")
        assert (tmp_path / tag).read_text().strip() == tag

    run_jobs("first")
    leader = next(i for i, role in _status(hosts, "n1").items() if role == "leader")
    hosts.kill(f"replica-{leader}")
    wait_until(lambda: "leader" in [role for i, role in _status(hosts, "n1").items() if i != leader],
               "a new leader")
    run_jobs("after-the-kill")
    hosts.replica(leader, (a, b, c)[leader - 1])
    wait_until(lambda: sorted(_status(hosts, "n1").values()) == ["follower", "follower", "leader"],
               "three voters again")

    # A fourth host: its bundle from the same CA (xce init-replica), started as a learner, added.
    done = subprocess.run([sys.executable, "-m", "cli", "init-replica", "--deploy", str(hosts.deploy),
                           "--id", "4", "--address", f"{d}:7101"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    hosts.replica(4, d, join=True)
    wait_until(lambda: "serving gRPC" in (tmp_path / "replica-4.log").read_text(), "replica 4 to serve")
    out = hosts.xce("n1", "member", "add", f"{d}:7101")
    assert "replica 4 is a voter" in out
    # Committed as a voter; the replica itself says standby until the leader's first append in the new
    # configuration reaches it (a faster CLI asked within that window).
    voters = ["follower", "follower", "follower", "leader"]
    wait_until(lambda: sorted(_status(hosts, "n1").values()) == voters, "four voters")
    run_jobs("with-four")
