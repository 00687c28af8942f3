"""`GET /xce/v1/events` against a real cluster with a scheduler and workers: a client following with
Last-Event-ID across a leader kill and a gateway restart is sent exactly the job, host and queue
changes of the committed events table after its id, once each, in order; what a key may see; a
filtered client's bookmarks, and its resumption from one.

The gateway's bookmark interval is 0.5 s here ($XCE_GATEWAY_BOOKMARK_S, unless set: run with 15, the
default, for the real minute)."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from client.channel import Client
from client.sync_follow import sync_messages
from gateway import sse
from ops.local_cluster import LocalCluster, LocalGateway
from tests.conftest import FAST_HOSTS, wait_until

pytestmark = pytest.mark.cluster  # real replicas and a gateway

V1 = "/xce/v1"
BOOKMARK_S = float(os.environ.get(sse.BOOKMARK_ENV) or 0.5)


class Follower:
    """An SSE client as a browser's EventSource is: it reconnects with the last id it was sent."""

    def __init__(self, gateway: LocalGateway, key: str, last_id: str = "",
                 params: dict[str, Any] | None = None) -> None:
        self.gateway, self.key, self.last_id, self.params = gateway, key, last_id, params or {}
        self.received: list[tuple[str, str, dict[str, Any]]] = []
        self.bookmarks: list[str] = []  # their ids, kept apart (they carry no change)
        self.connections = 0
        self.refused: list[int] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            headers = {"Authorization": f"Bearer {self.key}"}
            if self.last_id:
                headers["Last-Event-ID"] = self.last_id
            try:
                timeout = httpx.Timeout(5, read=60)
                with httpx.Client(base_url=self.gateway.url + V1, timeout=timeout) as http, \
                        http.stream("GET", "/events", headers=headers, params=self.params) as answer:
                    if answer.status_code != 200:
                        self.refused.append(answer.status_code)
                        self.stop.wait(0.2)
                        continue
                    self.connections += 1
                    self._read(answer.iter_lines())
            except httpx.HTTPError:
                pass
            self.stop.wait(0.1)

    def _read(self, lines: Iterator[str]) -> None:
        fields: dict[str, str] = {}
        for line in lines:
            if self.stop.is_set():
                return
            if not line:
                if fields.get("event") == "bookmark":
                    assert json.loads(fields["data"]) == {"revision": fields["id"]}
                    self.bookmarks.append(fields["id"])
                elif "event" in fields:
                    self.received.append((fields.get("id", ""), fields["event"], json.loads(fields["data"])))
                self.last_id = fields.get("id", self.last_id)  # as an EventSource: any id, a bookmark's too
                fields = {}
            elif not line.startswith(":"):
                name, _, value = line.partition(": ")
                fields[name] = value

    def types(self) -> list[str]:
        return [kind for _, kind, _ in self.received]

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=10)


@pytest.fixture
def setup(make_scheduled,  # type: ignore[no-untyped-def]
          monkeypatch) -> Iterator[tuple[LocalCluster, LocalGateway]]:
    monkeypatch.setenv(sse.BOOKMARK_ENV, str(BOOKMARK_S))  # the gateway's environment
    cluster, workers = make_scheduled(FAST_HOSTS)
    workers.start("w1", 2)
    workers.start("w2", 2)
    gateway = LocalGateway(cluster)
    try:
        gateway.start()
        yield cluster, gateway
    finally:
        gateway.kill()


def committed(cluster: LocalCluster, after: sse.Position, until: sse.Position) -> list[tuple[str, str, Any]]:
    """The messages the events table makes after `after` up to `until`, typed from revision 0."""
    client = Client(cluster.addresses, cluster.credentials)
    stop, last = threading.Event(), [0]
    classifier = sse.Classifier(complete=True)
    out = []
    try:
        for message in sync_messages(client, True, lambda: last[0], stop):
            if not message.HasField("event"):
                continue
            last[0] = message.event.revision
            for item in classifier.messages(message.event):
                if item.after(after) and not item.after(until):
                    out.append((item.id, item.type, json.loads(json.dumps(item.data))))
            if message.event.revision >= until.revision:
                return out
    finally:
        client.close()
    raise AssertionError("the history stream ended")


def test_a_follower_sees_every_change_once_across_a_leader_kill_and_a_gateway_restart(
        setup: tuple[LocalCluster, LocalGateway]) -> None:
    cluster, gateway = setup
    admin_key = cluster.admin_token
    admin = httpx.Client(base_url=gateway.url + V1, headers={"Authorization": f"Bearer {admin_key}"},
                         timeout=60)
    made: list[str] = []

    def submit(count: int, tag: str) -> None:
        for i in range(count):
            answer = admin.post("/jobs", json={"command": ["sleep", "0.2"], "name": f"{tag}{i}"})
            assert answer.status_code == 201, answer.text
            made.append(answer.json()["jobs"][0]["id"])

    start = admin.get("/jobs").json()["revision"]
    follower = Follower(gateway, admin_key, last_id=start)
    try:
        submit(6, "a")
        answer = admin.post("/jobs", json={"command": ["true"], "name": "arr[1-3]"})
        made.append(answer.json()["jobs"][0]["id"])
        wait_until(lambda: follower.types().count("job.created") >= 7, "the first jobs on the stream")
        cluster.kill(cluster.leader())
        submit(6, "b")  # through the gateway, to whichever replica leads now
        wait_until(lambda: follower.types().count("job.created") >= 13, "jobs after the leader kill")
        gateway.kill()
        submit_while_down = Client(cluster.addresses, cluster.credentials)
        for i in range(3):  # committed while no gateway runs: the follower must get them too
            made.append(str(submit_while_down.submit([_spec(f"c{i}")]).jobs[0].id))
        submit_while_down.close()
        gateway.start()
        submit(3, "d")
        finished = lambda: {d["job"]["id"] for _, kind, d in follower.received if kind == "job.finished"}  # noqa: E731
        wait_until(lambda: set(made) <= finished(), "every job finished on the stream", timeout_s=120)
    finally:
        follower.close()
        admin.close()
    got = follower.received
    assert "resync" not in follower.types() and follower.connections >= 2
    last = sse.parse_position(got[-1][0])
    expected = committed(cluster, sse.parse_position(start), last)
    assert [(i, t) for i, t, _ in got] == [(i, t) for i, t, _ in expected]  # once each, in order
    assert got == expected
    kinds = set(follower.types())
    assert {"job.created", "job.updated", "job.finished", "host.updated"} <= kinds


