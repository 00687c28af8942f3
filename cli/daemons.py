"""The daemons `xce` starts: a controller replica, a worker, a scheduler, the REST gateway and the MCP
server. Each imports its code only when started: no client command loads a daemon."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from cli.locate import controllers, credentials
from cli.parser import path_arg

if TYPE_CHECKING:
    from gateway.http_limits import HttpLimits


def declare_controller(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True, type=path_arg, help="the cluster file (cluster.toml)")
    p.add_argument("--id", required=True, type=int, help="this replica's id in the cluster file")
    p.add_argument("--join", action="store_true",
                   help="a new replica: run as a learner until `xce member add` takes it in")
    p.add_argument("--force-new-cluster", action="store_true",
                   help="disaster recovery: this survivor's state as a one-member cluster (etcd's name)")
    p.add_argument("--metrics", default="", metavar="HOST:PORT",
                   help="serve Prometheus /metrics there (default: the cluster file's metrics, if any)")


def run_controller(args: argparse.Namespace) -> int:
    from controller.main import run

    return run(args.config, args.id, args.join, args.force_new_cluster, args.metrics)


def declare_worker(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True, type=path_arg, help="the worker's file (worker.toml)")
    p.add_argument("--name", help="host name (default: from the config, else this machine's)")
    p.add_argument("--metrics", default="", metavar="HOST:PORT",
                   help="serve Prometheus /metrics there (default: the file's metrics, if any)")


def run_worker(args: argparse.Namespace) -> int:
    from worker.daemon import run

    return run(args.config, args.name, args.metrics)


def declare_scheduler(p: argparse.ArgumentParser) -> None:
    p.add_argument("--id", help="scheduler id (default: random)")
    p.add_argument("--lease-s", type=float, default=10.0, help="lease duration in seconds")
    p.add_argument("--picker", default="fcfs", help="job_pick_plugin for queues without their own")
    p.add_argument("--cert", type=path_arg,
                   help="its certificate (role scheduler; the id defaults to its name)")
    p.add_argument("--key", type=path_arg, help="the certificate's key")
    p.add_argument("--metrics", default="", metavar="HOST:PORT", help="serve Prometheus /metrics there")


def run_scheduler(args: argparse.Namespace) -> int:
    from scheduler.daemon import run
    from scheduler.picker import PickerError, load

    try:
        load(args.picker)
    except PickerError as exc:
        print(f"xce scheduler: {exc}", file=sys.stderr)
        return 2
    return run(controllers(args), credentials(args), args.id, args.lease_s, args.picker, args.metrics)


def declare_gateway(p: argparse.ArgumentParser) -> None:
    p.add_argument("--listen", default="127.0.0.1:8080", help="HOST:PORT (default 127.0.0.1:8080)")
    p.add_argument("--max-event-streams", type=int, default=16, metavar="N",
                   help="event streams one user may follow at once (default 16)")
    p.add_argument("--clusters", default="", metavar="FILE",
                   help="other clusters to relay to (Slurm, LSF): a TOML file (docs/GATEWAY.md)")
    p.add_argument("--max-wait", type=float, default=300.0, metavar="S",
                   help="the longest a blocking read (?index=&wait=) waits; a longer wait is cut to it "
                        "(default 300: below your proxies' idle timeout)")
    _http_limit_options(p)


def run_gateway(args: argparse.Namespace) -> int:
    from gateway.main import run

    return run(controllers(args), credentials(args), args.listen, _http_limits(args), args.max_event_streams,
               args.clusters, args.max_wait)


def declare_mcp(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gateway", default="http://127.0.0.1:8080", help="the gateway's URL")
    p.add_argument("--http", default="", metavar="[HOST:]PORT",
                   help="serve streamable HTTP instead of stdio (host 127.0.0.1 unless given; another "
                        "host needs --tls-cert and --tls-key); every request must carry its caller's key")
    p.add_argument("--tls-cert", default="", help="certificate (PEM) for --http")
    p.add_argument("--tls-key", default="", help="its private key (PEM) for --http")
    _http_limit_options(p)


def run_mcp(args: argparse.Namespace) -> int:
    from client.credentials import CredentialsError, find_token

    try:
        key = find_token(None)
    except CredentialsError as exc:
        print(f"xce mcp: {exc}", file=sys.stderr)
        return 2
    if not key and not args.http:
        print("xce mcp: no key: give the agent's token as $XCE_TOKEN or $XCE_TOKEN_FILE (a 0600 file)",
              file=sys.stderr)
        return 2
    from gateway.mcp_server import HttpOptions, run_http, run_stdio

    if not args.http:
        return run_stdio(args.gateway, key or "")
    # Over HTTP each request acts as the key it carries; the key found here (if any) is refused.
    return run_http(args.gateway, HttpOptions(args.http, args.tls_cert, args.tls_key, _http_limits(args)),
                    refused_key=key or "")


def _http_limit_options(p: argparse.ArgumentParser) -> None:
    """The connection limits of an HTTP server (gateway/http_guard.py; docs/SECURITY.md)."""
    from gateway.http_limits import HttpLimits

    d = HttpLimits()
    p.add_argument("--max-connections", type=int, default=d.max_connections, metavar="N",
                   help=f"connections open at once (default {d.max_connections})")
    p.add_argument("--max-connections-per-peer", type=int, default=d.max_connections_per_peer, metavar="N",
                   help=f"connections from one address (default {d.max_connections_per_peer})")
    p.add_argument("--header-timeout-s", type=float, default=d.header_timeout_s, metavar="S",
                   help=f"a request's headers must arrive within this (default {d.header_timeout_s:g})")
    p.add_argument("--body-timeout-s", type=float, default=d.body_timeout_s, metavar="S",
                   help=f"its body within this after them (default {d.body_timeout_s:g})")
    p.add_argument("--idle-timeout-s", type=float, default=d.idle_timeout_s, metavar="S",
                   help=f"an idle connection is closed after this (default {d.idle_timeout_s:g})")


def _http_limits(args: argparse.Namespace) -> HttpLimits:
    from gateway.http_limits import HttpLimits

    return HttpLimits(args.max_connections, args.max_connections_per_peer, args.header_timeout_s,
                      args.body_timeout_s, args.idle_timeout_s)
