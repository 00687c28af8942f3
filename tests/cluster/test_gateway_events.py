"""`GET /xce/v1/events` against a real cluster with a scheduler and workers: a client following with
Last-Event-ID across a leader kill and a gateway restart is sent exactly the job, host and queue
changes of the committed events table after its id, once each, in order; what a key may see."""

from __future__ import annotations

import json
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


class Follower:
    """An SSE client as a browser's EventSource is: it reconnects with the last id it was sent."""

    def __init__(self, gateway: LocalGateway, key: str, last_id: str = "",
                 params: dict[str, Any] | None = None) -> None:
        self.gateway, self.key, self.last_id, self.params = gateway, key, last_id, params or {}
        self.received: list[tuple[str, str, dict[str, Any]]] = []
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
                if "event" in fields:
                    self.received.append((fields.get("id", ""), fields["event"], json.loads(fields["data"])))
                    self.last_id = fields.get("id", self.last_id)
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
def setup(make_scheduled) -> Iterator[tuple[LocalCluster, LocalGateway]]:  # type: ignore[no-untyped-def]
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


def test_a_key_is_sent_only_what_it_may_read(setup: tuple[LocalCluster, LocalGateway]) -> None:
    cluster, gateway = setup
    alice, bob = cluster.new_token("alice", "user"), cluster.new_token("bob", "user")
    start = httpx.get(gateway.url + V1 + "/jobs",
                      headers={"Authorization": f"Bearer {alice}"}).json()["revision"]
    mine = Follower(gateway, alice, last_id=start, params={"user": "bob"})
    try:
        for key, name in ((alice, "a1"), (bob, "b1"), (bob, "b2")):
            httpx.post(gateway.url + V1 + "/jobs", json={"command": ["true"], "name": name},
                       headers={"Authorization": f"Bearer {key}"}).raise_for_status()
        wait_until(lambda: mine.types().count("job.created") >= 2, "bob's jobs on alice's filtered stream")
        jobs = [d["job"] for _, kind, d in mine.received if kind.startswith("job.")]
        assert jobs and all(job["spec"]["user"] == "bob" for job in jobs)
        assert not any(kind.startswith(("host.", "queue.")) for kind in mine.types())  # a user filter
    finally:
        mine.close()
    for headers, status in (({}, 401), ({"Authorization": "Bearer xce_nobody"}, 401),
                            ({"Authorization": f"Bearer {alice}", "Last-Event-ID": "x.1"}, 400)):
        answer = httpx.get(gateway.url + V1 + "/events", headers=headers, timeout=30)
        assert answer.status_code == status and answer.headers["content-type"] == "application/problem+json"
