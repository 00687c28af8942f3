"""A user-space netem: loss, delay with jitter, duplication and reordering of one namespace's TCP.

This kernel has no sch_netem, so the soak does in user space what `tc qdisc ... netem` would:
iptables rules in a replica's network namespace (`rules`) send the TCP packets that leave or
enter its eth0 (not loopback) to NFQUEUE queue N with `--queue-bypass`: while no process is bound
to the queue (this one died or never started) the packets pass untouched. This process, run in
that namespace (`ip netns exec NS python -m soak.netfault --queue N --control FILE`), binds the
queue over its own small nfnetlink_queue client (`NfQueue`, an AF_NETLINK socket: no library)
and gives every packet a verdict.

Per packet, by the current `Settings` (`decide`, pure, with a seeded `random.Random`): drop it
with probability `loss`; else hold it `delay_ms` plus `jitter_ms` of uniform or normal noise
before its ACCEPT (verdicts given out of order reorder packets, as netem does with jitter); a
`reorder` share of the delayed ones goes at once while the others wait; a `duplicate` share is
accepted and then sent once more through a raw socket (IP_HDRINCL) whose SO_MARK the rules let
through unqueued. `direction` limits all this to the packets leaving ("out") or entering ("in").

Order of effects, per turn of the loop: due verdicts first (oldest release time first), then
new packets, then the control file (read every CONTROL_EVERY_S; a change applies to packets
that arrive after it, and the stats file is written at once so the caller can see it took),
then the stats file (every STATS_EVERY_S while the counters change, else once a second).
Bounds: at most `--max-held` packets wait (more are dropped, counted as `overflow`); the
kernel's queue holds twice that and, past it, lets packets through (fail-open). A packet
between two replicas impaired in "both" directions passes two of these (the sender's "out"
and the receiver's "in"), as it would cross two lossy links.

Ends on SIGTERM/SIGINT (held packets are let go first) or when its parent (`--parent`) is gone.
"""

from __future__ import annotations

import argparse
import dataclasses
import heapq
import json
import math
import os
import random
import select
import signal
import socket
import struct
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MARK = 0x58434E46  # "XCNF": the duplicates' SO_MARK, which the rules accept without queueing
CONTROL_EVERY_S = 0.1
STATS_EVERY_S = 0.1
MAX_HELD = 4096
DIRECTIONS = ("both", "out", "in")
DISTRIBUTIONS = ("uniform", "normal")


@dataclass(frozen=True)
class Settings:
    loss: float = 0.0
    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    duplicate: float = 0.0
    reorder: float = 0.0
    distribution: str = "uniform"
    direction: str = "out"  # what netem on the namespace's eth0 would impair

    def check(self) -> None:
        """Raise ValueError for settings that mean nothing."""
        for name in ("loss", "duplicate", "reorder"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be within [0, 1]")
        if self.delay_ms < 0 or self.jitter_ms < 0:
            raise ValueError("delay_ms and jitter_ms must not be negative")
        if self.distribution not in DISTRIBUTIONS:
            raise ValueError(f"distribution must be one of {', '.join(DISTRIBUTIONS)}")
        if self.direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {', '.join(DIRECTIONS)}")

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any]) -> Settings:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(raw) - names - {"version"}
        if unknown:
            raise ValueError(f"unknown settings: {', '.join(sorted(unknown))}")
        settings = cls(**{k: v for k, v in raw.items() if k in names})
        settings.check()
        return settings


@dataclass(frozen=True)
class Decision:
    drop: bool = False
    delay_s: float = 0.0
    duplicate: bool = False
    reordered: bool = False  # sent at once while others wait


def decide(settings: Settings, rng: random.Random) -> Decision:
    """What to do with one packet. Pure but for the generator."""
    if settings.loss and rng.random() < settings.loss:
        return Decision(drop=True)
    duplicate = bool(settings.duplicate) and rng.random() < settings.duplicate
    delay_ms = settings.delay_ms
    if settings.jitter_ms:
        if settings.distribution == "normal":
            delay_ms = rng.gauss(settings.delay_ms, settings.jitter_ms)
        else:
            delay_ms = settings.delay_ms + rng.uniform(-settings.jitter_ms, settings.jitter_ms)
    delay_ms = max(0.0, delay_ms)
    if delay_ms and settings.reorder and rng.random() < settings.reorder:
        return Decision(duplicate=duplicate, reordered=True)
    return Decision(delay_s=delay_ms / 1000.0, duplicate=duplicate)


