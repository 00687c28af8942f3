"""`xce sim` against AccaSim 1.1.3 run unmodified (bench/crossval_accasim.py), on windows of the shared
traces and on seeded wide-job traces: FIFO gives XCE's `backfill none` start times job for job, and
AccaSim's EASY gives those of the two rules of its own that make it differ from EASY (the model in the
bench), which do differ from XCE's EASY. `make crossval` runs the whole traces and twenty seeds."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import crossval_accasim  # noqa: E402

from simulator import swf, workload  # noqa: E402

pytest.importorskip("accasim")


def _trace(name: str) -> tuple[swf.Trace, int]:
    if name.startswith("wide"):
        return workload.wide_trace(150, 100, (8, 64), seed=int(name.split()[-1])), 100
    file, _, window = name.partition(" ")
    first, _, count = window.partition(":")
    trace = swf.read(crossval_accasim.TRACES / file, "accasim")
    return swf.Trace(trace.jobs[int(first):int(first) + int(count)], trace.header), trace.max_nodes()


@pytest.mark.parametrize("name", ["lublin_256.swf 1981:300", "NASA-iPSC-1993-3.1-cln.swf.gz 0:400",
                                  "wide seed 1", "wide seed 2"])
def test_accasim_s_fifo_is_xce_s_strict_order_and_its_easy_is_its_two_rules(name: str) -> None:
    trace, nodes = _trace(name)
    row = crossval_accasim.compare(name, trace, nodes, faithful=False)
    assert row["fifo_vs_none"] == 0 and row["ebf_vs_its_rules"] == 0, row
    if name.startswith(("lublin", "wide")):
        assert row["ebf_vs_easy"], row  # (the rules matter on these)
