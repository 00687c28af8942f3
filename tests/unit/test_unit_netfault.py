"""soak/netfault.py, the user-space netem: the pure decision and the rules (the mangler itself on real
traffic: tests/cluster/test_netfault.py)."""

from __future__ import annotations

import random

import pytest

from soak import netfault
from soak.netfault import Settings, decide


def test_decide_drops_about_the_loss_share_and_delays_within_the_jitter() -> None:
    rng = random.Random(7)
    settings = Settings(loss=0.3, delay_ms=100, jitter_ms=20)
    decisions = [decide(settings, rng) for _ in range(20000)]
    kept = [d for d in decisions if not d.drop]
    assert abs(1 - len(kept) / len(decisions) - 0.3) < 0.02
    assert all(0.08 <= d.delay_s <= 0.12 for d in kept)
    assert not any(d.duplicate or d.reordered for d in decisions)


def test_decide_reorders_only_what_would_wait_and_normal_jitter_never_goes_below_zero() -> None:
    rng = random.Random(7)
    assert not any(decide(Settings(reorder=1.0), rng).reordered for _ in range(100))  # no delay: no order
    decisions = [decide(Settings(delay_ms=5, jitter_ms=50, distribution="normal", reorder=0.25,
                                 duplicate=0.1), rng) for _ in range(20000)]
    assert all(d.delay_s >= 0 for d in decisions)
    assert all(d.delay_s == 0 for d in decisions if d.reordered)
    assert abs(sum(d.reordered for d in decisions) / len(decisions) - 0.25 * 0.54) < 0.03  # P(delay > 0)
    assert abs(sum(d.duplicate for d in decisions) / len(decisions) - 0.1) < 0.01


def test_the_same_seed_decides_the_same() -> None:
    settings = Settings(loss=0.2, delay_ms=50, jitter_ms=30, duplicate=0.02, reorder=0.1)
    first, second = random.Random(3), random.Random(3)
    assert [decide(settings, first) for _ in range(500)] == [decide(settings, second) for _ in range(500)]


def test_settings_out_of_range_are_refused() -> None:
    for bad in ({"loss": 1.5}, {"delay_ms": -1}, {"direction": "up"}, {"distribution": "pareto"},
                {"losss": 0.1}):
        with pytest.raises(ValueError):
            Settings.from_mapping(bad)
    assert Settings.from_mapping({"loss": 0.1, "version": 3}) == Settings(loss=0.1)


def test_the_rules_let_the_marked_duplicates_through_before_queueing_with_bypass() -> None:
    (mark_chain, mark), (out_chain, out), (in_chain, into) = netfault.rules(4)
    assert (mark_chain, out_chain, in_chain) == ("OUTPUT", "OUTPUT", "INPUT")
    assert mark[-2:] == ["-j", "ACCEPT"] and hex(netfault.MARK) in mark
    for rule in (out, into):
        assert rule[-5:] == ["-j", "NFQUEUE", "--queue-num", "4", "--queue-bypass"] and "tcp" in rule
    assert netfault.applies("out", netfault.NF_INET_LOCAL_OUT)
    assert not netfault.applies("out", netfault.NF_INET_LOCAL_IN)
    assert netfault.applies("in", netfault.NF_INET_LOCAL_IN) and netfault.applies("both", 99)
