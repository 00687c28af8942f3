"""Process limits a server raises at start."""

from __future__ import annotations

import resource


def raise_descriptor_limit() -> int:
    """The soft limit of open files raised to the hard one (a server's connections are bounded by its
    own caps, not by a soft limit of 1,024 it would meet first); returns the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 16)
    if soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft
