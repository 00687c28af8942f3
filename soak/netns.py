"""Replicas in network namespaces of their own, so a partition can be made.

`Net(n)` creates a bridge in the current namespace and n namespaces, each
joined to the bridge by a veth pair and given one address of a private /24
that no interface here uses yet (10.231.x.0/24). Processes in the current
namespace (workers, schedulers, the load generator) reach every replica
through the bridge; `cut(i)` takes namespace i's link down, which separates
it from everyone, and `heal(i)` brings it back. `close()` removes all of it
(the namespaces' processes must be gone first). Needs root and iproute2.

Finer faults, with iptables (`fault_available()` says whether this machine has what they need):
`impair(i, loss=..., delay_ms=..., ...)` starts, on first use, a packet mangler in namespace i
(soak/netfault.py, a user-space netem on NFQUEUE) with the rules that send it the namespace's TCP
on eth0, and later only rewrites its control file; `clear(i)` sets it back to no impairment.
`one_way(i, "out")` drops what namespace i sends (others do not hear it, it hears them) and
`one_way(i, "in")` the reverse, with a plain DROP rule; `heal_one_way(i)` removes it.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import ipaddress
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from soak import netfault

MANGLER_READY_S = 10.0  # a mangler binds its queue and writes its first stats well within this


class NetError(Exception):
    pass


def available() -> str | None:
    """None if namespaces can be made here, else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "iproute2 (ip) is not installed"
    return None


@functools.cache
def fault_available() -> str | None:
    """None if `impair` and `one_way` can work here (iptables, NFQUEUE and a queue bound in a scratch
    namespace), else why not. Tried once per process."""
    why = available()
    if why is not None:
        return why
    if shutil.which("iptables") is None:
        return "iptables is not installed (scripts/install_netfault.sh)"
    namespace = f"xcenfprobe{os.getpid() % 100000}"
    subprocess.run(["ip", "netns", "del", namespace], capture_output=True, timeout=30)  # a dead namesake's
    try:
        _ip("netns", "add", namespace)
        _iptables(namespace, "-A", "OUTPUT", *netfault.rules(0)[1][1])
        _iptables(namespace, "-I", "INPUT", *netfault.one_way_rule("in")[1])
        done = subprocess.run(["ip", "netns", "exec", namespace, sys.executable, "-m", "soak.netfault",
                               "--probe"], capture_output=True, text=True, timeout=30, env=_mangler_env())
        if done.returncode != 0:
            return f"no nfnetlink_queue: {done.stderr.strip()}"
    except NetError as exc:
        return f"iptables with NFQUEUE does not work here: {exc}"
    finally:
        subprocess.run(["ip", "netns", "del", namespace], capture_output=True, timeout=30)
    return None


def _mangler_env() -> dict[str, str]:
    """This environment, with the project importable (for `python -m soak.netfault`) from anywhere."""
    root = str(Path(__file__).resolve().parent.parent)
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}


