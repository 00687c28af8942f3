"""bhosts: the hosts, as LSF 10.1 lists them (HOST_NAME STATUS JL/U MAX NJOBS RUN SSUSP USUSP RSV).

STATUS is LSF's: ok, closed_Adm (closed by an operator), closed_Full
(every slot taken), closed_Excl (an exclusive job runs there), unavail (no
heartbeat). NJOBS counts the slots of its jobs. `-w` does not cut names.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter

from client.channel import Client, XceError
from xce.printable import shown
from xce.v1 import api_pb2 as api

GETOPT = ("wlh", "", ())


def declare(p: argparse.ArgumentParser, name: str) -> None:
    p.add_argument("-w", dest="wide", action="store_true", help="wide: names not cut")
    p.add_argument("-l", dest="long", action="store_true", help="each host in full")
    p.add_argument("hosts", nargs="*", metavar="host_name")


def host_status(host: api.Host) -> str:
    if host.status != api.HOST_OK:
        return "unavail"
    if host.closed:
        return "closed_Adm"
    if host.exclusive_job:
        return "closed_Excl"
    if host.spec.slots and host.slots_used >= host.spec.slots:
        return "closed_Full"
    return "ok"


def run(client: Client, args: argparse.Namespace) -> int:
    listed = client.list_hosts()
    hosts = [h for h in listed.hosts if not args.hosts or h.spec.name in args.hosts]
    for missing in sorted(set(args.hosts) - {h.spec.name for h in hosts}):
        print(f"{shown(missing)}: Bad host name, host group name or cluster name", file=sys.stderr)
    if not hosts:
        return 255
    slots: dict[str, Counter[str]] = {}
    for job in client.list_jobs(["state:in:RUN,USUSP,SSUSP"]):
        parts = [(a.host, a.slots) for a in job.allocation] or [(job.host, max(1, job.spec.slots))]
        for where, taken in parts:
            slots.setdefault(where, Counter())[api.JobState.Name(job.state)] += taken
    if args.long:
        for host in sorted(hosts, key=lambda h: h.spec.name):
            _long(host, slots.get(host.spec.name, Counter()))
        return 0
    print("HOST_NAME          STATUS       JL/U    MAX  NJOBS    RUN  SSUSP  USUSP    RSV")
    for host in sorted(hosts, key=lambda h: h.spec.name):
        used = slots.get(host.spec.name, Counter())
        name = shown(host.spec.name) if args.wide or args.long else shown(host.spec.name)[:18]
        print(f"{name:<18} {host_status(host):<13}{'-':>4}{host.spec.slots:>7}{sum(used.values()):>7}"
              f"{used['RUN']:>7}{used['SSUSP']:>7}{used['USUSP']:>7}{sum(host.rsv_free.values()):>7}")
    return 0


LOAD_INDICES = ("r15s", "r1m", "r15m", "ut", "pg", "io", "ls", "it", "tmp", "swp", "mem")


def _long(host: api.Host, used: Counter[str]) -> None:
    """bhosts -l: the host's line, its load indices, and why it is closed."""
    print(f"HOST  {shown(host.spec.name)}")
    print("STATUS           CPUF  JL/U    MAX  NJOBS    RUN  SSUSP  USUSP    RSV DISPATCH_WINDOW")
    print(f"{host_status(host):<15}{1.0:>6.2f}{'-':>6}{host.spec.slots:>7}{sum(used.values()):>7}"
          f"{used['RUN']:>7}{used['SSUSP']:>7}{used['USUSP']:>7}{sum(host.rsv_free.values()):>7}      -")
    print("\n CURRENT LOAD USED FOR SCHEDULING:")
    print("              " + "".join(f"{name:>7}" for name in LOAD_INDICES))
    load = host.load
    cells = []
    for name in LOAD_INDICES:
        value = load.get(name)
        cells.append("-" if value is None else f"{value * 100:.0f}%" if name == "ut" else
                     f"{value / 1024:.0f}G" if name in ("mem", "tmp", "swp") else f"{value:.1f}")
    print(" Total        " + "".join(f"{cell:>7}" for cell in cells))
    reserved = ", ".join(f"{shown(k)}={v}" for k, v in sorted(host.reserved.items())) or "-"
    print(f" Reserved      {reserved}")
    if host.closed:
        print(f"\n CLOSED_REASON: {shown(host.closed_reason) or '-'} (by {shown(host.closed_by) or '-'})")
    if host.groups:
        print(f"\n HOST_GROUPS: {' '.join(shown(g) for g in host.groups)}")
    print()


def refused(args: argparse.Namespace, exc: XceError) -> str:
    return f"bhosts: {shown(exc.message)}"
