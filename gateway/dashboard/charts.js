// The dashboard's pictures: line charts of the last hour (uPlot, vendor/), the host grid and a job's
// timeline (plain DOM). Sizes and positions are set through element.style (the CSSOM), which the
// Content-Security-Policy allows; no style attribute or element is ever written.
"use strict";

const PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
  "#17becf", "#ff7f0e"];
const charts = new Map();  // element id -> its uPlot, replaced when the series change

// A line chart into the element `id`: x the minute marks (ms, as strings), one line per named series.
function lineChart(id, timesMs, named, unit) {
  const target = document.getElementById(id);
  const names = Object.keys(named);
  const xs = timesMs.map((t) => Number(t) / 1000);
  const data = [xs, ...names.map((n) => named[n])];
  const shape = names.join("\n");
  const known = charts.get(id);
  if (known && known.shape === shape) { known.plot.setData(data); return; }
  if (known) known.plot.destroy();
  target.replaceChildren();
  if (names.length === 0) { target.textContent = "No jobs in the last hour."; charts.delete(id); return; }
  const width = Math.max(280, Math.min(target.clientWidth || 420, 640));
  const options = {
    width, height: 200,
    scales: { x: { time: true }, y: { range: (u, min, max) => [0, Math.max(1, max)] } },
    series: [{}, ...names.map((name, i) => ({ label: name, stroke: PALETTE[i % PALETTE.length], width: 2,
      value: (u, v) => (v === null || v === undefined ? "-" : v + (unit || "")) }))],
    axes: [{}, { values: (u, ticks) => ticks.map((v) => v + (unit || "")) }],
  };
  charts.set(id, { shape, plot: new uPlot(options, data, target) });
}

// The hosts as a grid: a cell per host, coloured by state and by how many of its slots are used.
function hostGrid(id, grid) {
  const list = document.getElementById(id);
  list.replaceChildren(...grid.map(([name, status, closed, slots, used, load]) => {
    const cell = document.createElement("li");
    const kind = closed ? "st-closed" : status === "HOST_OK" ? "st-ok" : "st-unavail";
    const level = slots > 0 ? Math.min(4, Math.ceil((4 * used) / slots)) : 0;
    cell.className = `cell ${kind} load-${level}`;
    cell.textContent = name;
    const said = `${name}: ${closed ? "closed, " : ""}${status === "HOST_OK" ? "up" : "unavailable"}, ` +
      `${used} of ${slots} slots used` + (load >= 0 ? `, load ${load.toFixed(2)}` : "");
    cell.title = said;
    cell.setAttribute("aria-label", said);
    return cell;
  }));
}

// A job's timeline: one bar, a segment per state from each change to the next (the last to its end,
// or now), widths in proportion to time.
function timelineBar(id, steps, untilMs) {
  const bar = document.getElementById(id);
  bar.replaceChildren();
  if (steps.length === 0) return;
  const start = steps[0].time;
  const span = Math.max(1, untilMs - start);
  steps.forEach((step, i) => {
    const end = i + 1 < steps.length ? steps[i + 1].time : untilMs;
    const part = document.createElement("span");
    part.className = "segment seg-" + step.state;
    part.style.width = `${Math.max(0.5, (100 * (end - step.time)) / span)}%`;
    part.textContent = step.state;
    part.title = `${step.state} ${step.label || ""}`.trim();
    bar.append(part);
  });
}

window.xceCharts = { lineChart, hostGrid, timelineBar };
