"""The web dashboard in headless Chromium against one live cluster (private_jobs on): sign in with an
API key; every page renders, passes axe-core with no serious or critical violation and is saved as a
screenshot; the counts come from GET /xce/v1/stats (an array's elements counted, a private user
seeing only its own); a job submitted through REST appears without a reload; a hostile job name
stays text; a kill through the job page's button, once confirmed, ends the job; and a cross-site
write with the session's cookie (a form post, a fetch, a request without the CSRF token or with
another Origin) is refused and changes nothing.

Screenshots go to $XCE_TEST_ARTIFACTS/dashboard if that is set, else under the test's tmp_path."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from ops.local_cluster import LocalCluster, LocalGateway
from tests.cluster.cdp import BINARY, Browser
from tests.conftest import FAST_HOSTS, wait_until

pytestmark = [pytest.mark.cluster,
              pytest.mark.skipif(BINARY is None, reason="chromium is not installed (make's install step)")]
HOSTILE = '<img src=x onerror="window.__xss=1">'
AXE = Path(__file__).resolve().parents[1] / "fixtures" / "axe" / "axe.min.js"
ARRAY_SIZE = 300
OVERVIEW_BYTES = 200_000   # the acceptance bound on what the overview transfers


@pytest.fixture
def served(make_scheduled) -> Iterator[tuple[LocalCluster, LocalGateway]]:  # type: ignore[no-untyped-def]
    cluster, workers = make_scheduled(FAST_HOSTS + "\n[auth]\nprivate_jobs = true\n")
    workers.start("w1", 2)
    gateway = LocalGateway(cluster)
    try:
        gateway.start()
        yield cluster, gateway
    finally:
        gateway.kill()


def artifacts(tmp_path: Path) -> Path:
    where = Path(os.environ["XCE_TEST_ARTIFACTS"]) / "dashboard" if os.environ.get("XCE_TEST_ARTIFACTS") \
        else tmp_path / "artifacts"
    where.mkdir(parents=True, exist_ok=True)
    return where


def check_accessible(browser: Browser, page: str) -> None:
    """axe-core's run over the page as it is: no serious or critical violation. It is put in through
    the DevTools protocol, which the page's Content-Security-Policy does not govern."""
    if not browser.evaluate("typeof window.axe === 'object'"):
        browser.evaluate(AXE.read_text())
    found = browser.evaluate("axe.run(document, {resultTypes: ['violations']}).then(r => r.violations"
                             ".map(v => ({id: v.id, impact: v.impact, help: v.help, "
                             "nodes: v.nodes.slice(0, 3).map(n => n.html)})))")
    bad = [v for v in found if v["impact"] in ("serious", "critical")]
    assert not bad, f"accessibility on {page}: {json.dumps(bad, indent=1)}"


def shoot(browser: Browser, where: Path, page: str) -> None:
    shot = where / f"dashboard-{page}.png"
    browser.screenshot(shot)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 5_000
    print(f"screenshot: {shot}")


def transferred(events: list[dict[str, Any]]) -> int:
    """Bytes on the wire for the requests the DevTools Network domain reported (headers included); a
    request still open (the event stream) counts what it received."""
    finished: dict[str, int] = {}
    partial: dict[str, int] = {}
    for event in events:
        params = event.get("params", {})
        if event["method"] == "Network.loadingFinished":
            finished[params["requestId"]] = int(params["encodedDataLength"])
        elif event["method"] == "Network.dataReceived":
            request = params["requestId"]
            partial[request] = partial.get(request, 0) + int(params["encodedDataLength"])
    return sum(finished.values()) + sum(n for r, n in partial.items() if r not in finished)


@contextmanager
def serving(page: str) -> Iterator[str]:
    """`page` at a URL of another origin (a port of this process's own), while the block lasts."""
    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the handler's name)
            body = page.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/attack.html"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def refusals(browser: Browser, path: str) -> list[int]:
    """The statuses of the answers to requests for `path` so far (reads the notifications waiting)."""
    try:
        browser.send("Runtime.evaluate", expression="1")
    except RuntimeError:
        pass  # a page between documents: the notifications were read all the same
    return [e["params"]["response"]["status"] for e in browser.events
            if e["method"] == "Network.responseReceived" and e["params"]["response"]["url"].endswith(path)]


