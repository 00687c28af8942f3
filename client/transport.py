"""What the client library asks of a transport (client/channel.py's `Client` takes one): grpc's
(client/grpc_transport.py) or the command line's own HTTP/2 (client/http2.py). Types only: the
command line does not import this module (nor typing) at run time."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol


class Transport(Protocol):
    """How calls reach a replica: grpc (client/grpc_transport.py) or the CLI's own HTTP/2 (client/http2.py).
    Failures are RpcFailure, with gRPC's code names and the trailing metadata."""

    def unary(self, address: str, path: str, request: bytes, metadata: Sequence[tuple[str, str]],
              timeout_s: float) -> bytes: ...

    def stream(self, address: str, path: str, request: bytes, metadata: Sequence[tuple[str, str]],
               timeout_s: float) -> Iterator[bytes]: ...

    def open_stream(self, address: str, path: str, request: bytes, metadata: Sequence[tuple[str, str]],
                    timeout_s: float) -> StreamCall:
        """`stream`, as a handle another thread can cancel (a follower's silence watchdog, its stop)."""
        ...

    def close(self) -> None: ...


class StreamCall(Protocol):
    """One server stream: its messages as they come (RpcFailure when it fails), and a way to end it
    from another thread, after which reading raises RpcFailure("CANCELLED")."""

    def __iter__(self) -> Iterator[bytes]: ...

    def cancel(self) -> None: ...
