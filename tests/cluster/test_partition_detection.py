"""A replica cut off by a partition drops packets instead of refusing them: the clients' transport
must notice by itself (client/channel.py channel_options), or a call waits for its whole timeout and a
Sync stream for the scheduler's silence watchdog, which put a partition's first new dispatch 4 s
after the cut. Here the network is a proxy that stops passing bytes without closing anything."""

from __future__ import annotations

import select
import socket
import threading
from collections.abc import Iterator

import grpc
import pytest

from client.grpc_transport import channel_options
from ops.local_cluster import LocalCluster
from xce.v1 import log_pb2 as log

pytestmark = pytest.mark.cluster


class FreezingProxy:
    """Passes TCP bytes to `target` until frozen; then holds every connection open, silent."""

    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self._target = (host, int(port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self.frozen = threading.Event()
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = [self._listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                inbound, _ = self._listener.accept()
            except OSError:
                return
            outbound = socket.create_connection(self._target)
            self._sockets += [inbound, outbound]
            threading.Thread(target=self._pump, args=(inbound, outbound), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        peer = {a: b, b: a}
        while not self._closed.is_set():
            if self.frozen.is_set():
                self._closed.wait(0.05)
                continue
            try:
                readable, _, _ = select.select([a, b], [], [], 0.05)
                for sock in readable:
                    data = sock.recv(65536)
                    if not data:
                        return
                    peer[sock].sendall(data)
            except OSError:
                return

    def close(self) -> None:
        self._closed.set()
        for sock in self._sockets:
            sock.close()


@pytest.fixture
def proxy(cluster: LocalCluster) -> Iterator[FreezingProxy]:
    p = FreezingProxy(cluster.addresses[cluster.leader() - 1])
    try:
        yield p
    finally:
        p.close()


def test_a_sync_stream_through_a_silent_network_fails_unavailable(cluster: LocalCluster,
                                                                  proxy: FreezingProxy) -> None:
    with cluster.credentials.channel(proxy.address, channel_options()) as channel:
        sync = channel.unary_stream("/xce.v1.SyncService/Sync",
                                    request_serializer=log.SyncRequest.SerializeToString,
                                    response_deserializer=log.SyncMessage.FromString)
        call = sync(log.SyncRequest(cluster_id=cluster.config.cluster_id), timeout=60,
                    metadata=cluster.credentials.metadata())
        messages = iter(call)
        next(messages)  # the stream is open and speaking
        proxy.frozen.set()
        with pytest.raises(grpc.RpcError) as failed:
            for _ in messages:
                pass
    # Keepalive ended it (UNAVAILABLE), long before the call's own deadline would have.
    assert failed.value.code() == grpc.StatusCode.UNAVAILABLE, failed.value


def test_a_call_to_an_address_that_never_answers_fails_unavailable() -> None:
    silent = socket.create_server(("127.0.0.1", 0))  # the kernel accepts; nobody ever speaks
    try:
        with grpc.insecure_channel(f"127.0.0.1:{silent.getsockname()[1]}", channel_options()) as channel:
            status = channel.unary_unary("/xce.v1.AdminService/Status")
            with pytest.raises(grpc.RpcError) as failed:
                status(b"", timeout=60)
    finally:
        silent.close()
    # The connect timeout gave up on it, not the call's deadline.
    assert failed.value.code() == grpc.StatusCode.UNAVAILABLE, failed.value
