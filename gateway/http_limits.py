"""The connection limits of the HTTP servers (gateway/http_guard.py says how they are held); defaults in
docs/SECURITY.md. Its own module, importing nothing heavy: the command line builds its options from it."""

from __future__ import annotations

from typing import NamedTuple


class HttpLimits(NamedTuple):  # (not a dataclass: the command line imports this, and not dataclasses)
    max_connections: int = 4096
    max_connections_per_peer: int = 128
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    idle_timeout_s: float = 5.0

    def check(self) -> None:
        if self.max_connections < 1 or self.max_connections_per_peer < 1:
            raise ValueError("connection caps must be at least 1")
        if min(self.header_timeout_s, self.body_timeout_s, self.idle_timeout_s) <= 0:
            raise ValueError("timeouts must be positive")
