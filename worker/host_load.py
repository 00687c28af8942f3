"""The host's load indices, as LSF's LIM reports them, sent with each heartbeat.

- r15s, r1m, r15m: the run queue. r1m and r15m are the kernel's 1- and
  15-minute load averages (/proc/loadavg); r15s is the running count
  averaged over 15 s here, sample by sample (the kernel keeps no 15 s one).
- ut: CPU utilization, 0 to 1, averaged over a minute (/proc/stat: the
  share of time neither idle nor waiting on I/O).
- pg: paging, pages swapped in and out per second, averaged over a minute
  (/proc/vmstat).
- mem: memory available now, MB (MemAvailable); swp: free swap, MB;
  tmp: free space in the temporary directory, MB.
LSF's ls (logins), it (idle time) and io are not measured: a select[] on
them matches no host.

The averages are exponential over the time between samples, so they do not
depend on the heartbeat period. A file that cannot be read leaves its
indices out rather than failing the heartbeat.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

MB = 1 << 20


class LoadMeter:
    def __init__(self, proc: Path = Path("/proc"), tmp: Path | None = None) -> None:
        self.proc = proc
        self.tmp = tmp if tmp is not None else Path(os.environ.get("TMPDIR", "/tmp"))
        self._last_s: float | None = None
        self._cpu: tuple[int, int] | None = None  # (busy, total) jiffies at the last sample
        self._swapped: int | None = None
        self._r15s = 0.0
        self._ut: float | None = None  # the averages start at their first value
        self._pg: float | None = None

    def sample(self, now_s: float) -> dict[str, float]:
        """The indices now; `now_s` is a monotonic time, the averages' clock."""
        dt = None if self._last_s is None else max(now_s - self._last_s, 0.0)
        self._last_s = now_s
        values: dict[str, float] = {}
        loadavg = self._read("loadavg").split()
        if len(loadavg) >= 4:
            values["r1m"], values["r15m"] = float(loadavg[0]), float(loadavg[2])
            running = max(int(loadavg[3].partition("/")[0]) - 1, 0)  # less this reader
            self._r15s = float(running) if dt is None else _average(self._r15s, running, dt, 15.0)
            values["r15s"] = self._r15s
        cpu = self._read("stat").partition("\n")[0].split()
        if len(cpu) >= 6 and cpu[0] == "cpu":
            jiffies = [int(x) for x in cpu[1:]]
            total, busy = sum(jiffies[:8]), sum(jiffies[:8]) - jiffies[3] - jiffies[4]
            if self._cpu is not None and dt is not None and total > self._cpu[1]:
                share = (busy - self._cpu[0]) / (total - self._cpu[1])
                self._ut = _average(self._ut, min(max(share, 0.0), 1.0), dt, 60.0)
                values["ut"] = self._ut
            self._cpu = (busy, total)
        swapped = _fields(self._read("vmstat"), ("pswpin", "pswpout"))
        if len(swapped) == 2:
            count = sum(swapped.values())
            if self._swapped is not None and dt:
                self._pg = _average(self._pg, max(count - self._swapped, 0) / dt, dt, 60.0)
                values["pg"] = self._pg
            self._swapped = count
        memory = _fields(self._read("meminfo"), ("MemAvailable:", "SwapFree:"))
        if "MemAvailable:" in memory:
            values["mem"] = memory["MemAvailable:"] / 1024  # kB
        if "SwapFree:" in memory:
            values["swp"] = memory["SwapFree:"] / 1024
        try:
            stat = os.statvfs(self.tmp)
            values["tmp"] = stat.f_bavail * stat.f_frsize / MB
        except OSError:
            pass
        return {name: round(value, 2) for name, value in values.items()}

    def _read(self, name: str) -> str:
        try:
            return (self.proc / name).read_text()
        except OSError:
            return ""


def _average(previous: float | None, value: float, dt: float, period_s: float) -> float:
    if previous is None:
        return value
    keep = math.exp(-dt / period_s)
    return previous * keep + value * (1 - keep)


def _fields(text: str, names: tuple[str, ...]) -> dict[str, int]:
    found = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] in names:
            found[parts[0]] = int(parts[1])
    return found
