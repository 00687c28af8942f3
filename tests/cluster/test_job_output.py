"""A job's output through the gateway and `xce peek`: read by the worker of its host and
relayed over the worker's stream; its owner's to read (or an operator's), never a file the job put
in its place through a link."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import httpx
import pytest

from ops.local_cluster import LocalCluster, LocalGateway, LocalScheduler, LocalWorkers
from tests.conftest import FAST_HOSTS, print_logs_if_failed, wait_until, xce_cli

pytestmark = pytest.mark.cluster
V1 = "/xce/v1"


def test_the_owner_reads_its_job_s_output_and_a_link_in_its_place_is_refused(
        reachable_by_nobody: None, request: pytest.FixtureRequest) -> None:
    # The jobs run as nobody: the spool must be reachable (0711, as /var/spool is), not in pytest's 0700.
    home = Path(tempfile.mkdtemp(prefix="xce-output-", dir="/tmp"))
    home.chmod(0o711)
    work = home / "work"
    work.mkdir()
    work.chmod(0o777)
    cluster = LocalCluster(home / "cluster", extra_config=FAST_HOSTS)
    workers, scheduler, gateway = LocalWorkers(cluster), LocalScheduler(cluster), LocalGateway(cluster)
    try:
        cluster.start()
        cluster.leader()
        workers.start("w1", 2)
        scheduler.start()
        gateway.start()
        nobody = {"Authorization": f"Bearer {cluster.new_token('nobody', 'user')}"}
        alice = {"Authorization": f"Bearer {cluster.new_token('alice', 'user')}"}
        admin = {"Authorization": f"Bearer {cluster.admin_token}"}
        with httpx.Client(base_url=gateway.url + V1, timeout=60) as http:
            def submit(command: str, **extra: object) -> str:
                answer = http.post("/jobs", headers=nobody, json={"command": ["sh", "-c", command],
                                                                  "cwd": str(work), **extra})
                assert answer.status_code == 201, answer.text
                return str(answer.json()["jobs"][0]["id"])

            # The array first: its elements end at once, before the two sleepers below take both slots.
            array = submit('echo "element $XCE_ARRAY_INDEX"', name="parts[1-2]")
            talker = submit("echo hello; echo oops >&2; sleep 60")
            # What a hostile job could do: put a link to a file only root may read where its output was.
            linker = submit('F="$XCE_SPOOL/users/nobody/$XCE_JOB_ID.$XCE_JOB_ATTEMPT.out"; rm -f "$F"; '
                            'ln -s /etc/shadow "$F"; echo linked >&2; sleep 60')
            held = submit("true")
            http.post(f"/jobs/{held}/actions", headers=nobody, json={"action": "hold"})

            def output(job: str, who: dict[str, str], stream: str = "stdout") -> httpx.Response:
                return http.get(f"/jobs/{job}/output", headers=who, params={"stream": stream})

            said = wait_until(lambda: (r := output(talker, nobody)).status_code == 200 and r.text == "hello\n"
                              and r, "the job's output")
            assert said.headers["x-xce-host"] == "w1" and said.headers["x-xce-output-size"] == "6"
            assert output(talker, nobody, "stderr").text == "oops\n"
            assert output(talker, admin).text == "hello\n"  # an operator or admin (jobs.env.all)
            other = output(talker, alice)
            assert other.status_code == 403 and "jobs.env.all" in other.json()["detail"]
            wait_until(lambda: output(linker, nobody, "stderr").text == "linked\n", "the link in place")
            refused = output(linker, nobody)
            assert refused.status_code == 400 and "cannot open" in refused.json()["detail"], refused.text
            assert "root:" not in refused.text
            unrun = output(held, nobody)
            assert unrun.status_code == 400 and "has not run" in unrun.json()["detail"]
            assert output(talker, nobody, "both").status_code == 400
            # An array's element by its own id, as bpeek 12[2] (its job, live or finished).
            second = wait_until(lambda: (r := output(f"{array}[2]", nobody)).status_code == 200 and r,
                                "the array element's output")
            assert second.text == "element 2\n"
            assert output(f"{array}[7]", nobody).status_code == 404  # no such index
            assert output(f"{array}[1]", alice).status_code in (403, 404)  # not alice's
        assert xce_cli(cluster, "peek", talker) == "hello\n"
    finally:
        gateway.kill()
        scheduler.kill()
        workers.stop()
        cluster.stop()
        print_logs_if_failed(request, cluster.data)
        shutil.rmtree(home, ignore_errors=True)
