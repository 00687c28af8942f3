"""Replicas in network namespaces of their own, so a partition can be made.

`Net(n)` creates a bridge in the current namespace and n namespaces, each
joined to the bridge by a veth pair and given one address of a private /24
that no interface here uses yet (10.231.x.0/24). Processes in the current
namespace (workers, schedulers, the load generator) reach every replica
through the bridge; `cut(i)` takes namespace i's link down, which separates
it from everyone, and `heal(i)` brings it back. `close()` removes all of it
(the namespaces' processes must be gone first). Needs root and iproute2.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence


class NetError(Exception):
    pass


def available() -> str | None:
    """None if namespaces can be made here, else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "iproute2 (ip) is not installed"
    return None


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

    def close(self) -> None:
        for link in self._links:
            subprocess.run(["ip", "link", "del", link], capture_output=True, timeout=30)
        for namespace in self.namespaces:
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True, timeout=30)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, timeout=30)
        self._links, self.namespaces = [], []