def _spec(name: str) -> Any:
    from xce.v1 import api_pb2 as api

    return api.JobSpec(command=["sleep", "0.2"], name=name)


def test_a_key_is_sent_only_what_it_may_read_and_a_filtered_stream_resumes_from_its_bookmark(
        setup: tuple[LocalCluster, LocalGateway]) -> None:
    """Alice follows bob's jobs only (held: they do not change again). While other jobs run, her stream
    is sent nothing of them, but a bookmark each BOOKMARK_S, at the cluster's revision. Reconnected
    with the last bookmark's id, she is sent bob's job submitted meanwhile, and nothing from before
    it (a resume from her old position would send bob's first jobs again)."""
    cluster, gateway = setup
    alice, bob = cluster.new_token("alice", "user"), cluster.new_token("bob", "user")
    as_alice, as_bob, as_admin = (httpx.Client(base_url=gateway.url + V1, timeout=60,
                                               headers={"Authorization": f"Bearer {key}"})
                                  for key in (alice, bob, cluster.admin_token))
    start = as_alice.get("/jobs").json()["revision"]
    mine = Follower(gateway, alice, last_id=start, params={"user": "bob"})
    made: dict[str, dict[str, Any]] = {}
    try:
        for who, name in ((as_alice, "a1"), (as_bob, "b1"), (as_bob, "b2")):
            answer = who.post("/jobs", json={"command": ["true"], "name": name, "hold": True})
            answer.raise_for_status()
            made[name] = answer.json()["jobs"][0]
        wait_until(lambda: mine.types().count("job.created") >= 2, "bob's jobs on alice's filtered stream")
        jobs = [d["job"] for _, kind, d in mine.received if kind.startswith("job.")]
        assert jobs and all(job["spec"]["user"] == "bob" for job in jobs)
        assert not any(kind.startswith(("host.", "queue.")) for kind in mine.types())  # a user filter
        matched = int(mine.received[-1][0].split(".")[0])
        elsewhere: list[int] = []

        def others_change() -> bool:  # a job that runs each probe; alice's stream is sent none of them
            as_admin.post("/jobs", json={"command": ["true"], "name": "elsewhere"}).raise_for_status()
            elsewhere.append(int(as_admin.get("/jobs").json()["revision"]))
            return sum(int(b) >= elsewhere[0] for b in mine.bookmarks) >= 3

        wait_until(others_change, "three bookmarks while other jobs change", timeout_s=60 + 6 * BOOKMARK_S,
                   every_s=BOOKMARK_S / 2)
    finally:
        mine.close()
    last = mine.last_id
    assert mine.bookmarks[-1] == last and int(last) > matched  # the resume point moved past its matches
    assert len(mine.received) == len(jobs)  # nothing of the other jobs, nothing of the hosts they ran on
    as_bob.post("/jobs", json={"command": ["true"], "name": "b3", "hold": True}).raise_for_status()
    again = Follower(gateway, alice, last_id=last, params={"user": "bob"})
    try:
        wait_until(lambda: "job.created" in again.types(), "bob's new job on the resumed stream")
    finally:
        again.close()
    assert {d["job"]["spec"]["name"] for _, kind, d in again.received if kind.startswith("job.")} == {"b3"}
    assert again.types() == ["job.created"] and sse.parse_position(again.received[0][0]).revision > int(last)
    by_readable = Follower(gateway, alice, last_id=start, params={"job": made["b1"]["readable_id"]})
    try:
        wait_until(lambda: by_readable.received, "b1 followed by its readable id")
    finally:
        by_readable.close()
    assert [(kind, d["job"]["id"]) for _, kind, d in by_readable.received] == [("job.created",
                                                                                made["b1"]["id"])]
    for client in (as_alice, as_bob, as_admin):
        client.close()
    for headers, params, status in (({}, {}, 401), ({"Authorization": "Bearer xce_nobody"}, {}, 401),
                                    ({"Authorization": f"Bearer {alice}", "Last-Event-ID": "x.1"}, {}, 400),
                                    ({"Authorization": f"Bearer {alice}"}, {"job": ["1", "b1-2-x"]}, 400)):
        answer = httpx.get(gateway.url + V1 + "/events", headers=headers, params=params, timeout=30)
        assert answer.status_code == status and answer.headers["content-type"] == "application/problem+json"
        assert status != 400 or ("x.1" if "Last-Event-ID" in headers else "b1-2-x") in answer.json()["detail"]
