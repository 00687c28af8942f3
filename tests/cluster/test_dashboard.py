"""The web dashboard in headless Chromium against a live cluster: sign in with an API key,
the job table fills and follows a job to its end over the event stream, a hostile job name stays
text, and a screenshot is saved."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ops.local_cluster import LocalCluster, LocalGateway
from tests.cluster.cdp import BINARY, Browser
from tests.conftest import FAST_HOSTS, wait_until

pytestmark = [pytest.mark.cluster,
              pytest.mark.skipif(BINARY is None, reason="chromium is not installed (make's install step)")]
HOSTILE = '<img src=x onerror="window.__xss=1">'


@pytest.fixture
def served(make_scheduled) -> Iterator[tuple[LocalCluster, LocalGateway]]:  # type: ignore[no-untyped-def]
    cluster, workers = make_scheduled(FAST_HOSTS)
    workers.start("w1", 2)
    gateway = LocalGateway(cluster)
    try:
        gateway.start()
        yield cluster, gateway
    finally:
        gateway.kill()


def test_the_dashboard_signs_in_fills_and_follows_a_job_to_its_end(
        served: tuple[LocalCluster, LocalGateway], tmp_path: Path) -> None:
    cluster, gateway = served
    key = cluster.admin_token
    rest = httpx.Client(base_url=gateway.url, headers={"Authorization": f"Bearer {key}"}, timeout=30)
    hostile = rest.post("/xce/v1/jobs", json={"command": ["sleep", "60"], "name": HOSTILE, "cwd": "/tmp"})
    assert hostile.status_code == 201
    page = httpx.get(gateway.url + "/ui/")
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy
    signed = httpx.post(gateway.url + "/ui/session", json={"key": key})
    cookie = signed.headers["set-cookie"].lower()
    assert signed.status_code == 204 and "httponly" in cookie and "samesite=strict" in cookie
    assert httpx.post(gateway.url + "/ui/session", json={"key": "xce_wrong"}).status_code == 401
    jar = {"xce_key": key}
    assert httpx.get(gateway.url + "/xce/v1/whoami", cookies=jar).status_code == 200  # a read: yes
    write = httpx.post(gateway.url + "/xce/v1/jobs", cookies=jar, json={"command": ["true"]})
    assert write.status_code == 401  # a write never rides on the cookie (no cross-site request forgery)

    browser = Browser(tmp_path / "chromium")
    try:
        browser.go(gateway.url + "/ui/")
        wait_until(lambda: browser.evaluate("document.getElementById('signin')?.hidden === false"),
                   "the sign-in form")
        browser.evaluate(f"document.getElementById('key').value = {json.dumps(key)};"
                         "document.getElementById('signin-form').requestSubmit()")
        wait_until(lambda: browser.evaluate("document.getElementById('nav')?.hidden === false"), "signed in")
        assert key not in browser.evaluate("location.href")
        assert browser.evaluate("document.cookie") == ""  # HttpOnly: the page's script cannot read it
        browser.evaluate("location.hash = '#/jobs'")
        wait_until(lambda: browser.evaluate("document.querySelectorAll('#job-table tbody tr').length") >= 1,
                   "the job table")
        names = browser.evaluate(
            "[...document.querySelectorAll('#job-table td.name')].map(c => c.textContent)")
        assert HOSTILE in names
        assert browser.evaluate("document.querySelectorAll('#job-table img').length") == 0
        wait_until(lambda: browser.evaluate("document.getElementById('live').textContent") == "live",
                   "the event stream")
        short = rest.post("/xce/v1/jobs", json={"command": ["sleep", "1"], "name": "short", "cwd": "/tmp"})
        job = short.json()["jobs"][0]["id"]
        state = f"(document.querySelector('#job-table a[href=\"#/job/{job}\"]')?.closest('tr')" \
                "?.querySelector('td.state')?.textContent)"
        wait_until(lambda: browser.evaluate(state) in ("PEND", "RUN"), "the new job's row, from the stream")
        wait_until(lambda: browser.evaluate(state) == "DONE", "the job's end, from the stream", timeout_s=60)
        assert browser.evaluate("window.__xss === undefined")  # nothing the cluster sent ran
        browser.evaluate(f"location.hash = '#/job/{job}'")
        wait_until(lambda: browser.evaluate("document.getElementById('job-title').textContent")
                   == f"Job {job}: short", "the job's page")
        browser.evaluate("location.hash = '#/jobs'")
        wait_until(lambda: browser.evaluate(state) == "DONE", "the job table again")
        shot = tmp_path / "dashboard.png"
        browser.screenshot(shot)
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
        print(f"screenshot: {shot}")
    finally:
        browser.close()
        rest.close()
