"""A sweep file's configurations (simulator/sweep.py): what-ifs as xce sim takes them, errors naming the
line, and the table that compares them."""

from __future__ import annotations

import re

import pytest

from simulator import sweep

FILE = """# name      what-ifs
fcfs        --set queue.normal.backfill=none
easy+16     --set queue.normal.backfill=easy --add-hosts 16x1   # more hosts
   # a comment alone
busier      --scale-arrivals 1.2 --set 'queue.normal.picker=fcfs'  # (#: a comment)
"""


def test_configurations_are_read_in_order_with_their_what_ifs() -> None:
    configs = sweep.parse(FILE, "s.txt")
    assert [c.name for c in configs] == ["fcfs", "easy+16", "busier"]
    assert configs[1] == sweep.Config("easy+16", ("queue.normal.backfill=easy",), "16x1")
    assert configs[2].options() == ["--set", "queue.normal.picker=fcfs", "--scale-arrivals", "1.2"]
    assert configs[1].options() == ["--set", "queue.normal.backfill=easy", "--add-hosts", "16x1"]


@pytest.mark.parametrize(("text", "message"), [
    ("", "s.txt: no configuration"),
    ("a --set\n", "s.txt:1: '--set': a what-if is --set KEY=VALUE"),
    ("a --nope 3\n", "s.txt:1: '--nope'"),
    ("a --set queue.q.bogus=1\n", "s.txt:1: "),
    ("a --scale-arrivals zero\n", "s.txt:1: --scale-arrivals 'zero': a number"),
    ("a --scale-arrivals -1\n", "above 0"),
    ("a --add-hosts lots\n", "s.txt:1: --add-hosts: hosts 'lots': N or NxS"),
    ("a --add-hosts 2 --add-hosts 3\n", "s.txt:1: --add-hosts twice"),
    ("a\n\nb\na\n", "s.txt:4: a again (first on line 1)"),
    ("bad/name\n", "s.txt:1: 'bad/name' is not a configuration name"),
    ("a 'open\n", "s.txt:1: No closing quotation"),
    ("\n".join(f"c{i}" for i in range(sweep.MAX_CONFIGS + 1)), f"more than {sweep.MAX_CONFIGS}"),
])
def test_a_bad_sweep_file_is_refused_naming_the_line(text: str, message: str) -> None:
    with pytest.raises(sweep.SweepError, match=message.replace("(", r"\(").replace(")", r"\)")):
        sweep.parse(text, "s.txt")


def test_the_table_compares_each_configuration_with_the_workload_as_given() -> None:
    def figures(wait: float, bsld: float) -> dict[str, object]:
        return {"overall": {"jobs": 10, "avg_wait_s": wait, "max_wait_s": 2 * wait, "avg_bsld": bsld,
                            "utilization": 0.5, "makespan_s": 100.0}}

    text = sweep.table([(sweep.AS_GIVEN, figures(100.0, 4.0)), ("easy", figures(50.0, 4.0)),
                        ("none", figures(150.0, 6.0))])
    header, *rows = [re.split(r"\s{2,}", line.strip()) for line in text.splitlines()]
    assert header[0] == "configuration" and header[-2:] == ["wait vs given", "bsld vs given"]
    assert [row[0] for row in rows] == ["as given", "easy", "none"]
    assert [row[-2:] for row in rows] == [["=", "="], ["-50.0 %", "="], ["+50.0 %", "+50.0 %"]]
    assert rows[2][1:3] == ["10", "150.00"]
