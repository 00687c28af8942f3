"""Prometheus metrics: each daemon's `/metrics` on an address of its own.

Every daemon keeps its own registry (several run in one test process, and the gateway's must not
mix with a replica's); `serve` starts prometheus_client's HTTP server on it, in a thread. Each
registry also carries what every daemon shows alike: the process's CPU, memory and file descriptors,
the Python it runs on, and `xce_build_info`. A driver. Names start with `xce_`; docs/GATEWAY.md lists
them.
"""

from __future__ import annotations

import ipaddress
import platform
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    start_http_server,
)

# Commit latencies and pass times are short; buckets from a millisecond to ten seconds.
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

# The metrics ports of a deployment's daemons are set by their units (deploy/systemd: --metrics):
# replica 7301, scheduler 7401, worker 7501, the gateway on its API's address.


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


def daemon_registry(daemon: str) -> CollectorRegistry:
    """A new registry with the process and platform collectors and `xce_build_info{daemon=...}` = 1."""
    registry = CollectorRegistry()
    add_daemon_collectors(registry, daemon)
    return registry


def add_daemon_collectors(registry: CollectorRegistry, daemon: str) -> None:
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    info = Gauge("xce_build_info", "Always 1: the version of XCE and of the Python it runs on",
                 ["version", "python", "daemon"], registry=registry)
    info.labels(version(), platform.python_version(), daemon).set(1)


def gateway_request_durations(registry: CollectorRegistry) -> Histogram:
    """The gateway's request times by method and route (to the start of the answer: an event stream's
    is its opening), and the collectors every daemon's registry has."""
    add_daemon_collectors(registry, "gateway")
    return Histogram("xce_gateway_request_duration_seconds", "Requests from their arrival to the start "
                     "of the answer, by method and route", ["method", "route"], buckets=BUCKETS,
                     registry=registry)


def version() -> str:
    from importlib import metadata  # here: the CLI imports this module, and this costs milliseconds

    try:
        return metadata.version("xce")
    except metadata.PackageNotFoundError:  # a checkout run without an install
        return "unknown"


def wildcard(host: str) -> bool:
    """0.0.0.0, ::, or no host at all: an address to bind, not to reach."""
    if not host:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return False


def reachable(address: str, host: str) -> str:
    """`address` (HOST:PORT) with a wildcard host replaced by `host` (whose daemon it is)."""
    if not address:
        return ""
    bound, _, port = address.rpartition(":")
    if not wildcard(bound) or not host:
        return address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
