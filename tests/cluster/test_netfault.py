"""soak/netfault.py and Net's impair/one_way as root, with iptables and NFQUEUE: a peer in namespace 1
of a Net(2) (a TCP echo server and a UDP probe) measured from this namespace, through the bridge,
while namespace 1 is impaired; one-way partitions, the queue bypass and the clean-up."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytestmark = pytest.mark.cluster

ECHO_PORT, UDP_PORT = 7777, 7778
PEER = f"""
import socket, sys, threading
def serve(conn):
    with conn:
        while data := conn.recv(65536):
            conn.sendall(data)
def accept():
    server = socket.create_server(("0.0.0.0", {ECHO_PORT}), backlog=64)
    while True:
        threading.Thread(target=serve, args=(server.accept()[0],), daemon=True).start()
def listen(udp):
    while True:
        print("got", udp.recv(100).decode(), flush=True)
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
udp.bind(("0.0.0.0", {UDP_PORT}))
threading.Thread(target=accept, daemon=True).start()
threading.Thread(target=listen, args=(udp,), daemon=True).start()
print("ready", flush=True)
for line in sys.stdin:
    host, port, message = line.split()
    try:
        udp.sendto(message.encode(), (host, int(port)))
    except OSError as exc:
        print("refused", exc.errno, flush=True)
