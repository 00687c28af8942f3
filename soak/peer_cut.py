"""A partition that only the replicas see: one replica cut off from the others, still reached by
every client, worker and scheduler (a switch between racks fails; the clients' network does not).

Rules inside the replica's network namespace (soak/netns.py) drop what it sends to or receives from
the other replicas' addresses; its link to the bridge stays up. Then the cut-off leader must stop
answering as leader: its reads cannot be confirmed by a majority (ReadIndex), its writes cannot
commit, and it steps down after `leader_fallback_s`. A build that answered reads from a leader
lease without checking it (XCE_FAULT lease-reads) serves stale reads here, which the soak's
linearizability check finds. Needs root and iptables.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence

COMMENT = "xce-soak-peer-cut"


def available() -> str | None:
    if shutil.which("iptables") is None:
        return "iptables is not installed (scripts/install_netfault.sh)"
    return None


def _iptables(namespace: str, *args: str) -> None:
    done = subprocess.run(["ip", "netns", "exec", namespace, "iptables", "-w", *args], capture_output=True,
                          text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"iptables {' '.join(args)} in {namespace}: {done.stderr.strip()}")


RULES = (("INPUT", "-s"), ("OUTPUT", "-d"))


def cut(namespace: str, peers: Sequence[str]) -> None:
    """Drop everything between this namespace and each of `peers` (their addresses), both ways."""
    for peer in peers:
        for chain, flag in RULES:
            _iptables(namespace, "-I", chain, flag, peer, *_RULE)


def heal(namespace: str, peers: Sequence[str]) -> None:
    for peer in peers:
        for chain, flag in RULES:
            try:
                _iptables(namespace, "-D", chain, flag, peer, *_RULE)
            except RuntimeError:
                pass  # not there (healed already, or never cut)


_RULE = ("-m", "comment", "--comment", COMMENT, "-j", "DROP")
