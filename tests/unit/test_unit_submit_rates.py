"""The leader's per-user submit rate (controller/submit_rates.py) and the default bounds on users."""

from __future__ import annotations

from controller.submit_rates import SubmitRates


def test_a_bucket_gives_a_burst_then_the_rate() -> None:
    rates = SubmitRates(rate_per_s=100, burst=1000)
    assert rates.take("ann", 1000, 0.0) == 0.0
    assert rates.take("ann", 1, 0.0) > 0  # empty
    assert rates.take("bob", 1000, 0.0) == 0.0  # each user their own
    assert abs(rates.take("ann", 200, 1.0) - 1.0) < 1e-9  # 100 back after a second: 100 more to wait
    assert rates.take("ann", 100, 1.0) == 0.0
    assert rates.take("ann", 1000, 100.0) == 0.0  # full again, not fuller


def test_more_than_a_burst_goes_when_the_bucket_is_full_and_empties_it_below_zero() -> None:
    rates = SubmitRates(rate_per_s=10, burst=100)
    assert rates.take("ann", 500, 0.0) == 0.0
    wait = rates.take("ann", 1, 0.0)
    assert abs(wait - 40.1) < 1e-6  # 400 below empty, then one: 40.1 s at 10 a second


def test_no_rate_is_no_bound_and_the_tracked_users_are_bounded() -> None:
    assert SubmitRates(rate_per_s=0, burst=1).take("ann", 10**9, 0.0) == 0.0
    rates = SubmitRates(rate_per_s=1, burst=10, max_users=100)
    for i in range(1000):
        assert rates.take(f"user{i}", 1, float(i * 10)) == 0.0  # each refilled by the next one's turn
    assert len(rates._buckets) <= 100  # noqa: SLF001