def test_the_dashboard_counts_draws_acts_and_refuses_forged_writes(
        served: tuple[LocalCluster, LocalGateway], tmp_path: Path) -> None:
    cluster, gateway = served
    key = cluster.admin_token
    rest = httpx.Client(base_url=gateway.url, headers={"Authorization": f"Bearer {key}"}, timeout=30)
    alice = cluster.new_token("alice", "user")
    where = artifacts(tmp_path)
    print(f"artifacts: {where}")

    def submit(spec: dict[str, Any], token: str = key) -> str:
        made = rest.post("/xce/v1/jobs", json={"cwd": "/tmp", **spec},
                         headers={"Authorization": f"Bearer {token}"})
        assert made.status_code == 201, made.text
        return str(made.json()["jobs"][0]["id"])

    def job_state(job: str) -> str:
        return str(rest.get(f"/xce/v1/jobs/{job}").json()["state"])

    hostile = submit({"command": ["sh", "-c", "echo out-line; echo err-line >&2; sleep 120"],
                      "name": HOSTILE})
    submit({"command": ["sleep", "120"], "name": f"sweep[1-{ARRAY_SIZE}]"})
    mine = submit({"command": ["sleep", "120"], "name": "alices"}, alice)

    # The counts: an array's elements each (not its record), for the admin; for alice, her job only.
    everyone = wait_until(lambda: (s := rest.get("/xce/v1/stats").json())["jobs"]["total"] == ARRAY_SIZE + 2
                          and s, "the stats to count every job")
    assert everyone["jobs_visible"] == "all" and everyone["slots"]["total"] == 2
    assert sum(sum(row.values()) for row in everyone["pending"].values()) >= ARRAY_SIZE - 2
    as_alice = {"Authorization": f"Bearer {alice}"}
    hers = httpx.get(gateway.url + "/xce/v1/stats", headers=as_alice).json()
    assert hers["jobs_visible"] == "own" and hers["jobs"]["total"] == 1, hers
    assert list(hers["series"]["pending"]) in ([], ["normal"])
    held = httpx.get(gateway.url + "/xce/v1/whoami", headers=as_alice).json()["permissions"]
    cluster_read = "cluster.read" in held
    assert ("slots" in hers) == ("hosts" in hers) == ("slots_used" in hers["series"]) == cluster_read

    # The session: a cookie for the key, one for the session; a write on them needs the page's token.
    page = httpx.get(gateway.url + "/ui/")
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy
    assert httpx.get(gateway.url + "/ui/../pyproject.toml").status_code == 404
    assert httpx.get(gateway.url + "/ui/vendor/%2e%2e/app.js").status_code == 404
    signed = httpx.post(gateway.url + "/ui/session", json={"key": key})
    cookies = signed.headers.get_list("set-cookie")
    assert signed.status_code == 200 and all("httponly" in c.lower() and "samesite=strict" in c.lower()
                                              for c in cookies) and len(cookies) == 2
    token = signed.json()["csrf"]
    assert httpx.post(gateway.url + "/ui/session", json={"key": "xce_wrong"}).status_code == 401
    jar = dict(signed.cookies)
    kill = {"action": "kill"}
    assert httpx.get(gateway.url + "/xce/v1/whoami", cookies=jar).status_code == 200  # a read: yes
    own = {"Origin": gateway.url}
    act = f"{gateway.url}/xce/v1/jobs/{mine}/actions"
    for headers in ({}, own, {"X-XCE-CSRF": token}, {"X-XCE-CSRF": token, "Origin": "http://evil.example"},
                    {"X-XCE-CSRF": "0" * 64, **own},
                    {"X-XCE-CSRF": token, **own, "Sec-Fetch-Site": "cross-site"}):
        forged = httpx.post(act, cookies=jar, json=kill, headers=headers)
        assert forged.status_code == 403, (headers, forged.text)
    other_session = {**jar, "xce_session": "another"}
    assert httpx.post(f"{gateway.url}/xce/v1/jobs/{mine}/actions", cookies=other_session, json=kill,
                      headers={"X-XCE-CSRF": token, **own}).status_code == 403  # bound to its session
    assert job_state(mine) in ("PEND", "RUN")

    browser = Browser(tmp_path / "chromium")
    try:
        browser.send("Network.enable")
        browser.go(gateway.url + "/ui/")
        wait_until(lambda: browser.evaluate("document.getElementById('signin')?.hidden === false"),
                   "the sign-in form")
        browser.evaluate(f"document.getElementById('key').value = {json.dumps(key)};"
                         "document.getElementById('signin-form').requestSubmit()")
        wait_until(lambda: browser.evaluate("document.getElementById('nav')?.hidden === false"), "signed in")
        assert key not in browser.evaluate("location.href")
        assert browser.evaluate("document.cookie") == ""  # HttpOnly: the page's script cannot read it

        # The overview: facts, three charts, the counts per queue and the host grid, from /stats.
        wait_until(lambda: browser.evaluate("document.querySelectorAll('#overview .uplot').length") == 3,
                   "the overview's charts")
        wait_until(lambda: browser.evaluate("document.querySelectorAll('#overview-grid li').length") == 1,
                   "the host grid")
        total = browser.evaluate("[...document.querySelectorAll('#queue-states tbody tr')]"
                                 ".map(r => Number(r.lastChild.textContent)).reduce((a, b) => a + b, 0)")
        assert total == ARRAY_SIZE + 2
        overview_bytes = transferred(browser.events)
        print(f"overview transferred {overview_bytes} bytes (sign-in page included)")
        assert overview_bytes < OVERVIEW_BYTES
        check_accessible(browser, "overview")
        shoot(browser, where, "overview")

        browser.evaluate("location.hash = '#/hosts'")
        wait_until(lambda: browser.evaluate("document.querySelectorAll('#host-table tbody tr').length") == 1,
                   "the host table")
        check_accessible(browser, "hosts")
        shoot(browser, where, "hosts")

        browser.evaluate("location.hash = '#/queues'")
        wait_until(lambda: browser.evaluate("[...document.querySelectorAll('#queue-table tbody tr')]"
                                            ".some(r => Number(r.lastChild.textContent) > 0)"),
                   "the queue table")
        check_accessible(browser, "queues")
        shoot(browser, where, "queues")

        # The jobs page: a page at a time, a hostile name as text, a new job appearing live.
        browser.evaluate("location.hash = '#/jobs'")
        wait_until(lambda: browser.evaluate("document.querySelectorAll('#job-table tbody tr').length") == 50,
                   "the first page of jobs")
        names = browser.evaluate("[...document.querySelectorAll('#job-table td.name')]"
                                 ".map(c => c.textContent)")
        assert HOSTILE in names
        assert browser.evaluate("document.querySelectorAll('#job-table img').length") == 0
        assert "Jobs per queue" in browser.evaluate("document.getElementById('queue-counts').textContent")
        wait_until(lambda: browser.evaluate("document.getElementById('live').textContent") == "live",
                   "the event stream")
        browser.evaluate("document.getElementById('f-queue').value = 'nosuch';"
                         "document.getElementById('filters').requestSubmit()")
        wait_until(lambda: browser.evaluate("document.querySelectorAll('#job-table tbody tr').length") == 0,
                   "an empty filtered page")
        browser.evaluate("document.getElementById('f-queue').value = '';"
                         "document.getElementById('f-state').value = 'RUN';"
                         "document.getElementById('filters').requestSubmit()")
        wait_until(lambda: browser.evaluate("document.querySelectorAll('#job-table tbody tr').length") >= 1,
                   "the running jobs")
        check_accessible(browser, "jobs")
        shoot(browser, where, "jobs")
        browser.evaluate("document.getElementById('f-state').value = 'PEND';"
                         "document.getElementById('filters').requestSubmit()")
        wait_until(lambda: browser.evaluate("document.getElementById('page-next').disabled === false"),
                   "a second page of pending jobs")
        browser.evaluate("document.getElementById('f-state').value = '';"
                         "document.getElementById('f-user').value = 'nobody-else';"
                         "document.getElementById('filters').requestSubmit()")
        wait_until(lambda: browser.evaluate("document.querySelectorAll('#job-table tbody tr').length") == 0,
                   "the page for a user with no jobs")
        browser.evaluate("document.getElementById('f-user').value = '';"
                         "document.getElementById('filters').requestSubmit()")
        wait_until(lambda: browser.evaluate("document.querySelectorAll('#job-table tbody tr').length") == 50,
                   "the first page again")
        # A new job is appended on the last page: the filter by name's user shows a short one.
        browser.evaluate("document.getElementById('f-user').value = 'alice';"
                         "document.getElementById('filters').requestSubmit()")
        wait_until(lambda: browser.evaluate("document.querySelectorAll('#job-table tbody tr').length") == 1,
                   "alice's page")
        fresh = submit({"command": ["sleep", "120"], "name": "fresh"}, alice)
        row = f"document.querySelector('#job-table a[href=\"#/job/{fresh}\"]')"
        wait_until(lambda: browser.evaluate(f"{row} !== null"), "the new job's row, from the event stream")

        # The job page: times, host, both outputs, the timeline; then kill through its button.
        wait_until(lambda: job_state(hostile) == "RUN", "the hostile job to run")
        browser.evaluate(f"location.hash = '#/job/{hostile}'")
        wait_until(lambda: "out-line" in browser.evaluate("document.getElementById('job-output').textContent")
                   and "err-line" in browser.evaluate("document.getElementById('job-errors').textContent"),
                   "the job's stdout and stderr", timeout_s=30)
        title = browser.evaluate("document.getElementById('job-title').textContent")
        assert title == f"Job {hostile}: {HOSTILE}"
        assert browser.evaluate("document.querySelectorAll('#job-timeline .segment').length") >= 2
        assert browser.evaluate("window.__xss === undefined")  # nothing the cluster sent ran
        check_accessible(browser, "job")
        shoot(browser, where, "job")
        browser.evaluate("document.querySelector('#job-actions [data-action=kill]').click()")
        wait_until(lambda: browser.evaluate("document.getElementById('confirm').open"), "the confirmation")
        shoot(browser, where, "confirm")
        assert job_state(hostile) == "RUN"  # nothing until confirmed
        browser.evaluate("document.getElementById('confirm-yes').click()")
        wait_until(lambda: job_state(hostile) == "EXIT", "the kill to take effect", timeout_s=30)
        wait_until(lambda: "Kill: done" in browser.evaluate(
            "document.getElementById('action-result').textContent"), "the kill's answer on the page")

        # Another origin of the same site (so SameSite lets the cookies go along) posts a form and a
        # fetch to the gateway: without the session's token and with its own Origin, both are refused.
        attack = (f"<!doctype html><title>attack</title><form method=post enctype=text/plain "
                  f"action='{gateway.url}/xce/v1/jobs/{mine}/actions'>"
                  "<input name='{\"action\":\"kill\",\"x\":\"' value='\"}'></form>"
                  f"<script>fetch('{gateway.url}/xce/v1/jobs/{mine}/actions', {{method: 'POST', "
                  "credentials: 'include', mode: 'no-cors', body: JSON.stringify({action: 'kill'})})"
                  ".finally(() => document.forms[0].submit())</script>")
        with serving(attack) as elsewhere:
            browser.send("Page.navigate", url=elsewhere)
            wait_until(lambda: len(refusals(browser, f"/jobs/{mine}/actions")) >= 2,
                       "the forged requests' answers")
            assert all(s == 403 for s in refusals(browser, f"/jobs/{mine}/actions"))
        assert job_state(mine) in ("PEND", "RUN")
    finally:
        browser.close()
        rest.close()
