"""PNG plots of simulations (matplotlib): the wait-time CDF, utilization and queue length over time;
with a what-if, both runs side by side. Plots are for people: reports, not plots, are reproducible
byte for byte (a PNG holds the library's version)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from simulator.engine import Result


def write(runs: Sequence[tuple[str, Result]], out: Path) -> list[Path]:
    """One PNG per figure in `out` (made if missing); the paths written."""
    plt = _pyplot()
    out.mkdir(parents=True, exist_ok=True)
    written = []

    figure, axes = plt.subplots(figsize=(7, 4.5))
    for name, result in runs:
        waits = sorted((j.start_ms - j.submit_ms) / 1000 for j in result.finished)
        if waits:
            share = [(i + 1) / len(waits) for i in range(len(waits))]
            axes.step([max(w, 0.1) for w in waits], share, where="post", label=name)
    axes.set_xscale("log")
    axes.set_xlabel("wait (s, log scale)")
    axes.set_ylabel("share of jobs waiting at most that long")
    axes.set_title("Wait-time CDF")
    axes.grid(True, alpha=0.3)
    axes.legend()
    written.append(_save(figure, out / "wait_cdf.png", plt))

    figure, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for name, result in runs:
        if not result.samples:
            continue
        start = result.samples[0].time_ms
        hours = [(s.time_ms - start) / 3_600_000 for s in result.samples]
        top.plot(hours, [s.busy_slots / max(result.slots, 1) for s in result.samples], label=name, lw=0.8,
                 drawstyle="steps-post")
        bottom.plot(hours, [s.pending for s in result.samples], label=name, lw=0.8, drawstyle="steps-post")
    top.set_ylabel("utilization")
    top.set_ylim(0, 1.05)
    top.grid(True, alpha=0.3)
    top.legend()
    bottom.set_ylabel("jobs pending")
    bottom.set_xlabel("hours from the first submit")
    bottom.grid(True, alpha=0.3)
    figure.suptitle("Utilization and queue length over time")
    written.append(_save(figure, out / "over_time.png", plt))
    return written


def sweep(rows: Sequence[tuple[str, Mapping[str, Any]]], out: Path) -> Path:
    """A sweep's configurations side by side (their reports' overall figures): sweep.png in `out`."""
    plt = _pyplot()
    out.mkdir(parents=True, exist_ok=True)
    names = [name for name, _ in rows]
    figure, panels = plt.subplots(1, 3, figsize=(max(9, 0.6 * len(rows) + 6), 4.5))
    for axes, (key, title) in zip(panels, (("avg_wait_s", "average wait (s)"), ("avg_bsld", "average bounded "
                                           "slowdown"), ("utilization", "utilization")), strict=True):
        values = [figures["overall"][key] for _, figures in rows]
        axes.bar(range(len(rows)), values, color=["grey", *["C0"] * (len(rows) - 1)])
        if key != "utilization" and min(values) > 0 and max(values) > 50 * min(values):
            axes.set_yscale("log")  # (one configuration far off must not flatten the others)
        axes.set_xticks(range(len(rows)), names, rotation=60, ha="right", fontsize=8)
        axes.set_title(title)
        axes.grid(True, axis="y", alpha=0.3)
    figure.suptitle("Sweep: each configuration beside the workload as given (grey)")
    return _save(figure, out / "sweep.png", plt)


def _pyplot() -> Any:
    """matplotlib's pyplot, drawing to files (no display)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise RuntimeError("plots need matplotlib (pip install matplotlib)") from None
    return plt


def _save(figure: object, path: Path, plt: object) -> Path:
    figure.tight_layout()  # type: ignore[attr-defined]
    figure.savefig(path, dpi=110)  # type: ignore[attr-defined]
    plt.close(figure)  # type: ignore[attr-defined]
    return path
