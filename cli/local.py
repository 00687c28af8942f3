"""A cluster on this machine: `xce cluster up` (replicas, a scheduler, workers and the REST gateway in the
foreground, each serving /metrics) and `xce demo` (the whole story in a minute: jobs through a leader
kill); `xce lsf-path`, where LSF's commands are."""

from __future__ import annotations

import argparse
import os
import sys

from cli.locate import DEFAULT_DATA, data_dir
from cli.parser import path_arg


def declare_cluster(p: argparse.ArgumentParser) -> None:
    csub = p.add_subparsers(dest="cluster_command", required=True)
    up = csub.add_parser("up", help="run a local cluster in the foreground (Ctrl-C stops it)")
    up.add_argument("--data", help=f"data directory (default $XCE_DATA or ./{DEFAULT_DATA})")
    up.add_argument("--replicas", type=int, default=3, help="controller replicas (default 3)")
    up.add_argument("--base-port", type=int, default=0, help="first port (default: free ports)")
    up.add_argument("--workers", type=int, default=2, help="local workers to start (default 2)")
    up.add_argument("--slots", type=int, default=4, help="slots per local worker (default 4)")


def run_cluster(args: argparse.Namespace) -> int:
    from ops.local_cluster import up

    return up(path_arg(data_dir(args.data)), args.replicas, args.base_port, args.workers, args.slots)


def declare_demo(p: argparse.ArgumentParser) -> None:
    p.add_argument("--jobs", type=int, default=100, help="jobs to run through the leader kill (default 100)")
    p.add_argument("--data", help="data directory (default: a fresh temporary one)")


def run_demo(args: argparse.Namespace) -> int:
    from ops.demo import run

    return run(args.jobs, path_arg(args.data) if args.data else None)


def declare_lsf_path(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", action="store_true",
                   help="print the profile to source instead (PATH, LSF_BINDIR, LSF_ENVDIR, as LSF's)")


def declare_slurm_path(p: argparse.ArgumentParser) -> None:
    del p  # (no options)


def run_slurm_path(args: argparse.Namespace) -> int:
    """The Slurm commands' bin directory (xce/slurm_bin.py), made or brought up to date first."""
    from xce import slurm_bin

    try:
        print(slurm_bin.ensure())
    except OSError as exc:
        print(f"xce slurm-path: cannot make {slurm_bin.bin_dir()}: {exc.strerror}", file=sys.stderr)
        return 1
    return 0


def run_lsf_path(args: argparse.Namespace) -> int:
    """The LSF commands' bin directory (xce/lsf_bin.py), made or brought up to date first."""
    from xce import lsf_bin

    try:
        path = lsf_bin.ensure()
    except OSError as exc:
        print(f"xce lsf-path: cannot make {lsf_bin.bin_dir()}: {exc.strerror}", file=sys.stderr)
        return 1
    print(os.path.join(os.path.dirname(path), "conf", "profile.lsf") if args.profile else path)
    return 0
