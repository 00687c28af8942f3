"""sinfo: partitions and nodes, as Slurm 22.05 shows them. A partition is a queue; every host is in
every queue (XCE's queues select hosts by requirement, not by membership). A node's state: down (it
stopped answering), drain (closed by an operator), alloc (every slot taken), mix (some), idle.

`-o/--format` takes Slurm's `%[.][size]letter` fields (SINFO below); a line stands for the nodes of
one partition that print alike, as Slurm groups them (`sinfo -o %P`: a line per partition). The
default is Slurm's `%9P %.5a %.10l %.6D %.6t %N` (`-N`: `%10N%.6D %.9P %6t`, a line per node).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable

from cli.parser import UsageError
from client.channel import Client
from xce import hostlist
from xce.printable import shown
from xce.v1 import api_pb2 as api

DEFAULT = "%9P %.5a %.10l %.6D %.6t %N"
DEFAULT_NODES = "%10N%.6D %.9P %6t"
LONG_STATES = {"idle": "idle", "mix": "mixed", "alloc": "allocated", "drain": "drained", "down": "down"}

# A field of a line: (the partition, its nodes, the default partition's name) -> text.
Field = Callable[[api.Queue, list[api.Host], str], str]


def node_state(host: api.Host) -> str:
    if host.status != api.HOST_OK:
        return "down"
    if host.closed:
        return "drain"
    if host.slots_used >= host.spec.slots:
        return "alloc"
    return "mix" if host.slots_used else "idle"


def partition_state(queue: api.Queue) -> str:
    """XCE's queue in Slurm's partition states: closed (no submits, its jobs still dispatched) is DRAIN,
    inactive (submits taken, nothing dispatched) DOWN, both INACTIVE."""
    if queue.closed and queue.inactive:
        return "INACTIVE"
    return "DRAIN" if queue.closed else "DOWN" if queue.inactive else "UP"


AVAIL = {"UP": "up", "DOWN": "down", "DRAIN": "drain", "INACTIVE": "inact"}  # sinfo's %a


def _cpus(hosts: list[api.Host]) -> str:
    counts = sorted({h.spec.slots for h in hosts})
    return f"{counts[0]}+" if len(counts) > 1 else str(counts[0] if counts else 0)


def _cpu_states(hosts: list[api.Host]) -> str:
    """A/I/O/T: allocated, idle, other (down or drained), total CPUs."""
    total = sum(h.spec.slots for h in hosts)
    other = sum(h.spec.slots for h in hosts if node_state(h) in ("down", "drain"))
    used = sum(min(h.slots_used, h.spec.slots) for h in hosts if node_state(h) not in ("down", "drain"))
    return f"{used}/{total - used - other}/{other}/{total}"


def _node_states(hosts: list[api.Host]) -> str:
    states = [node_state(h) for h in hosts]
    used = sum(s in ("alloc", "mix") for s in states)
    idle = states.count("idle")
    return f"{used}/{idle}/{len(states) - used - idle}/{len(states)}"


SINFO: dict[str, Field] = {
    "P": lambda q, hs, default: q.name + ("*" if q.name == default else ""),
    "R": lambda q, hs, default: q.name,
    "a": lambda q, hs, default: AVAIL[partition_state(q)],
    "l": lambda q, hs, default: "infinite", "L": lambda q, hs, default: "n/a",
    "D": lambda q, hs, default: str(len(hs)),
    "N": lambda q, hs, default: hostlist.compress([h.spec.name for h in hs]),
    "n": lambda q, hs, default: hostlist.compress([h.spec.name for h in hs]),
    "t": lambda q, hs, default: node_state(hs[0]) if hs else "n/a",
    "T": lambda q, hs, default: LONG_STATES[node_state(hs[0])] if hs else "n/a",
    "c": lambda q, hs, default: _cpus(hs), "C": lambda q, hs, default: _cpu_states(hs),
    "F": lambda q, hs, default: _node_states(hs),
    "A": lambda q, hs, default: "/".join(_node_states(hs).split("/")[:2]),
    "m": lambda q, hs, default: str(min((h.spec.memory_mb for h in hs), default=0)),
    "E": lambda q, hs, default: (hs[0].closed_reason or "none") if hs else "none",
    "h": lambda q, hs, default: "NO", "s": lambda q, hs, default: "infinite",
    "p": lambda q, hs, default: str(q.priority),
}
HEADERS = {"P": "PARTITION", "R": "PARTITION", "a": "AVAIL", "l": "TIMELIMIT", "L": "DEFAULTTIME",
           "D": "NODES", "N": "NODELIST", "n": "HOSTNAMES", "t": "STATE", "T": "STATE", "c": "CPUS",
           "C": "CPUS(A/I/O/T)", "F": "NODES(A/I/O/T)", "A": "NODES(A/I)", "m": "MEMORY", "E": "REASON",
           "h": "OVERSUBSCRIBE", "s": "JOB_SIZE", "p": "PRIO_TIER"}
# The fields that tell one node from another: lines split by them (the rest are the partition's).
NODE_FIELDS = frozenset("tTcmE")


def declare(p: argparse.ArgumentParser, name: str) -> None:
    p.add_argument("-N", "--Node", dest="nodes", action="store_true", help="a line per node")
    p.add_argument("-p", "--partition", dest="partitions", metavar="partition")
    p.add_argument("-n", "--nodes", dest="names", metavar="nodes")
    p.add_argument("-t", "--states", dest="states", metavar="states")
    p.add_argument("-h", "--noheader", dest="noheader", action="store_true")
    p.add_argument("-o", "--format", dest="format", metavar="format")
    p.add_argument("-s", "--summarize", dest="summarize", action="store_true")
    p.add_argument("-l", "--long", dest="long", action="store_true")


def parse_format(text: str) -> list[tuple[str, str, int, bool]]:
    """`%9P %.5a` -> [(literal before, letter, size, right), ...]; a literal tail last, with no letter."""
    items, position = [], 0
    for found in re.finditer(r"%(\.?)(\d*)([A-Za-z])", text):
        if found[3] not in SINFO:
            raise UsageError(f"Invalid node format specification: {found[3]}")
        items.append((text[position:found.start()], found[3], int(found[2] or 0), bool(found[1])))
        position = found.end()
    items.append((text[position:], "", 0, False))
    return items


def _fit(text: str, size: int, right: bool) -> str:
    if not size:
        return text
    text = text[:size]
    return text.rjust(size) if right else text.ljust(size)


def lines(queues: list[api.Queue], hosts: list[api.Host], default: str, fmt: str, per_node: bool,
          header: bool) -> list[str]:
    """sinfo's table (pure): for each partition, its nodes grouped as they print alike (each alone
    with `per_node`)."""
    items = parse_format(fmt)
    splitting = {letter for _, letter, _, _ in items} & NODE_FIELDS
    out = []
    if header:
        out.append("".join(before + (_fit(HEADERS[letter], size, right) if letter else "")
                           for before, letter, size, right in items))
    for queue in queues:
        groups: dict[tuple[str, ...], list[api.Host]] = {}
        for host in hosts:
            key = (host.spec.name,) if per_node else tuple(
                SINFO[letter](queue, [host], default) for letter in sorted(splitting))
            groups.setdefault(key, []).append(host)
        for key in sorted(groups) if splitting or per_node else list(groups):
            members = groups[key]
            out.append("".join(before + (_fit(SINFO[letter](queue, members, default), size, right)
                                         if letter else "") for before, letter, size, right in items))
    return out


def prepare(args: argparse.Namespace) -> bool:
    parse_format(args.format or DEFAULT)  # a bad one refused before connecting
    return True


def run(client: Client, args: argparse.Namespace) -> int:
    queues = client.list_queues()
    hosts = sorted(client.list_hosts().hosts, key=lambda h: h.spec.name)
    if args.names:
        wanted = set(args.names.replace(",", " ").split())
        hosts = [h for h in hosts if h.spec.name in wanted]
    if args.states:
        states = {s.strip().lower() for s in args.states.split(",")}
        hosts = [h for h in hosts if node_state(h) in states or LONG_STATES[node_state(h)] in states]
    partitions = [q for q in queues.queues if not args.partitions or q.name in args.partitions.split(",")]
    fmt = args.format or (DEFAULT_NODES if args.nodes else DEFAULT)
    for line in lines(partitions, hosts, queues.default_queue, fmt, args.nodes, not args.noheader):
        print(shown(line))
    return 0
