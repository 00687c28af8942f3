"""The gateway against its own OpenAPI document, and its conditional, blocking and health reads, on a
real three-replica cluster (no workers: no generated command ever runs).

schemathesis (unmodified, its command line) sends property-based requests made from the document to
every route: no 5xx, every answer's status, content type, headers and body as the document says,
every request that breaks the schema refused, no route served without a key.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openapi_spec_validator import validate

from ops.local_cluster import LocalCluster, LocalGateway

pytestmark = pytest.mark.cluster

V1 = "/xce/v1"
# A rejection is any of these (schemathesis' list, and 413: a body over the gateway's 1 MiB).
Live = tuple[LocalCluster, LocalGateway, LocalGateway]
REJECTIONS = ["400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428", "429"]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """The cluster; a gateway for schemathesis (blocking reads cut to 2 s, bookmarks every 0.2 s, so
    that no generated request outlives its timeout); one with the defaults."""
    with LocalCluster(tmp_path_factory.mktemp("contract") / "xce-data").running() as cluster:
        fuzzed = LocalGateway(cluster, name="gateway-fuzzed", args=["--max-wait", "2"])
        plain = LocalGateway(cluster)
        try:
            with pytest.MonkeyPatch.context() as patch:
                patch.setenv("XCE_GATEWAY_BOOKMARK_S", "0.2")
                fuzzed.start()
            plain.start()
            yield cluster, fuzzed, plain
        finally:
            fuzzed.kill()
            plain.kill()


def operations(document: dict[str, Any]) -> list[str]:
    return [f"{method} {path}" for path, methods in document["paths"].items() for method in methods]


def http(gw: LocalGateway, key: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.Client(base_url=gw.url + V1, headers=headers, timeout=60)


def test_schemathesis_finds_nothing_on_any_route(live: Live,
                                                 tmp_path: Path) -> None:
    cluster, fuzzed, _ = live
    document = httpx.get(f"{fuzzed.url}{V1}/openapi.json", timeout=30).json()
    validate(document)
    config = tmp_path / "schemathesis.toml"
    config.write_text("max-stream-events = 3\n\n[checks.negative_data_rejection]\n"
                      f"expected-statuses = {REJECTIONS!r}\n".replace("'", '"'))
    tool = Path(sys.executable).with_name("schemathesis")
    # positive_data_acceptance is left out: a schema cannot say which queues, roles, users or job ids
    # exist, so a schema-valid request may rightly be a 400 or 404 (the controllers' checks).
    result = subprocess.run(
        [str(tool), "--config-file", str(config), "run", f"{fuzzed.url}{V1}/openapi.json",
         "-H", f"Authorization: Bearer {cluster.admin_token}", "--checks", "all",
         "--exclude-checks", "positive_data_acceptance", "--max-examples", "8", "--seed", "20261206",
         "--request-timeout", "30", "--workers", "2"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
        env={**os.environ, "SCHEMATHESIS_TELEMETRY": "false", "NO_COLOR": "1"})
    print(result.stdout[-20000:], result.stderr[-5000:])
    assert result.returncode == 0, "schemathesis found failures (above)"
    selected = re.search(r"Selected: (\d+)/(\d+)", result.stdout)
    assert selected is not None and selected[1] == selected[2] == str(len(operations(document)))


def test_unknown_query_parameters_are_refused_by_name(live: Live) -> None:
    cluster, _, gw = live
    with http(gw, cluster.admin_token) as admin:
        admin.post("/jobs", json={"command": ["true"], "hold": True}).raise_for_status()
        answer = admin.get("/jobs", params={"state": "RUN"})
        assert answer.status_code == 400
        assert "unknown query parameter 'state'" in answer.json()["detail"]
        assert "filter" in answer.json()["detail"]  # says what the route takes
        assert admin.get("/jobs", params={"filter": "state:eq:RUN"}).json()["jobs"] == []
        assert admin.get("/hosts", params={"stale": "true", "colour": "red"}).status_code == 400


def test_etags_make_reads_conditional_and_writes_safe(live: Live) -> None:
    cluster, _, gw = live
    with http(gw, cluster.admin_token) as admin:
        [job] = admin.post("/jobs", json={"command": ["sleep", "9"], "hold": True}).json()["jobs"]
        first = admin.get(f"/jobs/{job['id']}")
        tag = first.headers["etag"]
        assert int(first.headers["x-xce-index"]) > 0
        assert admin.get(f"/jobs/{job['id']}", headers={"If-None-Match": tag}).status_code == 304
        queues = admin.get("/queues")
        assert admin.get("/queues", headers={"If-None-Match": queues.headers["etag"]}).status_code == 304

        # Someone else changes the job: a write on the old ETag is refused and changes nothing.
        admin.patch(f"/jobs/{job['id']}", json={"priority": 7}).raise_for_status()
        path = f"/jobs/{job['id']}"
        stale = admin.post(f"{path}/actions", json={"action": "release"}, headers={"If-Match": tag})
        assert stale.status_code == 412, stale.text
        now = admin.get(f"/jobs/{job['id']}")
        assert now.json()["state"] == "PSUSP" and stale.json()["etag"] == now.headers["etag"] != tag
        assert admin.patch(path, json={"priority": 1}, headers={"If-Match": tag}).status_code == 412
        assert admin.get(f"/jobs/{job['id']}").json()["spec"]["priority"] == 7
        done = admin.post(f"/jobs/{job['id']}/actions", json={"action": "release"},
                          headers={"If-Match": now.headers["etag"]})
        assert done.status_code == 200 and done.json()["state"] == "PEND", done.text
        assert admin.get(f"/jobs/{job['id']}", headers={"If-None-Match": tag}).status_code == 200


def test_a_blocking_read_answers_at_the_change_or_at_the_wait(
        live: Live) -> None:
    cluster, _, gw = live
    with http(gw, cluster.admin_token) as admin:
        [job] = admin.post("/jobs", json={"command": ["sleep", "9"], "hold": True}).json()["jobs"]
        index = int(admin.get(f"/jobs/{job['id']}").headers["x-xce-index"])

        # Nothing changes this job: the answer comes when the wait is over, the job as it was.
        started = time.monotonic()
        quiet = admin.get(f"/jobs/{job['id']}", params={"index": index, "wait": "1s"})
        assert time.monotonic() - started >= 0.95 and quiet.json()["state"] == "PSUSP"

        # The job changes while a read waits 60 s: it answers then, with the change.
        answers: list[tuple[float, httpx.Response]] = []

        def block() -> None:
            with http(gw, cluster.admin_token) as reader:
                found = reader.get(f"/jobs/{job['id']}", params={"index": index, "wait": "60s"})
                answers.append((time.monotonic(), found))

        reader = threading.Thread(target=block)
        reader.start()
        released = admin.post(f"/jobs/{job['id']}/actions", json={"action": "release"})
        released.raise_for_status()
        changed_at = time.monotonic()
        reader.join(timeout=90)
        [(answered_at, answer)] = answers
        assert answer.json()["state"] == "PEND"
        assert int(answer.headers["x-xce-index"]) > index
        print(f"blocking read answered {1000 * (answered_at - changed_at):.0f} ms after the write's answer")
        assert answered_at - changed_at < 30  # at the change, not at the end of its 60 s

        # A key the cluster does not take holds no wait: 401 at once.
        started = time.monotonic()
        fake = httpx.get(f"{gw.url}{V1}/queues", params={"index": index, "wait": "30s"}, timeout=60,
                         headers={"Authorization": "Bearer xce_not_a_key"})
        assert fake.status_code == 401 and time.monotonic() - started < 15

        # A list blocks on any job's change; a bad wait is refused before any wait.
        assert admin.get("/jobs", params={"index": index, "wait": "soon"}).status_code == 400
        assert admin.get("/jobs", params={"wait": "5s"}).status_code == 400  # wait needs index


def test_health_needs_no_key(live: Live) -> None:
    _, _, gw = live
    assert httpx.get(f"{gw.url}/healthz", timeout=30).json() == {"ok": True}
    ready = httpx.get(f"{gw.url}/readyz", timeout=30)
    assert ready.status_code == 200, ready.text
    assert ready.json() == {"ok": True}  # and nothing of the cluster: the probe carries no key
    assert httpx.get(f"{gw.url}{V1}/jobs", timeout=30).status_code == 401  # the rest still needs one
