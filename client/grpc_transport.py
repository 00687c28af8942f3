"""client.channel's transport over the grpc package (daemons, tests, benchmarks), and the channel options
every grpc client of XCE uses. The command line uses client/http2.py instead, which imports no grpc."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import grpc

from client.credentials import Credentials
from client.http2 import RpcFailure

LEADER_METADATA = "x-xce-leader"

# A replica cut off by a partition drops packets instead of refusing them. Without
# these a call to it waits for its whole timeout and a stream for its silence
# watchdog; with them the transport itself notices: a connection silent for
# KEEPALIVE_MS is pinged, and one whose ping is not answered within KEEPALIVE_MS
# more is closed (UNAVAILABLE); a connection attempt (TCP, TLS, HTTP/2 settings)
# not done within CONNECT_TIMEOUT_MS fails. Pings are answered by gRPC's own
# threads, so a leader busy in Python is not taken for a dead one. The server
# allows pings this often (controller/grpc_api.py server_options).
KEEPALIVE_MS = 500
CONNECT_TIMEOUT_MS = 500


def channel_options(keepalive_ms: int = KEEPALIVE_MS) -> list[tuple[str, Any]]:
    """`keepalive_ms`: the workers, thousands of them, ping less often; their heartbeats notice a
    silent leader (worker/daemon.py)."""
    return [
        ("grpc.max_send_message_length", 1 << 20),
        ("grpc.max_receive_message_length", 16 << 20),
        ("grpc.keepalive_time_ms", keepalive_ms),
        ("grpc.http2.ping_timeout_ms", keepalive_ms),  # a ping's answer (default 1 min)
        # Also the kernel's TCP_USER_TIMEOUT (bytes sent, not acknowledged): lenient, for lossy links.
        ("grpc.keepalive_timeout_ms", 4 * keepalive_ms),
        ("grpc.http2.max_pings_without_data", 0),  # a stream only read from must ping too
        ("grpc.enable_retries", 0),
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 1000),
        ("grpc.min_reconnect_backoff_ms", CONNECT_TIMEOUT_MS),  # gRPC's name for the connect timeout
    ]


def leader_hint(exc: grpc.RpcError) -> str | None:
    """The leader's address a follower named in its refusal, if any; from a call of grpc's or of
    grpc.aio's (whose errors are no `grpc.Call`: a test of `grpc.Call` alone left asyncio callers
    without the hint, going round the replicas in their backoff instead)."""
    call = isinstance(exc, grpc.Call | grpc.aio.AioRpcError)
    trailing = exc.trailing_metadata() if call else None
    for key, value in trailing or ():
        if key == LEADER_METADATA and value:
            return str(value)
    return None


def _identity(data: bytes) -> bytes:
    return data


class GrpcTransport:
    """Channels per replica, made again when the TLS files change (client/credentials.py)."""

    def __init__(self, credentials: Credentials) -> None:
        self.credentials = credentials
        self._channels: dict[str, grpc.Channel] = {}
        self._stubs: dict[tuple[str, str, bool], Any] = {}
        self._tls_stamp = credentials.stamp()

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()
        self._stubs.clear()

    def unary(self, address: str, path: str, request: bytes, metadata: Sequence[tuple[str, str]],
              timeout_s: float) -> bytes:
        try:
            response: bytes = self._stub(address, path, False)(request, timeout=timeout_s, metadata=metadata)
            return response
        except grpc.RpcError as exc:
            raise _failure(exc) from None

    def stream(self, address: str, path: str, request: bytes, metadata: Sequence[tuple[str, str]],
               timeout_s: float) -> Iterator[bytes]:
        try:
            yield from self._stub(address, path, True)(request, metadata=metadata)
        except grpc.RpcError as exc:
            raise _failure(exc) from None

    def open_stream(self, address: str, path: str, request: bytes, metadata: Sequence[tuple[str, str]],
                    timeout_s: float) -> GrpcStream:
        return GrpcStream(self._stub(address, path, True)(request, metadata=metadata, timeout=timeout_s))

    def _stub(self, address: str, path: str, streaming: bool) -> Any:
        stamp = self.credentials.stamp()
        if stamp != self._tls_stamp:  # rotated: connect again, presenting and trusting the new files
            self._tls_stamp = stamp
            self.close()
        stub = self._stubs.get((address, path, streaming))
        if stub is None:
            channel = self._channels.get(address)
            if channel is None:
                channel = self._channels[address] = self.credentials.channel(address, channel_options())
            make = channel.unary_stream if streaming else channel.unary_unary
            stub = make(path, request_serializer=_identity, response_deserializer=_identity)
            self._stubs[(address, path, streaming)] = stub
        return stub


class GrpcStream:
    """A grpc server stream read as bytes, with RpcFailure for its failures; cancellable from any
    thread. `channel`: the stream's own, closed when it ends (StreamChannels)."""

    def __init__(self, call: Any, channel: grpc.Channel | None = None) -> None:
        self._call = call
        self._channel = channel

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from self._call
        except grpc.RpcError as exc:
            raise _failure(exc) from None
        finally:
            self.cancel()

    def cancel(self) -> None:
        self._call.cancel()  # a no-op once the call has ended
        channel, self._channel = self._channel, None
        if channel is not None:
            channel.close()


class StreamChannels:
    """Server streams each on a channel of its own, made for it and closed with it: the scheduler's
    Sync stream. A stream lives for hours; a new one follows a failover, and a fresh channel
    connects at once where a cached one to a replica that was down may still be waiting out
    gRPC's reconnect backoff (up to max_reconnect_backoff_ms)."""

    def __init__(self, credentials: Credentials) -> None:
        self.credentials = credentials

    def open_stream(self, address: str, path: str, request: bytes, metadata: Sequence[tuple[str, str]],
                    timeout_s: float) -> GrpcStream:
        channel = self.credentials.channel(address, channel_options())
        stub = channel.unary_stream(path, request_serializer=_identity, response_deserializer=_identity)
        return GrpcStream(stub(request, metadata=metadata, timeout=timeout_s), channel)


def _failure(exc: grpc.RpcError) -> RpcFailure:
    code = exc.code() if isinstance(exc, grpc.Call) else grpc.StatusCode.UNKNOWN
    details = (exc.details() if isinstance(exc, grpc.Call) else str(exc)) or ""
    trailing = exc.trailing_metadata() if isinstance(exc, grpc.Call) else None
    return RpcFailure(code.name, details, [(k, str(v)) for k, v in trailing or ()])
