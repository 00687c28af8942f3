"""A failing history drawn: a self-contained HTML page (SVG, hover text) and a PNG (matplotlib).

One row per client; each operation a bar from its invocation to its
completion (an unknown one runs to the right edge, hatched); the operations
of the failing sub-history are highlighted; the longest partial
linearization is drawn as numbered points joined in order, each inside its
operation's interval. Every text is escaped: job names are user input.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from soak.linear.checker import Model, Operation

ROW_PX = 28
WIDTH_PX = 1100
LEFT_PX = 150  # the clients' names
MAX_OPS_DRAWN = 2000  # a bigger history is cut to the operations around the failing ones


@dataclass(frozen=True)
class Bar:
    op: Operation
    row: int
    start: float  # 0..1 of the time axis
    end: float
    failing: bool
    order: int | None  # its place in the longest linearization


def layout(context: Sequence[Operation], failing: Sequence[Operation],
           linearization: Sequence[Operation]) -> tuple[list[str], list[Bar], list[tuple[float, int]]]:
    """Rows (clients), bars, and the linearization's points (x in 0..1, row), in order."""
    failing_ids = {op.index for op in failing}
    ops = list(context)[:MAX_OPS_DRAWN]
    clients = sorted({op.client for op in ops})
    row_of = {client: row for row, client in enumerate(clients)}
    times = [t for op in ops for t in (op.call, op.ret) if math.isfinite(t)]
    low, high = (min(times), max(times)) if times else (0.0, 1.0)
    span = (high - low) or 1.0

    def x(t: float) -> float:
        return 1.0 if t == math.inf else 0.0 if t == -math.inf else (t - low) / span * 0.95

    order = {op.index: n for n, op in enumerate(linearization, start=1)}
    bars = [Bar(op, row_of[op.client], x(op.call), x(op.ret) if op.ret != math.inf else 1.0,
                op.index in failing_ids, order.get(op.index)) for op in ops]
    points, last = [], 0.0
    for op in linearization:
        start, end = x(op.call), x(op.ret)
        point = min(max(last, start), end)
        points.append((point, row_of.get(op.client, 0)))
        last = point
    return clients, bars, points


def to_html(model: Model, context: Sequence[Operation], failing: Sequence[Operation],
            linearization: Sequence[Operation], title: str) -> str:
    clients, bars, points = layout(context, failing, linearization)
    width = WIDTH_PX - LEFT_PX
    height = ROW_PX * (len(clients) + 1)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH_PX}" height="{height}">']
    for row, client in enumerate(clients):
        y = ROW_PX * row + ROW_PX // 2
        parts.append(f'<text x="4" y="{y + 4}" class="client">{html.escape(client)}</text>')
        parts.append(f'<line x1="{LEFT_PX}" x2="{WIDTH_PX}" y1="{y}" y2="{y}" class="lane"/>')
    for bar in bars:
        x1 = LEFT_PX + bar.start * width
        x2 = max(LEFT_PX + bar.end * width, x1 + 3)
        y = ROW_PX * bar.row + 6
        cls = "bar failing" if bar.failing else "bar"
        if bar.op.unknown:
            cls += " unknown"
        hover = html.escape(_hover(model, bar.op))
        parts.append(f'<rect x="{x1:.1f}" y="{y}" width="{x2 - x1:.1f}" height="{ROW_PX - 12}" '
                     f'class="{cls}"><title>{hover}</title></rect>')
    if points:
        path = " ".join(f"{LEFT_PX + px * width:.1f},{ROW_PX * row + ROW_PX // 2}" for px, row in points)
        parts.append(f'<polyline points="{path}" class="linearization"/>')
        for n, (px, row) in enumerate(points, start=1):
            cx, cy = LEFT_PX + px * width, ROW_PX * row + ROW_PX // 2
            parts.append(f'<circle cx="{cx:.1f}" cy="{cy}" r="7" class="point"><title>linearized #{n}</title>'
                         f'</circle><text x="{cx - 3:.1f}" y="{cy + 3}" class="number">{n}</text>')
    parts.append("</svg>")
    rows = "".join(f"<tr><td>{n}</td><td>{html.escape(op.client)}</td>"
                   f"<td>{html.escape(model.describe_operation(op.input, op.output))}</td></tr>"
                   for n, op in enumerate(linearization, start=1))
    failing_rows = "".join(f"<li>{html.escape(_hover(model, op))}</li>" for op in failing)
    return _PAGE.format(title=html.escape(title), svg="\n".join(parts), rows=rows, failing=failing_rows)


def _hover(model: Model, op: Operation) -> str:
    ret = "never (unknown)" if op.unknown else f"{op.ret:.0f}"
    return (f"#{op.index} {op.client}: {model.describe_operation(op.input, op.output)}\n"
            f"invoked {op.call:.0f}, completed {ret}\ninput {op.input!r}\noutput {op.output!r}")


_PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: sans-serif; font-size: 13px; }}
.client {{ font-size: 12px; }}
.lane {{ stroke: #ddd; }}
.bar {{ fill: #9ab; stroke: #567; }}
.bar.failing {{ fill: #e66; stroke: #a22; }}
.bar.unknown {{ fill-opacity: 0.35; stroke-dasharray: 4 2; }}
.linearization {{ fill: none; stroke: #236; stroke-width: 1.5; }}
.point {{ fill: #fff; stroke: #236; }}
.number {{ font-size: 9px; }}
</style></head><body>
<h1>{title}</h1>
<p>Bars: operations from invocation to completion (hatched: outcome unknown). Red: the failing
sub-history. Numbered points: the longest partial linearization found, in order; the next operation
cannot be linearized after it.</p>
{svg}
<h2>Longest linearization</h2><table>{rows}</table>
<h2>Failing sub-history</h2><ul>{failing}</ul>
</body></html>
"""


def to_png(model: Model, context: Sequence[Operation], failing: Sequence[Operation],
           linearization: Sequence[Operation], title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    clients, bars, points = layout(context, failing, linearization)
    figure, axes = plt.subplots(figsize=(12, 1 + 0.4 * len(clients)))
    for bar in bars:
        color = "#e66" if bar.failing else "#9ab"
        axes.barh(bar.row, max(bar.end - bar.start, 0.003), left=bar.start, height=0.5, color=color,
                  alpha=0.4 if bar.op.unknown else 1.0, hatch="//" if bar.op.unknown else None,
                  edgecolor="#555")
        if bar.failing and len(bars) <= 60:
            axes.text(bar.start, bar.row + 0.3, model.describe_operation(bar.op.input, bar.op.output),
                      fontsize=6)
    if points:
        axes.plot([p for p, _ in points], [r for _, r in points], "o-", color="#236", markersize=4)
    axes.set_yticks(range(len(clients)), labels=clients)
    axes.set_xlabel("time (scaled); right edge: never")
    axes.set_title(title)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def render(model: Model, context: Sequence[Operation], failing: Sequence[Operation],
           linearization: Sequence[Operation], out: Path, title: str = "linearizability violation") -> None:
    """DIR/violation.html and DIR/violation.png."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "violation.html").write_text(to_html(model, context, failing, linearization, title),
                                        encoding="utf-8")
    to_png(model, context, failing, linearization, title, out / "violation.png")
