"""Prometheus metrics: each daemon's `/metrics` on an address of its own.

Every daemon keeps its own registry (several run in one test process, and the gateway's must not
mix with a replica's); `serve` starts prometheus_client's HTTP server on it, in a thread. A driver.
Names start with `xce_`; docs/GATEWAY.md lists them.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, start_http_server

# Commit latencies and pass times are short; buckets from a millisecond to ten seconds.
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def split(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"a metrics address is HOST:PORT, not {listen!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def serve(listen: str, registry: CollectorRegistry) -> Any:
    """Serve `registry` at http://listen/metrics until the process ends; the server (to close)."""
    host, port = split(listen)
    server, _ = start_http_server(port, addr=host, registry=registry)
    return server
