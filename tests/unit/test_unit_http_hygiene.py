"""The pure parts of connection hygiene: the log's repeat filter, the HTTP servers' caps, where
`xce mcp --http` may listen."""

from __future__ import annotations

import logging
import re

import pytest

from gateway.http_guard import Guard
from gateway.http_limits import HttpLimits
from gateway.mcp_server import HttpOptions, http_address
from xce.daemon_logging import RepeatFilter


def record(msg: str, *args: object) -> logging.LogRecord:
    return logging.LogRecord("xce.http", logging.WARNING, __file__, 1, msg, args, None)


def test_a_repeated_message_is_let_through_a_few_times_a_period_then_counted() -> None:
    now = [0.0]
    kept = RepeatFilter(burst=3, period_s=10.0, clock=lambda: now[0])
    passed = [kept.filter(record("refused %s", i)) for i in range(1000)]
    assert passed == [True] * 3 + [False] * 997
    assert kept.filter(record("another message"))  # each template its own
    now[0] = 10.0
    first = record("refused %s", 1000)
    assert kept.filter(first) and "997 more like this in the last 10 s were not logged" in first.getMessage()
    assert first.getMessage().startswith("refused 1000")


def test_the_repeat_filter_tracks_a_bounded_number_of_templates() -> None:
    kept = RepeatFilter(burst=1, period_s=10.0, max_keys=8, clock=lambda: 0.0)
    for i in range(100):
        assert kept.filter(record(f"message {i}"))
    assert len(kept._seen) == 8  # noqa: SLF001


def test_information_is_never_dropped() -> None:
    kept = RepeatFilter(burst=1, period_s=10.0, clock=lambda: 0.0)
    started = [logging.LogRecord("xce.worker", logging.INFO, __file__, 1, "job %d.%d started", (i, 0), None)
               for i in range(100)]
    assert all(kept.filter(r) for r in started)


def test_the_guard_caps_connections_per_peer_and_in_all() -> None:
    guard = Guard(HttpLimits(max_connections=5, max_connections_per_peer=2))
    assert [guard.admit("10.0.0.1") for _ in range(2)] == ["", ""]
    assert "max_connections_per_peer 2" in guard.admit("10.0.0.1")
    assert [guard.admit(peer) for peer in ("10.0.0.2", "10.0.0.2", "10.0.0.3")] == ["", "", ""]
    assert "max_connections 5" in guard.admit("10.0.0.4")
    guard.release("10.0.0.1")
    assert guard.admit("10.0.0.1") == "" and guard.total == 5
    for peer in ("10.0.0.1", "10.0.0.1", "10.0.0.2", "10.0.0.2", "10.0.0.3"):
        guard.release(peer)
    assert guard.total == 0 and not guard.by_peer


@pytest.mark.parametrize("listen, tls, expected", [
    ("8765", False, ("127.0.0.1", 8765)),
    ("127.0.0.9:8765", False, ("127.0.0.9", 8765)),
    ("[::1]:8765", False, ("::1", 8765)),
    ("localhost:8765", False, ("localhost", 8765)),
    ("0.0.0.0:8765", True, ("0.0.0.0", 8765)),
    ("0.0.0.0:8765", False, "not a loopback address"),
    ("10.1.2.3:8765", False, "not a loopback address"),
    ("example.org:8765", False, "not a loopback address"),
    ("127.0.0.1:http", False, "wants [HOST:]PORT"),
    ("127.0.0.1:70000", False, "wants [HOST:]PORT"),
])
def test_mcp_over_http_listens_on_loopback_unless_it_has_tls(listen: str, tls: bool,
                                                              expected: tuple[str, int] | str) -> None:
    options = HttpOptions(listen, "c.pem" if tls else "", "k.pem" if tls else "")
    if isinstance(expected, tuple):
        assert http_address(options) == expected
    else:
        with pytest.raises(ValueError, match=re.escape(expected)):
            http_address(options)


def test_limits_are_checked() -> None:
    with pytest.raises(ValueError):
        HttpLimits(max_connections_per_peer=0).check()
    with pytest.raises(ValueError):
        HttpLimits(header_timeout_s=0).check()
