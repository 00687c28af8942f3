"""Golden plan orders: where N slots go over hosts in preference order (scheduler/plans.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.plans import Hosts, Placement, best, plans


def shown(plan: tuple[Placement, ...] | None) -> str:
    return "none" if plan is None else " ".join(f"{p.host}:{p.slots}" for p in plan)


def every(slots: int, hosts: list[tuple[str, int]], **span: int) -> list[str]:
    return [shown(p) for p in plans(slots, hosts, **span)]


def test_one_host_first_when_one_has_room() -> None:
    assert every(4, [("a", 8), ("b", 4)]) == ["a:4", "a:2 b:2"]  # then at most 2 per host, then no more hosts


def test_the_k_host_sequence_is_balanced_and_exact() -> None:
    hosts = [("a", 8), ("b", 8), ("c", 8), ("d", 8)]
    # k = 1 (8 at most on one host) cannot take 16; k = 2 takes 8 + 8; k = 3: at most 6 each;
    # k = 4: 4 each. Each plan takes exactly 16 slots.
    assert every(16, hosts) == ["a:8 b:8", "a:6 b:6 c:4", "a:4 b:4 c:4 d:4"]


def test_sixteen_slots_on_four_hosts_of_four() -> None:
    hosts = [("h1", 4), ("h2", 4), ("h3", 4), ("h4", 4)]
    assert every(16, hosts) == ["h1:4 h2:4 h3:4 h4:4"]


def test_a_later_larger_host_is_ranked_before_an_earlier_small_one() -> None:
    # k = 2, at most 3 each: a gives 1, b 3, c 3 -> b and c, listed in preference order.
    # k = 3, at most 2 each, gives 1 + 2 + 2: no plan.
    assert every(6, [("a", 1), ("b", 3), ("c", 3)]) == ["b:3 c:3"]


def test_more_hosts_at_the_same_cap_can_fit_where_fewer_could_not() -> None:
    # 5 slots: k = 3 and k = 4 both allow 2 per host; only 4 hosts give 5.
    assert every(5, [("a", 2), ("b", 1), ("c", 1), ("d", 1)]) == ["a:2 b:1 c:1 d:1"]


def test_no_plan_when_the_slots_do_not_fit() -> None:
    assert every(5, [("a", 4), ("b", 1)]) == []  # 5 free, but k = 2 allows 3 per host: 3 + 1
    assert every(3, []) == []
    assert every(2, [("a", 0), ("b", 1)]) == []  # a full host is never in a plan


def test_span_hosts_one() -> None:
    assert every(4, [("a", 2), ("b", 4), ("c", 8)], span_hosts=1) == ["b:4"]
    assert every(9, [("a", 2), ("b", 4), ("c", 8)], span_hosts=1) == []


def test_ptile_places_full_tiles_then_the_rest() -> None:
    hosts = [("a", 2), ("b", 4), ("c", 8), ("d", 4), ("e", 1)]
    assert every(8, hosts, ptile=4) == ["b:4 c:4"]
    assert every(10, hosts, ptile=4) == ["a:2 b:4 c:4"]  # the rest on the first host with room; in order
    assert every(3, hosts, ptile=4) == ["b:3"]  # fewer than a tile: the first host with 3 free
    assert every(13, hosts, ptile=4) == ["a:1 b:4 c:4 d:4"]  # three tiles, the rest on the first with room
    assert every(12, hosts, ptile=4) == ["b:4 c:4 d:4"]
    assert every(16, hosts, ptile=4) == []  # only three hosts have a tile free
    assert every(14, [("b", 4), ("c", 4), ("d", 4), ("e", 1)], ptile=4) == []  # the rest (2) fits nowhere


def test_ptile_rest_on_a_host_with_one_slot() -> None:
    assert every(9, [("b", 4), ("c", 4), ("e", 1)], ptile=4) == ["b:4 c:4 e:1"]


def test_min_max_takes_the_largest_count_that_fits() -> None:
    hosts = [("a", 4), ("b", 2)]
    # 6 free, but 6 slots fit no balanced plan (one host: 4; two: at most 3 each, 3 + 2); 5 do.
    assert shown(best(2, 8, hosts)) == "a:3 b:2"
    assert shown(best(6, 8, hosts)) == "none"  # never fewer than min
    assert shown(best(2, 4, hosts)) == "a:4"  # the largest count, then the fewest hosts
    assert shown(best(1, 3, [("a", 4)])) == "a:3"


def test_the_host_iterator_is_read_only_as_far_as_needed() -> None:
    read: list[str] = []

    def source() -> Iterator[tuple[str, int]]:
        for name in ("a", "b", "c", "d"):
            read.append(name)
            yield name, 4

    first = next(plans(4, Hosts(source()), span_hosts=1))
    assert shown(first) == "a:4" and read == ["a"]
    read.clear()
    assert shown(next(plans(8, Hosts(source()), ptile=4))) == "a:4 b:4" and read == ["a", "b"]


def test_a_plan_comes_once_and_a_host_is_in_it_once() -> None:
    # k = 3 and k = 4 both allow 2 per host and both give a:2 b:2 c:1: yielded once.
    assert every(5, [("a", 2), ("b", 2), ("c", 2), ("d", 2)]) == ["a:2 b:2 c:1"]
    assert every(4, [("a", 2), ("a", 2)]) == []  # a name given twice is one host
    assert every(4, [("a", 2), ("a", 2), ("b", 2)]) == ["a:2 b:2"]


def test_span_hosts_takes_only_one() -> None:
    with pytest.raises(ValueError):
        list(plans(4, [("a", 2), ("b", 4)], span_hosts=2))


def test_min_max_within_span_and_ptile() -> None:
    hosts = [("a", 3), ("b", 6), ("c", 2)]
    assert shown(best(2, 10, hosts, span_hosts=1)) == "b:6"
    assert shown(best(2, 10, hosts, ptile=3)) == "a:3 b:3 c:2"


def test_no_room_is_answered_without_trying_every_host_count() -> None:
    # 1,000,000 slots over 3,000 hosts of 1: fewer free than asked for, found by one sum.
    assert every(1_000_000, [(f"h{i}", 1) for i in range(3000)]) == []
    # The shape that fails every k for every count from 2H-1 down: one big host, many of 1.
    size = 400
    plan = best(1, 10**6, [("big", size)] + [(f"h{i}", 1) for i in range(size - 1)])
    # The largest count with a plan: 401 at 2 per host (big gives 2, the 399 others 1 each).
    assert plan is not None and sum(p.slots for p in plan) == size + 1 and len(plan) == size
    assert plan[0] == Placement("big", 2)


@settings(max_examples=300, deadline=None)
@given(frees=st.lists(st.integers(0, 7), max_size=8), slots=st.integers(1, 24), low=st.integers(1, 10),
       extra=st.integers(0, 12))
def test_by_free_reads_fewer_hosts_but_gives_the_same_plans(frees: list[int], slots: int, low: int,
                                                            extra: int) -> None:
    """Hosts most free first (the default order): the k that give most are the first k."""
    hosts = sorted(((f"h{i}", free) for i, free in enumerate(frees)), key=lambda h: (-h[1], h[0]))
    assert list(plans(slots, hosts, by_free=True)) == list(plans(slots, hosts))
    assert best(low, low + extra, hosts, by_free=True) == best(low, low + extra, hosts)


def _best_by_every_count(low: int, high: int, hosts: list[tuple[str, int]], span_hosts: int,
                         ptile: int) -> tuple[Placement, ...] | None:
    for count in range(high, low - 1, -1):
        plan = next(plans(count, hosts, span_hosts, ptile), None)
        if plan is not None:
            return plan
    return None


@settings(max_examples=400, deadline=None)
@given(frees=st.lists(st.integers(0, 7), max_size=7), low=st.integers(1, 12), extra=st.integers(0, 30),
       shape=st.sampled_from([(0, 0), (1, 0), (0, 1), (0, 2), (0, 3)]))
def test_best_finds_the_largest_count_that_has_a_plan(frees: list[int], low: int, extra: int,
                                                       shape: tuple[int, int]) -> None:
    """Without reading every count: the interval per host count, bisection for ptile."""
    hosts = [(f"h{i}", free) for i, free in enumerate(frees)]
    span_hosts, ptile = shape
    assert best(low, low + extra, hosts, span_hosts, ptile) == \
        _best_by_every_count(low, low + extra, hosts, span_hosts, ptile)

