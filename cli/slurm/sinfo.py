"""sinfo: partitions and nodes, as Slurm 22.05 shows them. A partition is a queue; every host is in
every queue (XCE's queues select hosts by requirement, not by membership). A node's state: down (it
stopped answering), drain (closed by an operator), alloc (every slot taken), mix (some), idle."""

from __future__ import annotations

import argparse
from collections import defaultdict

from client.channel import Client
from xce import hostlist
from xce.printable import shown
from xce.v1 import api_pb2 as api


def declare(p: argparse.ArgumentParser, name: str) -> None:
    p.add_argument("-N", "--Node", dest="nodes", action="store_true", help="a line per node")
    p.add_argument("-p", "--partition", dest="partitions", metavar="partition")
    p.add_argument("-n", "--nodes", dest="names", metavar="nodes")
    p.add_argument("-t", "--states", dest="states", metavar="states")
    p.add_argument("-h", "--noheader", dest="noheader", action="store_true")
    p.add_argument("-s", "--summarize", dest="summarize", action="store_true")
    p.add_argument("-l", "--long", dest="long", action="store_true")


def node_state(host: api.Host) -> str:
    if host.status != api.HOST_OK:
        return "down"
    if host.closed:
        return "drain"
    if host.slots_used >= host.spec.slots:
        return "alloc"
    return "mix" if host.slots_used else "idle"


def _limit(queue: api.Queue) -> str:
    return "infinite"  # (run limits are the job's: -W, -t)


def run(client: Client, args: argparse.Namespace) -> int:
    queues = client.list_queues()
    listed = client.list_hosts()
    hosts = sorted(listed.hosts, key=lambda h: h.spec.name)
    if args.names:
        wanted = set(args.names.replace(",", " ").split())
        hosts = [h for h in hosts if h.spec.name in wanted]
    if args.states:
        states = {s.strip().lower() for s in args.states.split(",")}
        hosts = [h for h in hosts if node_state(h) in states]
    partitions = [q for q in queues.queues if not args.partitions or q.name in args.partitions.split(",")]
    default = queues.default_queue
    if args.nodes:
        if not args.noheader:
            print(f"{'NODELIST':<10} {'NODES':>5} {'PARTITION':>9} STATE")
        for host in hosts:
            for queue in partitions:
                name = queue.name + ("*" if queue.name == default else "")
                print(f"{shown(host.spec.name):<10} {1:>5} {shown(name):>9} {node_state(host)}")
        return 0
    if not args.noheader:
        print(f"{'PARTITION':<9} {'AVAIL':>5} {'TIMELIMIT':>10} {'NODES':>5} {'STATE':>5} NODELIST")
    for queue in partitions:
        by_state: dict[str, list[str]] = defaultdict(list)
        for host in hosts:
            by_state[node_state(host)].append(host.spec.name)
        avail = "down" if queue.inactive else "up"
        name = queue.name + ("*" if queue.name == default else "")
        for state, names in sorted(by_state.items()):
            print(f"{shown(name):<9} {avail:>5} {_limit(queue):>10} {len(names):>5} {state:>5} "
                  f"{shown(hostlist.compress(names))}")
    return 0
