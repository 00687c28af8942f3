"""`xce gateway`: serve the REST API on an address until SIGTERM or Ctrl-C."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from client.credentials import Credentials
from gateway.http_limits import HttpLimits


def split_listen(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--listen wants HOST:PORT, not {listen!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def run(addresses: Sequence[str], credentials: Credentials, listen: str,
        limits: HttpLimits | None = None, max_event_streams: int = 16, clusters_file: str = "",
        max_wait_s: float = 300.0) -> int:
    from gateway.app import make_app
    from gateway.backend import Backend
    from gateway.clusters import registry
    from gateway.http_guard import serve
    from xce import daemon_logging

    try:
        host, port = split_listen(listen)
        (limits or HttpLimits()).check()
        if max_event_streams < 1:
            raise ValueError("--max-event-streams must be at least 1")
        if not 0 < max_wait_s <= 3600:
            raise ValueError("--max-wait is between 0 and 3600 seconds")
        others = registry.load(clusters_file) if clusters_file else {}
    except ValueError as exc:
        print(f"xce gateway: {exc}", file=sys.stderr)
        return 2
    daemon_logging.setup("gateway")
    backend = Backend(addresses, credentials, metrics_address=listen)  # /metrics is on the API's address
    try:
        # One process, one event loop; the gRPC calls run in its thread pool. Run more gateways
        # (they share nothing) for more throughput. log_config=None: uvicorn's loggers go through
        # the daemon's handler (and its RepeatFilter), not handlers of their own.
        serve(make_app(backend, max_event_streams, others, max_wait_s), host, port, limits or HttpLimits(),
              log_level="warning", access_log=False, server_header=False, timeout_graceful_shutdown=5,
              log_config=None)
    finally:
        backend.close()
    return 0
