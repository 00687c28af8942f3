"""lsclusters: the cluster, as LSF 10.1 lists it (its name on the second line's first word, which
tools read: Snakemake's LSF executor)."""

from __future__ import annotations

import argparse

from client.channel import Client, XceError
from xce.printable import shown

GETOPT = ("wlhV", "", ())


def declare(p: argparse.ArgumentParser, name: str) -> None:
    p.add_argument("-w", dest="wide", action="store_true", help="wide")
    p.add_argument("-l", dest="long", action="store_true", help="long (as the table here)")


def run(client: Client, args: argparse.Namespace) -> int:
    status = client.status()
    hosts = client.list_hosts(stale=True).hosts
    leader = next((r.grpc_address for r in status.replicas if r.role == "leader"), "")
    master = leader.rpartition(":")[0] or "-"
    print("CLUSTER_NAME   STATUS   MASTER_HOST               ADMIN    HOSTS  SERVERS")
    print(f"{shown(cluster_name(status.cluster_id)):<14} {'ok':<8} {shown(master):<25} {'xce':<8} "
          f"{len(hosts):>5} {len(hosts):>8}")
    return 0


def cluster_name(cluster_id: str) -> str:
    """A name LSF's tools can put in a path: the cluster id's letters, digits, - and _."""
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in cluster_id) or "xce"


def refused(args: argparse.Namespace, exc: XceError) -> str:
    return f"lsclusters: {shown(exc.message)}"