def _iptables(namespace: str, *args: str) -> str:
    cmd = ["ip", "netns", "exec", namespace, "iptables", "-w", "10", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise NetError(f"{' '.join(cmd)}: {done.stderr.strip()}")
    return done.stdout


def _ip(*args: str, namespace: str | None = None) -> str:
    cmd = ["ip", *(["netns", "exec", namespace, "ip"] if namespace else []), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise NetError(f"{' '.join(cmd)}: {done.stderr.strip()}")
    return done.stdout


def _free_subnet() -> ipaddress.IPv4Network:
    used = []
    for line in _ip("-4", "-o", "addr").splitlines():
        words = line.split()
        if "inet" in words:
            used.append(ipaddress.ip_interface(words[words.index("inet") + 1]).network)
    for third in range(10, 250):
        candidate = ipaddress.IPv4Network(f"10.231.{third}.0/24")
        if not any(candidate.overlaps(u) for u in used):
            return candidate
    raise NetError("no free 10.231.x.0/24 subnet")


@contextlib.contextmanager
def _choosing_a_subnet() -> Iterator[None]:
    """Held from choosing a subnet until the bridge holds its address: two Nets made at once (by
    two processes: tests side by side) would otherwise both take the first free one."""
    with open(os.path.join(tempfile.gettempdir(), "xce-netns.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released as the file closes
        yield


class Net:
    def __init__(self, count: int, tag: str | None = None) -> None:
        why = available()
        if why is not None:
            raise NetError(why)
        self.tag = tag or f"x{os.getpid() % 100000}"
        self.bridge = f"xb{self.tag}"[:15]
        self.namespaces: list[str] = []
        self.addresses: list[str] = []
        self._links: list[str] = []
        self._manglers: dict[int, subprocess.Popen[bytes]] = {}
        self._impaired: dict[int, int] = {}  # namespace -> its control file's version
        self._one_way: dict[int, str] = {}
        self._fault_dir: Path | None = None
        try:
            with _choosing_a_subnet():
                self.subnet = _free_subnet()
                hosts = list(self.subnet.hosts())
                self.gateway = str(hosts[0])
                _ip("link", "add", self.bridge, "type", "bridge")
                _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            for i in range(count):
                self._add(i, str(hosts[10 + i]))
        except BaseException:
            self.close()
            raise

    def _add(self, i: int, address: str) -> None:
        namespace, outer, inner = f"xce{self.tag}n{i}", f"xv{self.tag}{i}"[:15], "eth0"
        _ip("netns", "add", namespace)
        self.namespaces.append(namespace)
        _ip("link", "add", outer, "type", "veth", "peer", "name", f"xp{self.tag}{i}"[:15])
        self._links.append(outer)
        _ip("link", "set", f"xp{self.tag}{i}"[:15], "netns", namespace)
        _ip("link", "set", f"xp{self.tag}{i}"[:15], "name", inner, namespace=namespace)
        _ip("addr", "add", f"{address}/24", "dev", inner, namespace=namespace)
        _ip("link", "set", inner, "up", namespace=namespace)
        _ip("link", "set", "lo", "up", namespace=namespace)
        _ip("link", "set", outer, "master", self.bridge)
        _ip("link", "set", outer, "up")
        self.addresses.append(address)

    def prefix(self, i: int) -> Sequence[str]:
        """Put before a command to run it in namespace i (exec: the pid is the command's)."""
        return ["ip", "netns", "exec", self.namespaces[i]]

    def cut(self, i: int) -> None:
        _ip("link", "set", self._links[i], "down")

    def heal(self, i: int) -> None:
        _ip("link", "set", self._links[i], "up")

    def impair(self, i: int, loss: float = 0.0, delay_ms: float = 0.0, jitter_ms: float = 0.0,
               duplicate: float = 0.0, reorder: float = 0.0, *, distribution: str = "uniform",
               direction: str = "out", seed: int | None = None) -> None:
        """Namespace i's TCP on eth0, from now on: `loss` of it dropped, the rest held `delay_ms` ±
        `jitter_ms` (uniform or normal `distribution`), a `reorder` share of that sent at once, a
        `duplicate` share sent twice (netfault.Settings). `direction`: what it sends ("out", as netem
        on its eth0 would), receives ("in") or both. Returns once the mangler has taken the settings.
        `seed`: its generator's, on first use (default: i). Not thread-safe: one caller at a time."""
        settings = netfault.Settings(loss, delay_ms, jitter_ms, duplicate, reorder, distribution, direction)
        settings.check()
        proc = self._manglers.get(i)
        if proc is None or proc.poll() is not None:
            self._start_mangler(i, settings, i if seed is None else seed)
            return
        version = self._impaired[i] + 1
        netfault.write_control(self._fault_path(i, "control"), settings, version)
        self._impaired[i] = version
        self._wait_for_version(i, version)

    def clear(self, i: int) -> None:
        """No more impairment of namespace i (its mangler stays, passing everything)."""
        if i in self._impaired:
            self.impair(i)

    def fault_stats(self, i: int) -> dict[str, Any]:
        """Namespace i's mangler's counters (netfault.Counters, with `held`, `pid` and the settings
        it applies); {} if it never ran."""
        return netfault.read_stats(self._fault_path(i, "stats")) if i in self._impaired else {}

    def mangler_pid(self, i: int) -> int | None:
        proc = self._manglers.get(i)
        return proc.pid if proc is not None and proc.poll() is None else None

    def one_way(self, i: int, direction: str) -> None:
        """An asymmetric partition of namespace i: "out" drops every packet it sends on its link
        (others do not hear it, it hears them), "in" every packet it receives."""
        chain, rule = netfault.one_way_rule(direction)
        if self._one_way.get(i) == direction:
            return
        self.heal_one_way(i)
        _iptables(self.namespaces[i], "-I", chain, "1", *rule)
        self._one_way[i] = direction

    def one_way_dropped(self, i: int) -> int:
        """How many packets namespace i's one-way rule has dropped (0 without one)."""
        direction = self._one_way.get(i)
        if direction is None:
            return 0
        chain = netfault.one_way_rule(direction)[0]
        line = _iptables(self.namespaces[i], "-L", chain, "1", "-v", "-x", "-n")
        return int(line.split()[0])

    def heal_one_way(self, i: int) -> None:
        direction = self._one_way.pop(i, None)
        if direction is not None:
            chain, rule = netfault.one_way_rule(direction)
            _iptables(self.namespaces[i], "-D", chain, *rule)

    def _fault_path(self, i: int, what: str) -> Path:
        if self._fault_dir is None:
            self._fault_dir = Path(tempfile.mkdtemp(prefix=f"xce-netfault-{self.tag}-"))
        return self._fault_dir / f"n{i}.{what}"

    def _start_mangler(self, i: int, settings: netfault.Settings, seed: int) -> None:
        why = fault_available()
        if why is not None:
            raise NetError(why)
        version = self._impaired.get(i, 0) + 1
        control, stats = self._fault_path(i, "control"), self._fault_path(i, "stats")
        netfault.write_control(control, settings, version)
        stats.unlink(missing_ok=True)
        with open(self._fault_path(i, "log"), "ab") as log:
            self._manglers[i] = subprocess.Popen(
                [*self.prefix(i), sys.executable, "-m", "soak.netfault", "--queue", str(i), "--control",
                 str(control), "--stats", str(stats), "--seed", str(seed), "--parent", str(os.getpid())],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=_mangler_env())
        first = i not in self._impaired
        self._impaired[i] = version
        self._wait_for_version(i, version)
        if first:  # the mangler is bound before any packet is queued to it
            for chain, rule in netfault.rules(i):
                _iptables(self.namespaces[i], "-A", chain, *rule)

    def _wait_for_version(self, i: int, version: int) -> None:
        deadline = time.monotonic() + MANGLER_READY_S
        while netfault.read_stats(self._fault_path(i, "stats")).get("version") != version:
            proc = self._manglers[i]
            if proc.poll() is not None or time.monotonic() > deadline:
                log = self._fault_path(i, "log").read_text(errors="replace")[-2000:]
                raise NetError(f"the packet mangler of {self.namespaces[i]} did not take its settings "
                               f"(exit {proc.poll()}): {log}")
            time.sleep(0.02)

    def _stop_faults(self) -> None:
        for proc in self._manglers.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self._manglers.values():
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for i in list(self._one_way):
            with contextlib.suppress(NetError):
                self.heal_one_way(i)
        for i in self._impaired:
            for chain, rule in netfault.rules(i):
                with contextlib.suppress(NetError):
                    _iptables(self.namespaces[i], "-D", chain, *rule)
        if self._fault_dir is not None:
            shutil.rmtree(self._fault_dir, ignore_errors=True)
        self._manglers, self._impaired, self._one_way, self._fault_dir = {}, {}, {}, None

    def close(self) -> None:
        self._stop_faults()
        for link in self._links:
            subprocess.run(["ip", "link", "del", link], capture_output=True, timeout=30)
        for namespace in self.namespaces:
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True, timeout=30)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, timeout=30)
        self._links, self.namespaces = [], []
