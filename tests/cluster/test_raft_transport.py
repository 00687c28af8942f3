"""The Raft port: bound to the configured address only, and a huge frame is refused before it is buffered."""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path

import pytest

from client.channel import Client
from ops.local_cluster import LocalCluster

pytestmark = pytest.mark.cluster


def _listening(port: int) -> set[str]:
    """The local addresses listening on `port` (IPv4), from /proc/net/tcp."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        address, hex_port = fields[1].split(":")
        if int(hex_port, 16) == port and fields[3] == "0A":  # LISTEN
            found.add(socket.inet_ntoa(struct.pack("<I", int(address, 16))))
    return found


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _term(cluster: LocalCluster, replica_id: int) -> tuple[str, int]:
    with Client([cluster.address(replica_id)], cluster.credentials, deadline_s=2) as client:
        status = client.status(local_only=True).replicas[0]
    return status.role, status.term


def test_raft_listens_on_the_configured_address_only(cluster: LocalCluster) -> None:
    for replica in cluster.config.replicas:
        port = int(replica.raft.rsplit(":", 1)[1])
        assert _listening(port) == {"127.0.0.1"}  # not 0.0.0.0


@pytest.mark.parametrize("length", [0x7FFFFFF0, 8 << 20], ids=["2-GiB", "8-MiB"])
def test_a_big_frame_from_an_unproven_peer_is_dropped_before_it_is_buffered(cluster: LocalCluster,
                                                                            length: int) -> None:
    """2 GiB is over any limit; 8 MiB is a size a peer that proved the password may send, but nobody
    else (pysyncobj buffers quadratically: 8 MiB cost the leader seconds of CPU and an election)."""
    leader = cluster.leader()
    pid = cluster.procs[leader].pid
    before_rss, before = _rss_kb(pid), _term(cluster, leader)
    host, port = cluster.config.replica(leader).raft.rsplit(":", 1)
    junk = b"\0" * (1 << 20)
    sent = 0
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        try:
            sock.sendall(struct.pack("i", length))
            while sent < 64 << 20:  # bounded: at most 64 MiB, where the old code buffered every byte
                sock.sendall(junk)
                sent += len(junk)
                time.sleep(0.01)
        except OSError:
            pass  # the replica hung up on us: what it should do
    assert sent < min(length, 64 << 20), "the replica kept reading the frame"
    assert _rss_kb(pid) - before_rss < 16 << 10  # KiB: nothing like the frame was buffered
    assert _term(cluster, leader) == before  # still the leader of the same term: no election


def test_a_replayed_first_frame_does_not_lift_the_limit(cluster: LocalCluster) -> None:
    """A frame that decrypts but carries no nonce of this connection (one captured off the wire, here
    made with the password) proves nothing: a big frame after it is still dropped unbuffered."""
    import pickle
    import zlib

    from pysyncobj.encryptor import getEncryptor

    leader = cluster.leader()
    pid = cluster.procs[leader].pid
    before_rss, before = _rss_kb(pid), _term(cluster, leader)
    encrypted = getEncryptor(cluster.config.password).encrypt_at_time(
        zlib.compress(pickle.dumps(b"k" * 32), 3), int(time.monotonic()))
    host, port = cluster.config.replica(leader).raft.rsplit(":", 1)
    junk = b"\0" * (1 << 20)
    sent = 0
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        try:
            sock.sendall(struct.pack("i", len(encrypted)) + encrypted)  # decrypts: a peer's first frame
            sock.recv(4096)  # the replica's answer (its own key): the frame was taken
            sock.sendall(struct.pack("i", 8 << 20))
            while sent < 16 << 20:
                sock.sendall(junk)
                sent += len(junk)
                time.sleep(0.01)
        except OSError:
            pass
    assert sent < 8 << 20, "the replica read an 8 MiB frame from a peer that proved nothing"
    assert _rss_kb(pid) - before_rss < 16 << 10
    assert _term(cluster, leader) == before