def applies(direction: str, hook: int) -> bool:
    """Whether packets seen at this netfilter hook are impaired under `direction`."""
    return direction == "both" or (direction == "out") == (hook == NF_INET_LOCAL_OUT)


def rules(queue: int, interface: str = "eth0") -> list[tuple[str, list[str]]]:
    """The iptables rules (chain, rule) that send the namespace's TCP on `interface` to the queue;
    the duplicates (marked) pass. Add them in this order with -A, remove them with -D."""
    bypass = ["-j", "NFQUEUE", "--queue-num", str(queue), "--queue-bypass"]
    return [("OUTPUT", ["-o", interface, "-m", "mark", "--mark", hex(MARK), "-j", "ACCEPT"]),
            ("OUTPUT", ["-o", interface, "-p", "tcp", *bypass]),
            ("INPUT", ["-i", interface, "-p", "tcp", *bypass])]


def one_way_rule(direction: str, interface: str = "eth0") -> tuple[str, list[str]]:
    """The DROP rule (chain, rule) for an asymmetric partition: "out" drops what the namespace
    sends (others do not hear it, it hears them), "in" what it receives. Insert it first (-I)."""
    if direction == "out":
        return "OUTPUT", ["-o", interface, "-j", "DROP"]
    if direction == "in":
        return "INPUT", ["-i", interface, "-j", "DROP"]
    raise ValueError("direction must be 'out' or 'in'")


# nfnetlink_queue (linux/netfilter/nfnetlink_queue.h), spoken over AF_NETLINK.
NETLINK_NETFILTER = 12
SOL_NETLINK = 270
NETLINK_NO_ENOBUFS = 5
NLM_F_REQUEST, NLM_F_ACK = 1, 4
NLMSG_ERROR = 2
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET, NFQNL_MSG_VERDICT, NFQNL_MSG_CONFIG = 0, 1, 2
NFQA_CFG_CMD, NFQA_CFG_PARAMS, NFQA_CFG_QUEUE_MAXLEN, NFQA_CFG_MASK, NFQA_CFG_FLAGS = 1, 2, 3, 4, 5
NFQNL_CFG_CMD_BIND = 1
NFQNL_COPY_PACKET = 2
NFQA_CFG_F_FAIL_OPEN = 1
NFQA_PACKET_HDR, NFQA_PAYLOAD = 1, 10
NFQA_VERDICT_HDR = 2
NF_DROP, NF_ACCEPT = 0, 1
NF_INET_LOCAL_IN, NF_INET_LOCAL_OUT = 1, 3
_NLMSG = struct.Struct("=IHHII")  # length, type, flags, sequence, port
_NLA = struct.Struct("=HH")  # length, type
RECEIVE_BYTES = 1 << 18
SOCKET_BUFFER_BYTES = 8 << 20


def _align(n: int) -> int:
    return (n + 3) & ~3


def _attribute(kind: int, value: bytes) -> bytes:
    return _NLA.pack(_NLA.size + len(value), kind) + value + b"\0" * (_align(len(value)) - len(value))


def _attributes(data: bytes, offset: int) -> dict[int, bytes]:
    found = {}
    while offset + _NLA.size <= len(data):
        length, kind = _NLA.unpack_from(data, offset)
        if length < _NLA.size:
            break
        found[kind & 0x3FFF] = data[offset + _NLA.size: offset + length]
        offset += _align(length)
    return found


@dataclass(frozen=True)
class Packet:
    id: int
    hook: int
    payload: bytes


