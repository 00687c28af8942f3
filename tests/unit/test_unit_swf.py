"""SWF traces (simulator/swf.py): the shipped traces read, the cleaning rule of the published figures, and
bad input named by its line. Pure."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator import swf

TRACES = Path(__file__).resolve().parents[3] / "shared" / "traces"
LINE = "{id} {submit} -1 {run} {alloc} -1 -1 {req} {reqtime} -1 1 7 -1 -1 2 -1 -1 -1"


def job_line(id: int = 1, submit: int = 0, run: int = 100, alloc: int = 4, req: int = -1,
             reqtime: int = -1) -> str:
    return LINE.format(id=id, submit=submit, run=run, alloc=alloc, req=req, reqtime=reqtime)


def test_the_shipped_traces_read_with_their_machine_size() -> None:
    lublin = swf.read(TRACES / "lublin_256.swf")
    assert lublin.max_nodes() == 256 and not lublin.skipped
    assert len(lublin.jobs) + lublin.dropped_zero_run == 10_000
    assert [job.id for job in lublin.jobs] == sorted(job.id for job in lublin.jobs)
    assert all(job.estimate_s == job.run_s for job in lublin.jobs)  # no requested times: the run time
    nasa = swf.read(TRACES / "NASA-iPSC-1993-3.1-cln.swf.gz")
    assert nasa.max_nodes() == 128 and len(nasa.jobs) + nasa.dropped_zero_run + len(nasa.skipped) == 18_239


def test_the_cleaning_rule_of_the_published_figures() -> None:
    trace = swf.parse([
        "; MaxNodes: 64",
        job_line(id=3, submit=50, run=-1, alloc=2),        # a negative run time becomes 10 s
        job_line(id=1, submit=10, run=100, alloc=2, req=8, reqtime=3600),  # max(allocated, requested)
        job_line(id=2, submit=20, run=0, alloc=1),          # a zero run time: dropped
    ])
    assert trace.max_nodes() == 64 and trace.dropped_zero_run == 1
    first, third = trace.jobs
    assert (first.id, first.procs, first.estimate_s, first.run_s) == (1, 8, 3600, 100)
    assert (first.user, first.queue, first.line) == (7, 2, 3)
    assert (third.id, third.run_s, third.estimate_s) == (3, swf.NEGATIVE_RUN_S, swf.NEGATIVE_RUN_S)


def test_pyss_conventions_drop_jobs_without_a_limit_cut_runs_at_it_and_take_requested_processors() -> None:
    lines = [
        job_line(id=1, run=100, alloc=2, req=8, reqtime=3600),   # requested processors, not max(...)
        job_line(id=2, run=5000, alloc=4, req=4, reqtime=3600),  # killed at its limit: run 3600
        job_line(id=3, run=100, alloc=4, req=4, reqtime=-1),     # no requested time: dropped
        job_line(id=4, run=-1, alloc=4, req=4, reqtime=60),      # no run time: dropped (not 10 s)
        job_line(id=5, run=100, alloc=4, req=-1, reqtime=60),    # no requested processors: skipped
    ]
    pyss = swf.parse(lines, "t.swf", "pyss")
    assert [(j.id, j.procs, j.run_s, j.estimate_s) for j in pyss.jobs] == [
        (1, 8, 100, 3600), (2, 4, 3600, 3600)]
    assert pyss.dropped_zero_run == 2 and [line for line, _ in pyss.skipped] == [5]
    ours = swf.parse(lines, "t.swf")  # the published figures' rules keep all five
    assert [(j.id, j.procs, j.run_s) for j in ours.jobs] == [
        (1, 8, 100), (2, 4, 5000), (3, 4, 100), (4, 4, swf.NEGATIVE_RUN_S), (5, 4, 100)]
    with pytest.raises(swf.SwfError, match="unknown conventions"):
        swf.parse(lines, "t.swf", "accasim?")


def test_accasim_conventions_take_requested_else_allocated_processors_and_drop_runs_of_zero() -> None:
    lines = [
        job_line(id=1, run=100, alloc=2, req=8, reqtime=3600),   # requested processors
        job_line(id=2, run=100, alloc=16, req=4, reqtime=-1),    # requested, though fewer; run as estimate
        job_line(id=3, run=100, alloc=6, req=-1, reqtime=60),    # no requested processors: the allocated
        job_line(id=4, run=0, alloc=4, req=4, reqtime=60),       # no run time: dropped
        job_line(id=5, run=-1, alloc=4, req=4, reqtime=60),      # ... (not 10 s)
    ]
    accasim = swf.parse(lines, "t.swf", "accasim")
    assert [(j.id, j.procs, j.run_s, j.estimate_s) for j in accasim.jobs] == [
        (1, 8, 100, 3600), (2, 4, 100, 100), (3, 6, 100, 60)]
    assert accasim.dropped_zero_run == 2 and swf.ORDERING["accasim"] == "time"
    written = swf.parse(swf.lines(accasim), "again.swf", "accasim")  # what another simulator is given
    assert written.jobs == [swf.Job(j.id, j.submit_s, j.wait_s, j.run_s, j.procs, j.estimate_s, j.status,
                                    j.user, j.queue, line)
                            for j, line in zip(accasim.jobs, (1, 2, 3), strict=True)]


def test_a_job_without_a_processor_count_is_reported_and_skipped() -> None:
    trace = swf.parse([job_line(id=1), job_line(id=2, alloc=-3, req=-1)], "t.swf")
    assert [job.id for job in trace.jobs] == [1]
    assert trace.skipped == [(2, "job 2: no processor count (allocated -3, requested -1)")]


@pytest.mark.parametrize(("lines", "message"), [
    ([job_line(), "2 20 -1 100 4"], "t.swf:2: 5 fields, an SWF job line has 18"),
    ([job_line(), job_line(id=2).replace(" 100 ", " ten ")], "t.swf:2: 'ten' is not a number"),
    ([job_line(), job_line(id=1)], "t.swf:2: job 1 again (first on line 1)"),
    ([job_line(submit=-5)], "t.swf:1: job 1 has a negative submit time (-5)"),
    (["; MaxNodes: 8", ""], "t.swf: no job in the trace"),
    ([job_line(run=0)], "t.swf: no job in the trace (1 left out by the rlscheduler conventions)"),
])
def test_bad_input_is_named_by_its_line(lines: list[str], message: str) -> None:
    with pytest.raises(swf.SwfError) as caught:
        swf.parse(lines, "t.swf")
    assert str(caught.value) == message


def test_an_unreadable_or_empty_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(swf.SwfError, match="cannot read"):
        swf.read(tmp_path / "missing.swf")
    (tmp_path / "empty.swf").write_text("")
    with pytest.raises(swf.SwfError, match="no job in the trace"):
        swf.read(tmp_path / "empty.swf")
    (tmp_path / "broken.swf.gz").write_bytes(b"\x1f\x8b not really gzip")
    with pytest.raises(swf.SwfError, match="cannot read"):
        swf.read(tmp_path / "broken.swf.gz")
