"""Where the cluster is, and who the caller is.

Controllers come from `--controllers host:port,...`, else $XCE_CONTROLLERS,
else the cluster file (`--cluster FILE`, $XCE_CLUSTER, else the local
cluster's `cluster.toml` in the data directory: $XCE_DATA or ./xce-data,
else a deployment's /etc/xce/cluster.toml). The cluster file also gives the
TLS files; who the caller is comes from a token or MUNGE (client/credentials.py).
"""

from __future__ import annotations

import argparse
import os
import sys

from client.cluster_file import grpc_addresses
from client.credentials import Credentials, CredentialsError, for_cluster

DEFAULT_DATA = "xce-data"
SYSTEM_CLUSTER_FILE = "/etc/xce/cluster.toml"  # where xce init's bundles put it on every host


def data_dir(explicit: str | None = None) -> str:
    return os.path.realpath(explicit or os.environ.get("XCE_DATA") or DEFAULT_DATA)


def cluster_file(args: argparse.Namespace) -> str | None:
    explicit = getattr(args, "cluster", None) or os.environ.get("XCE_CLUSTER")
    if explicit:
        return os.path.realpath(explicit)
    for path in (os.path.join(data_dir(), "cluster.toml"), SYSTEM_CLUSTER_FILE):
        if os.path.exists(path):
            return path
    return None


def controllers(args: argparse.Namespace) -> list[str]:
    explicit = args.controllers or os.environ.get("XCE_CONTROLLERS")
    if explicit:
        return [a.strip() for a in explicit.split(",") if a.strip()]
    config_path = cluster_file(args)
    if config_path is None:
        local = os.path.join(data_dir(), "cluster.toml")
        raise SystemExit(f"xce: no --controllers, no local cluster at {local} "
                         f"(start one with `xce cluster up`) and no {SYSTEM_CLUSTER_FILE}")
    try:
        # Not the whole file: only replica hosts can read the password.
        return grpc_addresses(config_path, cached=True)
    except ValueError as exc:
        raise SystemExit(f"xce: {exc}") from None


def credentials(args: argparse.Namespace) -> Credentials:
    cert, key = getattr(args, "cert", None), getattr(args, "key", None)
    try:
        # A daemon with a certificate is named by it: no token from the files (an insecure
        # cluster's daemons take theirs from $XCE_TOKEN).
        token = os.environ.get("XCE_TOKEN") if cert is not None else None
        found = for_cluster(cluster_file(args), token=token, use_token_search=cert is None, cert=cert,
                            key=key, cached=True)
        found.check()
        return found
    except CredentialsError as exc:
        print(f"xce: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