"""


def _skip_without_faults() -> None:
    from soak.netns import fault_available

    why = fault_available()
    if why is not None:
        pytest.skip(why)


class Peer:
    """The peer process in namespace 1, and this side's UDP socket."""

    def __init__(self, net: Any) -> None:
        self.net = net
        self.address = net.addresses[1]
        self.proc = subprocess.Popen([*net.prefix(1), sys.executable, "-c", PEER], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == "ready"
        threading.Thread(target=self._read, daemon=True).start()
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind((net.gateway, 0))

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.strip())

    def round_trips(self, count: int) -> list[float]:
        with socket.create_connection((self.address, ECHO_PORT), timeout=10) as conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            times = []
            for _ in range(count):
                start = time.monotonic()
                conn.sendall(b"x")
                assert conn.recv(10) == b"x"
                times.append(time.monotonic() - start)
        return times

    def echo(self, size: int, connected: Callable[[], object] = lambda: None) -> float:
        """Send `size` bytes and read them back: the seconds it took from `connected()` (called once
        connected: a lost SYN would add a whole second), the bytes must be the same."""
        data = random.Random(size).randbytes(size)
        back = bytearray()
        with socket.create_connection((self.address, ECHO_PORT), timeout=30) as conn:
            connected()
            start = time.monotonic()
            reader = threading.Thread(target=lambda: self._read_back(conn, back, size))
            reader.start()
            conn.sendall(data)
            reader.join()
        assert bytes(back) == data
        return time.monotonic() - start

    @staticmethod
    def _read_back(conn: socket.socket, back: bytearray, size: int) -> None:
        while len(back) < size and (chunk := conn.recv(65536)):
            back.extend(chunk)

    def send_to_peer(self, message: str) -> None:
        self.udp.sendto(message.encode(), (self.address, UDP_PORT))

    def peer_sends(self, message: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{self.net.gateway} {self.udp.getsockname()[1]} {message}\n")
        self.proc.stdin.flush()

    def received_here(self, message: str, timeout_s: float) -> bool:
        self.udp.settimeout(timeout_s)
        try:
            while True:
                if self.udp.recv(100).decode() == message:
                    return True
        except TimeoutError:
            return False

    def close(self) -> None:
        self.proc.kill()
        self.proc.communicate()
        self.udp.close()


@pytest.fixture(scope="module")
def peer() -> Iterator[Peer]:
    _skip_without_faults()
    from soak.netns import Net

    net = Net(2)
    try:
        peer = Peer(net)
        try:
            yield peer
        finally:
            peer.close()
    finally:
        net.close()


@pytest.fixture
def ns1(peer: Peer) -> Iterator[Peer]:
    """The peer, its namespace unimpaired again after the test."""
    peer.lines.clear()
    try:
        yield peer
    finally:
        if peer.net.mangler_pid(1) is not None:
            peer.net.clear(1)
        peer.net.heal_one_way(1)


def wait_until(probe: Any, what: str, timeout_s: float = 5.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (found := probe()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)
    return found


def fresh_stats(net: Any, since: float) -> dict[str, Any]:
    """The mangler's counters as written after `since` (time.time()): within a second."""
    return wait_until(lambda: (s := net.fault_stats(1)) and s["time"] > since and s, "fresh stats")  # type: ignore[no-any-return]


def test_delay_with_jitter_holds_every_round_trip_and_a_change_takes_without_a_restart(ns1: Peer) -> None:
    ns1.net.impair(1, delay_ms=100, jitter_ms=20, direction="both")
    pid = ns1.net.mangler_pid(1)
    trips = ns1.round_trips(4)
    # the request waits 80-120 ms going in, the answer as long going out
    assert min(trips) >= 0.15 and sorted(trips)[1] >= 0.18 and max(trips) < 2.0, trips
    ns1.net.impair(1, delay_ms=10, direction="both")
    assert ns1.net.mangler_pid(1) == pid
    trips = ns1.round_trips(5)
    assert min(trips) >= 0.015 and max(trips) < 0.15, trips
    ns1.net.clear(1)
    assert max(ns1.round_trips(5)) < 0.05
    assert ns1.net.mangler_pid(1) == pid


def test_under_30_percent_loss_tcp_delivers_everything_slower_and_30_percent_were_dropped(ns1: Peer) -> None:
    ns1.net.impair(1)
    clear_s = ns1.echo(60_000)
    before: dict[str, Any] = {}

    def lossy() -> None:
        ns1.net.impair(1, loss=0.3, direction="both")
        before.update(ns1.net.fault_stats(1))  # as the new settings took

    lossy_s = ns1.echo(60_000, connected=lossy)
    after = fresh_stats(ns1.net, time.time())
    seen, dropped = after["seen"] - before["seen"], after["dropped"] - before["dropped"]
    assert seen >= 100 and 0.2 <= dropped / seen <= 0.4, (seen, dropped)
    assert lossy_s > clear_s, (clear_s, lossy_s)


def test_duplicates_and_reordered_packets_are_counted_and_the_stream_stays_whole(ns1: Peer) -> None:
    ns1.net.impair(1, delay_ms=10, jitter_ms=8, duplicate=0.2, reorder=0.3, distribution="normal",
                   direction="both")
    before = ns1.net.fault_stats(1)  # as the new settings took
    ns1.echo(100_000)
    after = fresh_stats(ns1.net, time.time())
    assert after["duplicated"] > before["duplicated"] and after["reordered"] > before["reordered"]
    assert after["delayed"] > before["delayed"] and after["duplicate_errors"] == 0


def test_one_way_out_lets_namespace_1_hear_but_not_be_heard(ns1: Peer) -> None:
    ns1.net.one_way(1, "out")
    ns1.send_to_peer("a-to-b")
    wait_until(lambda: "got a-to-b" in ns1.lines, "the probe into namespace 1")
    ns1.peer_sends("b-to-a")
    wait_until(lambda: any(line.startswith("refused") for line in ns1.lines), "the probe out refused")
    assert ns1.net.one_way_dropped(1) >= 1 and not ns1.received_here("b-to-a", timeout_s=0.05)
    with pytest.raises(OSError):  # no new connection either way: the handshake needs both
        socket.create_connection((ns1.address, ECHO_PORT), timeout=0.5).close()
    ns1.net.heal_one_way(1)
    ns1.peer_sends("b-to-a-healed")
    assert ns1.received_here("b-to-a-healed", timeout_s=5)


def test_one_way_in_lets_namespace_1_be_heard_but_not_hear(ns1: Peer) -> None:
    ns1.net.one_way(1, "in")
    ns1.peer_sends("b-to-a")
    assert ns1.received_here("b-to-a", timeout_s=5)
    ns1.send_to_peer("in-a-to-b")
    wait_until(lambda: ns1.net.one_way_dropped(1) >= 1, "the probe in dropped")
    assert "got in-a-to-b" not in ns1.lines  # dropped before any socket could have it
    ns1.net.heal_one_way(1)
    ns1.send_to_peer("in-a-to-b-healed")
    wait_until(lambda: "got in-a-to-b-healed" in ns1.lines, "the probe into namespace 1, healed")
    assert "got in-a-to-b" not in ns1.lines


def test_traffic_flows_past_a_killed_mangler_and_impair_starts_another(ns1: Peer) -> None:
    ns1.net.impair(1, delay_ms=100, direction="both")
    pid = ns1.net.mangler_pid(1)
    assert pid is not None and min(ns1.round_trips(2)) >= 0.18
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: ns1.net.mangler_pid(1) is None, "the mangler's end")
    assert max(ns1.round_trips(5)) < 0.05  # --queue-bypass: no listener, no queueing
    ns1.net.impair(1, delay_ms=100, direction="both")
    assert ns1.net.mangler_pid(1) not in (None, pid)
    assert min(ns1.round_trips(2)) >= 0.18


def test_close_leaves_no_mangler_namespace_or_rule() -> None:
    _skip_without_faults()
    from soak.netns import Net

    net = Net(1, tag=f"c{os.getpid() % 100000}")
    try:
        net.impair(0, loss=0.1)
        net.one_way(0, "in")
        pid, namespace = net.mangler_pid(0), net.namespaces[0]
        assert pid is not None
    finally:
        net.close()
    assert not os.path.exists(f"/proc/{pid}")
    assert namespace not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
