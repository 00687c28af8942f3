"""The dashboard's overview on a big cluster: how long it takes to show and what it transfers.

A local three-replica cluster with no workers (every job stays pending) and one `xce gateway`;
`--jobs` individual jobs (100,000 by default) submitted through POST /xce/v1/jobs {"jobs": [...]}
in batches; then headless Chromium signs in and loads the overview cold (cache off), and the
DevTools Network domain says what went over the wire. The target: under 1 s and under 200 KB.
Reports, never asserts.

`.venv/bin/python bench/dashboard_overview.py [--jobs 100000] [--batch 5000]`
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ops.local_cluster import LocalCluster, LocalGateway  # noqa: E402
from tests.cluster.cdp import Browser  # noqa: E402

LIMITS = "\n[auth]\nmax_pend_jobs_per_user = 0\nsubmit_rate_per_user = 0\n"
SHOWN = ("document.querySelectorAll('#overview .uplot').length === 3 && "
         "document.querySelectorAll('#queue-states tbody tr').length > 0")


def wait(probe: Any, what: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not probe():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.01)


def transferred(events: list[dict[str, Any]]) -> tuple[int, dict[str, int]]:
    urls: dict[str, str] = {}
    sizes: dict[str, int] = {}
    for event in events:
        params = event.get("params", {})
        if event["method"] == "Network.requestWillBeSent":
            urls[params["requestId"]] = params["request"]["url"]
        elif event["method"] == "Network.loadingFinished":
            sizes[params["requestId"]] = int(params["encodedDataLength"])
        elif event["method"] == "Network.dataReceived" and params["requestId"] not in sizes:
            sizes[params["requestId"]] = sizes.get(params["requestId"], 0) + int(params["encodedDataLength"])
    by_url = {urls.get(r, r).split("/", 3)[-1]: n for r, n in sizes.items()}
    return sum(sizes.values()), by_url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=5000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="xce-dash-bench-") as scratch:
        cluster = LocalCluster(Path(scratch) / "cluster", extra_config=LIMITS)
        gateway = LocalGateway(cluster)
        browser: Browser | None = None
        try:
            cluster.start()
            gateway.start()
            key = cluster.admin_token
            rest = httpx.Client(base_url=gateway.url, headers={"Authorization": f"Bearer {key}"}, timeout=300)
            began = time.monotonic()
            for first in range(0, args.jobs, args.batch):
                count = min(args.batch, args.jobs - first)
                specs = [{"command": ["sleep", "1"], "name": f"j{first + n}", "cwd": "/tmp"}
                         for n in range(count)]
                answer = rest.post("/xce/v1/jobs", json={"jobs": specs})
                answer.raise_for_status()
            submitted_s = time.monotonic() - began
            wait(lambda: rest.get("/xce/v1/stats").json()["jobs"]["total"] >= args.jobs, "the counts")
            timed = time.monotonic()
            stats = rest.get("/xce/v1/stats")
            stats_ms = (time.monotonic() - timed) * 1000
            browser = Browser(Path(scratch) / "chromium")
            browser.send("Network.enable")
            browser.send("Network.setCacheDisabled", cacheDisabled=True)
            browser.go(gateway.url + "/ui/")
            wait(lambda: browser.evaluate("document.getElementById('signin')?.hidden === false"), "sign-in")
            browser.evaluate(f"document.getElementById('key').value = {json.dumps(key)};"
                             "document.getElementById('signin-form').requestSubmit()")
            wait(lambda: browser.evaluate(SHOWN), "the overview after sign-in")
            results = []
            for _ in range(3):  # cold loads of the overview, signed in (the cookie)
                browser.evaluate("window.__before = 1")
                browser.events.clear()
                started = time.monotonic()
                browser.send("Page.reload", ignoreCache=True)
                wait(lambda: browser.evaluate(f"window.__before === undefined && {SHOWN}"), "the overview")
                elapsed_ms = (time.monotonic() - started) * 1000
                total, by_url = transferred(browser.events)
                results.append((elapsed_ms, total, by_url))
            print(json.dumps({
                "jobs": args.jobs, "submit_s": round(submitted_s, 1),
                "stats_bytes": len(stats.content), "stats_ms": round(stats_ms, 1),
                "overview_ms": [round(r[0]) for r in results], "overview_bytes": [r[1] for r in results],
                "by_url": results[-1][2],
            }, indent=1))
        finally:
            if browser is not None:
                browser.close()
            gateway.kill()
            cluster.stop()


if __name__ == "__main__":
    main()