class NfQueue:
    """One bound nfnetlink_queue: packets in (`receive`), verdicts out (`verdict`)."""

    def __init__(self, number: int, max_len: int) -> None:
        self.number = number
        self._sequence = 0
        self._buffer = bytearray(RECEIVE_BYTES)
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, 33, SOCKET_BUFFER_BYTES)  # SO_RCVBUFFORCE
            self.sock.setsockopt(SOL_NETLINK, NETLINK_NO_ENOBUFS, 1)  # overflow: lost, not an error
            self.sock.bind((0, 0))
            self._configure(_attribute(NFQA_CFG_CMD, struct.pack("!BxH", NFQNL_CFG_CMD_BIND, 0)))
            self._configure(_attribute(NFQA_CFG_PARAMS, struct.pack("!IB", 0xFFFF, NFQNL_COPY_PACKET)))
            self._configure(_attribute(NFQA_CFG_QUEUE_MAXLEN, struct.pack("!I", max_len)))
            self._configure(_attribute(NFQA_CFG_FLAGS, struct.pack("!I", NFQA_CFG_F_FAIL_OPEN))
                            + _attribute(NFQA_CFG_MASK, struct.pack("!I", NFQA_CFG_F_FAIL_OPEN)))
        except BaseException:
            self.sock.close()
            raise
        self.sock.setblocking(False)

    def _message(self, kind: int, flags: int, body: bytes) -> bytes:
        self._sequence += 1
        header = struct.pack("=BB", socket.AF_UNSPEC, 0) + struct.pack("!H", self.number)
        return _NLMSG.pack(_NLMSG.size + 4 + len(body), (NFNL_SUBSYS_QUEUE << 8) | kind,
                           NLM_F_REQUEST | flags, self._sequence, 0) + header + body

    def _configure(self, body: bytes) -> None:
        self.sock.send(self._message(NFQNL_MSG_CONFIG, NLM_F_ACK, body))
        while True:  # the acknowledgement (a packet cannot come yet: no rule queues before the bind)
            data = self.sock.recv(RECEIVE_BYTES)
            length, kind, _, sequence, _ = _NLMSG.unpack_from(data)
            if kind == NLMSG_ERROR and sequence == self._sequence:
                error = struct.unpack_from("=i", data, _NLMSG.size)[0]
                if error:
                    raise OSError(-error, f"nfnetlink_queue {self.number}: {os.strerror(-error)}")
                return

    def receive(self) -> Iterator[Packet]:
        """The packets waiting now (none if none: the socket does not block)."""
        try:
            size = self.sock.recv_into(self._buffer)
        except BlockingIOError:
            return
        data, offset = bytes(self._buffer[:size]), 0
        while offset + _NLMSG.size <= size:
            length, kind, _, _, _ = _NLMSG.unpack_from(data, offset)
            if length < _NLMSG.size:
                break
            if kind == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
                found = _attributes(data[:offset + length], offset + _NLMSG.size + 4)
                if NFQA_PACKET_HDR in found:
                    packet_id, _, hook = struct.unpack_from("!IHB", found[NFQA_PACKET_HDR])
                    yield Packet(packet_id, hook, found.get(NFQA_PAYLOAD, b""))
            offset += _align(length)

    def verdict(self, packet_id: int, verdict: int) -> None:
        self.sock.send(self._message(NFQNL_MSG_VERDICT, 0,
                                     _attribute(NFQA_VERDICT_HDR, struct.pack("!II", verdict, packet_id))))

    def close(self) -> None:
        self.sock.close()  # the kernel unbinds the queue: with --queue-bypass, traffic flows again


@dataclass
class Counters:
    seen: int = 0
    passed: int = 0  # not in `direction`: accepted untouched
    dropped: int = 0
    delayed: int = 0
    reordered: int = 0
    duplicated: int = 0
    duplicate_errors: int = 0
    overflow: int = 0  # dropped because `max_held` packets were waiting
    held_max: int = 0


