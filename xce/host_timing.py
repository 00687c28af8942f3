"""How the cluster times its hosts: the cluster file's [hosts] table.

Both sides read it: the controller (heartbeats expected, when a silent host
is UNAVAIL and when it is given up, how often load indices are committed, how often a
worker is sent its whole set of jobs again)
and a worker that is given the cluster file (its fence must end before the
leader gives it up: worker/config.py). The rules between the periods are
checked here, once: a worker must not fence while the leader still waits
for it, and a cut-off worker must have killed its rerunnable jobs before the
leader requeues them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class HostTiming:
    heartbeat_s: float = 2.0
    heartbeat_timeout_s: float = 10.0
    unknown_timeout_s: float = 300.0
    fence_s: float = 150.0  # the worker-side fence (0: none); below unknown_timeout_s
    load_commit_s: float = 15.0  # a host's load indices committed at most this often (0: never)
    resend_s: float = 5.0  # the leader re-sends a worker its whole set of jobs at least this often


def parse(hosts: dict[str, Any], path: Path, error: type[Exception]) -> HostTiming:
    """The [hosts] table `hosts` of the cluster file at `path`, or `error` saying what is wrong."""
    heartbeat_s, heartbeat_timeout_s = hosts.get("heartbeat_s", 2.0), hosts.get("heartbeat_timeout_s", 10.0)
    unknown_timeout_s = hosts.get("unknown_timeout_s", 300.0)
    if not all(isinstance(v, int | float) and v > 0 for v in (heartbeat_s, heartbeat_timeout_s,
                                                               unknown_timeout_s)) \
            or heartbeat_timeout_s <= heartbeat_s:
        raise error(f"{path}: [hosts] heartbeat_s, heartbeat_timeout_s and unknown_timeout_s must be "
                    "positive, the timeout longer than the heartbeat")
    fence_s = hosts.get("fence_s", unknown_timeout_s / 2)
    if not isinstance(fence_s, int | float) or isinstance(fence_s, bool) \
            or not (fence_s == 0 or heartbeat_timeout_s < fence_s < unknown_timeout_s):
        raise error(f"{path}: [hosts] fence_s ({fence_s}; default half of unknown_timeout_s) must be 0 "
                    f"(no fence) or longer than heartbeat_timeout_s ({heartbeat_timeout_s}: a worker "
                    "must not fence while the leader still waits for it) and shorter than "
                    f"unknown_timeout_s ({unknown_timeout_s}: a cut-off worker must have killed its "
                    "rerunnable jobs before the leader requeues them)")
    load_commit_s = hosts.get("load_commit_s", 15.0)
    if not isinstance(load_commit_s, int | float) or isinstance(load_commit_s, bool) or load_commit_s < 0:
        raise error(f"{path}: [hosts] load_commit_s must be 0 (load indices not committed) or positive")
    resend_s = hosts.get("resend_s", HostTiming.resend_s)
    if not isinstance(resend_s, int | float) or isinstance(resend_s, bool) or resend_s <= 0:
        raise error(f"{path}: [hosts] resend_s must be positive")
    return HostTiming(heartbeat_s=float(heartbeat_s), heartbeat_timeout_s=float(heartbeat_timeout_s),
                      unknown_timeout_s=float(unknown_timeout_s), fence_s=float(fence_s),
                      load_commit_s=float(load_commit_s), resend_s=float(resend_s))
