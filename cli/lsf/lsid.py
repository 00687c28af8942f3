"""lsid: the product, version, cluster name and master host, as LSF prints them.

Tools read LSF's version from its first line (dask-jobqueue, Snakemake's LSF
executor): `IBM Spectrum LSF Standard 10.1...` is matched by their patterns;
this one says that it is XCE's, LSF 10.1's commands.
"""

from __future__ import annotations

import argparse

from cli.lsf.lsclusters import cluster_name
from client.channel import Client, XceError
from xce.printable import shown

BANNER = "IBM Spectrum LSF Standard 10.1.0.0, XCE's LSF 10.1 commands (not IBM's)"


def declare(p: argparse.ArgumentParser, name: str) -> None:
    p.add_argument("-V", dest="version", action="store_true", help="the version only")


def prepare(args: argparse.Namespace) -> bool:
    if args.version:
        print(BANNER)
        return False
    return True


def run(client: Client, args: argparse.Namespace) -> int:
    status = client.status()
    print(BANNER)
    print("Copyright XCE's authors; LSF is IBM's. This is XCE.\n")
    print(f"My cluster name is {shown(cluster_name(status.cluster_id))}")
    leader = next((r.grpc_address for r in status.replicas if r.role == "leader"), "")
    print(f"My master name is {shown(leader.rpartition(':')[0] or leader or '-')}")
    return 0


def refused(args: argparse.Namespace, exc: XceError) -> str:
    return f"lsid: {shown(exc.message)}"