class Mangler:
    """The loop: verdicts due, new packets, the control file, the stats file (see the top)."""

    def __init__(self, queue: NfQueue, control: Path, stats: Path | None, seed: int, max_held: int,
                 parent: int | None) -> None:
        self.queue, self.control, self.stats_path = queue, control, stats
        self.rng = random.Random(seed)
        self.max_held, self.parent = max_held, parent
        self.settings, self.version, self._control_text = Settings(), 0, ""
        self.counters = Counters()
        self.held: list[tuple[float, int, int, bytes | None]] = []  # release at, order, id, copy
        self._order = 0
        self._last_stats: tuple[object, ...] = ()
        self.stopping = False
        self.raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)  # IP_HDRINCL
        self.raw.setsockopt(socket.SOL_SOCKET, getattr(socket, "SO_MARK", 36), MARK)

    def run(self) -> None:
        poller = select.poll()
        poller.register(self.queue.sock, select.POLLIN)
        next_control = next_stats = 0.0
        self.read_control()
        while not self.stopping:
            now = time.monotonic()
            self.release(now)
            if now >= next_control:
                next_control = now + CONTROL_EVERY_S
                if self.parent is not None and os.getppid() != self.parent:
                    break
                if self.read_control():
                    next_stats = 0.0
            if now >= next_stats:
                next_stats = now + STATS_EVERY_S
                self.write_stats()
            wake = min(next_control, next_stats, self.held[0][0] if self.held else math.inf)
            if poller.poll(max(0.0, (wake - time.monotonic()) * 1000.0) + 0.5):
                for _ in range(256):  # then the due verdicts again
                    packets = list(self.queue.receive())
                    if not packets:
                        break
                    for packet in packets:
                        self.handle(packet, time.monotonic())
        self.release(math.inf)
        self.write_stats()

    def handle(self, packet: Packet, now: float) -> None:
        counters = self.counters
        counters.seen += 1
        if not applies(self.settings.direction, packet.hook):
            counters.passed += 1
            self.queue.verdict(packet.id, NF_ACCEPT)
            return
        decision = decide(self.settings, self.rng)
        if decision.drop:
            counters.dropped += 1
            self.queue.verdict(packet.id, NF_DROP)
            return
        copy = packet.payload if decision.duplicate else None
        counters.reordered += decision.reordered
        if decision.delay_s <= 0:
            self.accept(packet.id, copy)
        elif len(self.held) >= self.max_held:
            counters.overflow += 1
            self.queue.verdict(packet.id, NF_DROP)
        else:
            counters.delayed += 1
            self._order += 1
            heapq.heappush(self.held, (now + decision.delay_s, self._order, packet.id, copy))
            counters.held_max = max(counters.held_max, len(self.held))

    def release(self, now: float) -> None:
        while self.held and self.held[0][0] <= now:
            _, _, packet_id, copy = heapq.heappop(self.held)
            self.accept(packet_id, copy)

    def accept(self, packet_id: int, copy: bytes | None) -> None:
        self.queue.verdict(packet_id, NF_ACCEPT)
        if copy is None:
            return
        if len(copy) < 20 or copy[0] >> 4 != 4:
            self.counters.duplicate_errors += 1  # IPv4 only
            return
        try:
            self.raw.sendto(copy, (socket.inet_ntoa(copy[16:20]), 0))
            self.counters.duplicated += 1
        except OSError:
            self.counters.duplicate_errors += 1

    def read_control(self) -> bool:
        """Take the control file's settings if they changed; whether they did."""
        try:
            text = self.control.read_text()
        except OSError:
            return False
        if text == self._control_text:
            return False
        self._control_text = text
        try:
            raw = json.loads(text)
            self.settings, self.version = Settings.from_mapping(raw), int(raw.get("version", 0))
        except (ValueError, TypeError) as exc:
            print(f"netfault: {self.control}: {exc}; the settings stay", file=sys.stderr, flush=True)
            return False
        return True

    def write_stats(self) -> None:
        """Unless nothing changed since the last, in this second (`time` says when the counters were true)."""
        now = (dataclasses.astuple(self.counters), len(self.held), self.version, int(time.monotonic()))
        if self.stats_path is None or now == self._last_stats:
            return
        self._last_stats = now
        stats = {**dataclasses.asdict(self.counters), "held": len(self.held), "pid": os.getpid(),
                 "version": self.version, "settings": dataclasses.asdict(self.settings), "time": time.time()}
        partial = self.stats_path.with_name(self.stats_path.name + ".part")
        partial.write_text(json.dumps(stats) + "\n")
        os.replace(partial, self.stats_path)


def read_stats(path: Path) -> dict[str, Any]:
    """A mangler's last stats file ({} before the first)."""
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return {}


def write_control(path: Path, settings: Settings, version: int) -> None:
    """Replace the control file at once (a mangler never reads half of one)."""
    settings.check()
    partial = path.with_name(path.name + ".part")
    partial.write_text(json.dumps({**dataclasses.asdict(settings), "version": version}) + "\n")
    os.replace(partial, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m soak.netfault", description=__doc__.split("\n\n")[0])
    parser.add_argument("--queue", type=int, default=0, help="the NFQUEUE number the rules send to")
    parser.add_argument("--control", type=Path, help="JSON settings, re-read every 0.1 s")
    parser.add_argument("--stats", type=Path, help="where to write the counters (JSON)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-held", type=int, default=MAX_HELD, help="packets held at most")
    parser.add_argument("--parent", type=int, help="end when this process is no longer the parent")
    parser.add_argument("--probe", action="store_true", help="bind the queue, then end (0: it can)")
    args = parser.parse_args(argv)
    try:
        queue = NfQueue(args.queue, 2 * args.max_held)
    except OSError as exc:
        print(f"netfault: cannot bind queue {args.queue}: {exc}", file=sys.stderr, flush=True)
        return 2
    try:
        if args.probe:
            return 0
        if args.control is None:
            parser.error("--control is needed")
        mangler = Mangler(queue, args.control, args.stats, args.seed, args.max_held, args.parent)

        def stop(signum: int, frame: object) -> None:
            mangler.stopping = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        mangler.run()
        return 0
    finally:
        queue.close()


if __name__ == "__main__":
    sys.exit(main())
