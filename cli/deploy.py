"""Making a deployment: `xce ca init|issue` (the cluster's certificate authority), `xce init` (CA,
certificates, password, admin token; a bundle per host) and `xce init-replica` (the bundle of a
replica to add). They write files here and talk to no cluster."""

from __future__ import annotations

import argparse
import sys

from cli.parser import path_arg


def declare_ca(p: argparse.ArgumentParser) -> None:
    casub = p.add_subparsers(dest="ca_command", required=True)
    q = casub.add_parser("init", help="create ca.crt and ca.key in DIR (unless they exist)")
    q.add_argument("--dir", required=True, type=path_arg, help="where ca.crt and ca.key go")
    q.add_argument("--cluster-id", default="xce", help="the CA's name (default xce)")
    q = casub.add_parser("issue", help="issue a certificate: role replica, worker, scheduler or client")
    q.add_argument("--dir", required=True, type=path_arg, help="where ca.crt and ca.key are")
    q.add_argument("--role", required=True, choices=("replica", "worker", "scheduler", "client"),
                   help="what the certificate names: a replica, worker, scheduler, or the shared client")
    q.add_argument("--name", required=True, help="replica id, host name, scheduler id, or any for client")
    q.add_argument("--san", action="append", default=[], help="a host name or IP it serves (replicas)")
    q.add_argument("--out", type=path_arg, help="where to write it (default: DIR)")
    q.add_argument("--days", type=int, default=825, help="validity (default 825 days)")


def run_ca(args: argparse.Namespace) -> int:
    from xce import pki

    try:
        if args.ca_command == "init":
            print(f"CA certificate: {pki.init_ca(args.dir, args.cluster_id)}")
        else:
            cert, key = pki.issue(args.dir, args.role, args.name, args.san, args.days, args.out)
            print(f"certificate {cert}\nkey {key} (0600)")
    except pki.PkiError as exc:
        print(f"xce: {exc}", file=sys.stderr)
        return 2
    return 0


def declare_init(p: argparse.ArgumentParser) -> None:
    p.add_argument("--replicas", required=True,
                   help="HOST:GRPC_PORT[:RAFT_PORT],... (Raft default: gRPC + 100)")
    p.add_argument("--workers", default="", help="the worker hosts' names, as they will join: n1,n2,...")
    p.add_argument("--schedulers", help="hosts that run a scheduler (default: every replica host)")
    p.add_argument("--cluster-id", default="xce", help="the cluster's id (default xce)")
    p.add_argument("--admin", default="root", help="the user the first admin token is for (default root)")
    p.add_argument("--data-dir", default="/var/lib/xce", help="the replicas' state (default /var/lib/xce)")
    p.add_argument("--spool-dir", default="/var/spool/xce",
                   help="the workers' spools (default /var/spool/xce)")
    p.add_argument("--out", required=True, type=path_arg, help="where to write (must not exist or be empty)")


def run_init(args: argparse.Namespace) -> int:
    from ops import deploy_init

    try:
        plan = deploy_init.plan(args.cluster_id, args.replicas, args.workers, args.schedulers, args.admin,
                                args.data_dir, args.spool_dir)
        hosts = deploy_init.write(plan, args.out)
    except deploy_init.InitError as exc:
        print(f"xce init: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}: a bundle for each of {len(hosts)} hosts ({', '.join(h.name for h in hosts)}) "
          f"in {args.out / 'hosts'}; the CA in {args.out / 'ca'} (keep it off the hosts); the admin token "
          f"in {args.out / 'admin' / 'token'}. {args.out / 'README.txt'} says what goes where.")
    return 0


def declare_init_replica(p: argparse.ArgumentParser) -> None:
    p.add_argument("--deploy", required=True, type=path_arg, help="the `xce init --out` directory (its CA)")
    p.add_argument("--id", required=True, type=int, help="the new replica's id (one never used before)")
    p.add_argument("--address", required=True, help="HOST:GRPC_PORT[:RAFT_PORT] (Raft default: gRPC + 100)")


def run_init_replica(args: argparse.Namespace) -> int:
    from ops import deploy_init

    try:
        etc = deploy_init.add_replica(args.deploy, args.id, args.address)
    except deploy_init.InitError as exc:
        print(f"xce init-replica: {exc}", file=sys.stderr)
        return 2
    grpc = ":".join(args.address.split(":")[:2])
    print(f"wrote {etc}: copy it to the new host's /etc/xce (rsync -a), start xce-controller@{args.id} "
          f"(it joins as a learner), then run `xce member add {grpc}`")
    return 0
