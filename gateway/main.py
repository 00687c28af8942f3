"""`xce gateway`: serve the REST API on an address until SIGTERM or Ctrl-C."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from xce.credentials import Credentials


def split_listen(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--listen wants HOST:PORT, not {listen!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def run(addresses: Sequence[str], credentials: Credentials, listen: str) -> int:
    import uvicorn

    from gateway.app import make_app
    from gateway.backend import Backend

    try:
        host, port = split_listen(listen)
    except ValueError as exc:
        print(f"xce gateway: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s gateway %(levelname)s %(message)s")
    backend = Backend(addresses, credentials)
    try:
        # One process, one event loop; the gRPC calls run in its thread pool. Run more gateways
        # (they share nothing) for more throughput.
        uvicorn.run(make_app(backend), host=host, port=port, log_level="warning", access_log=False,
                    server_header=False, timeout_graceful_shutdown=5)
    finally:
        backend.close()
    return 0
