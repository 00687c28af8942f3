"""The soak's figures: failovers, throughput, resyncs, memory; a summary and a timeline PNG."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from soak import checks
from soak.chaos import ChaosRecord
from soak.chaos import Failover as ChaosFailover
from soak.load import LoadRecord
from soak.observe import DispatchWatch

if TYPE_CHECKING:
    from soak.run import SoakConfig


def _stats(values: Sequence[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0}
    ordered = sorted(values)

    def rank(p: float) -> float:
        return round(ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)] * 1000, 1)

    return {"n": len(ordered), "p50_ms": rank(50), "p99_ms": rank(99), "max_ms": round(ordered[-1] * 1000, 1)}


_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) ")
# The hops of a failover, each the first such log line after the kill or cut, in order:
# a replica serves as the new leader; the scheduler's Sync stream to the old one ends
# (a kill: at once; a partition: when its keepalive goes unanswered); its stream resumes
# at the new leader; then the last of the workers joins it ("workers_joined": until then
# some freed slots are not seen). With the probe's first committed write and the first new dispatch
# (the dispatch watch), they say where a failover's time goes.
HOPS = {"elected": ("replica-", re.compile(r"controller\.leader: serving \(leadership")),
        "stream_lost": ("sched-", re.compile(r"sync: (?!resumed|snapshot)")),
        "resumed": ("sched-", re.compile(r"sync: (resumed from|snapshot of revision)"))}
WORKER_JOINED = re.compile(r": joined via ")
ALL_HOPS = (*HOPS, "workers_joined")


def _log_times(data: Path, prefix: str, pattern: re.Pattern[str]) -> list[float]:
    """Wall times of the log lines that match, from every daemon log named prefix*."""
    return sorted(t for path in data.glob(f"{prefix}*.log") for t in _times_in(path, pattern))


def _times_in(path: Path, pattern: re.Pattern[str]) -> list[float]:
    times = []
    for line in path.read_text(errors="replace").splitlines():
        stamp = _STAMP.match(line)
        if stamp and pattern.search(line):
            local = time.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S")
            times.append(time.mktime(local) + int(stamp.group(2)) / 1000)
    return times


def hop_delays(failovers: Sequence[ChaosFailover], data: Path) -> list[dict[str, float]]:
    """Per failover, each hop's delay from the kill or cut to its first log line (within 10 s)."""
    lines = {hop: _log_times(data, prefix, pattern) for hop, (prefix, pattern) in HOPS.items()}
    joins = [_times_in(path, WORKER_JOINED) for path in data.glob("worker-*.log")]
    out = []
    for failover in failovers:
        delays = {}
        for hop, times in lines.items():
            later = [t - failover.at for t in times if failover.at <= t < failover.at + 10]
            if later:
                delays[hop] = later[0]
        firsts = [next((t - failover.at for t in times if failover.at <= t < failover.at + 10), None)
                  for times in joins]
        if firsts and all(t is not None for t in firsts):
            delays["workers_joined"] = max(t for t in firsts if t is not None)
        out.append(delays)
    return out


def hops(failovers: Sequence[ChaosFailover], data: Path) -> dict[str, Any]:
    """Per hop, its delays' p50 and p99; and every failover's hops, with its write and dispatch."""
    each = hop_delays(failovers, data)
    out: dict[str, Any] = {hop: _stats([d[hop] for d in each if hop in d]) for hop in ALL_HOPS}
    out["samples_ms"] = []
    for delays, failover in zip(each, failovers, strict=True):
        ends = {"write": failover.write_s, "dispatch": failover.dispatch_s}
        out["samples_ms"].append({k: round(v * 1000) for k, v in {**delays, **ends}.items() if v is not None})
    return out


def figures(config: SoakConfig, started: float, load_end: float, drain_s: float, drained: bool,
            load: LoadRecord, chaos: ChaosRecord, watch: DispatchWatch, final: dict[int, checks.FinalJob],
            instances: Sequence[checks.Instance], data: Path) -> dict[str, Any]:
    for failover in chaos.failovers:
        if failover.dispatch_s is None:
            seen = watch.first_after(failover.at, failover.revision)
            failover.dispatch_s = None if seen is None else seen - failover.at
    kills = [f for f in chaos.failovers if f.kind == "kill"]
    cuts = [f for f in chaos.failovers if f.kind == "partition"]
    finished = sum(1 for j in final.values() if j.state in checks.FINISHED)
    span = load_end - started
    resyncs = {"snapshot": 0, "events": 0}
    for path in data.glob("sched-*.log"):
        text = path.read_text(errors="replace")
        resyncs["snapshot"] += len(re.findall(r"sync: snapshot of revision", text))
        resyncs["events"] += len(re.findall(r"sync: resumed from", text))
    return {
        "duration_s": round(span, 1), "drain_s": round(drain_s, 1), "drained": drained,
        "submits_acknowledged": len(load.acknowledged), "submits_unacknowledged": load.failed_submits,
        "jobs_finished": finished, "throughput_jobs_per_s": round(finished / span, 2) if span else None,
        "instances": len(instances), "kills_acknowledged": len(load.kills), "stops": len(load.stops),
        "holds": load.holds, "faults": chaos.kills,
        "failover_kill": {"write": _stats([f.write_s for f in kills if f.write_s is not None]),
                          "dispatch": _stats([f.dispatch_s for f in kills if f.dispatch_s is not None]),
                          "no_dispatch_seen": sum(1 for f in kills if f.dispatch_s is None),
                          "hops": hops(kills, data)},
        "failover_partition": {"write": _stats([f.write_s for f in cuts if f.write_s is not None]),
                               "dispatch": _stats([f.dispatch_s for f in cuts if f.dispatch_s is not None]),
                               "step_down": _stats([f.step_down_s for f in cuts
                                                    if f.step_down_s is not None]),
                               "no_step_down_seen": sum(1 for f in cuts if f.step_down_s is None),
                               "minority_writes": [f.minority_write or "?" for f in cuts],
                               "hops": hops(cuts, data)},
        "resyncs": resyncs,
        "chaos_errors": chaos.errors[:20], "load_errors": len(load.errors),
    }


def fault_figures(chaos: ChaosRecord) -> dict[str, Any]:
    """Per fault kind beyond kills: how many, on what, and the failovers they caused."""
    kinds: dict[str, Any] = {}
    for event in chaos.events:
        kind = kinds.setdefault(event.kind, {"n": 0, "targets": {}, "recovered": [], "events": []})
        kind["n"] += 1
        kind["targets"][event.target] = kind["targets"].get(event.target, 0) + 1
        if event.recovered_s is not None:
            kind["recovered"].append(event.recovered_s)
        kind["events"].append({"target": event.target, "at": round(event.at, 3),
                               "length_s": round(event.end - event.at, 2) if event.end else None,
                               "detail": event.detail,
                               "recovered_s": _rounded(event.recovered_s)})
    for name, kind in kinds.items():
        kind["recovered"] = _stats(kind["recovered"])
        failovers = [f for f in chaos.failovers if f.kind == name]
        kind["failover_write"] = _stats([f.write_s for f in failovers if f.write_s is not None])
        kind["failover_dispatch"] = _stats([f.dispatch_s for f in failovers if f.dispatch_s is not None])
    return kinds


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def availability(ops: Sequence[Any], bin_s: float = 1.0) -> dict[str, Any]:
    """The share of time writes succeeded: of the seconds in which a submit was tried, those in
    which one was acknowledged (an unknown or refused one is not)."""
    tried: set[int] = set()
    served: set[int] = set()
    for op in ops:
        if op.kind != "submit":
            continue
        tried.add(int(op.invoke_ns / 1e9 / bin_s))
        if op.status == "ok" and op.complete_ns is not None:
            served.add(int(op.complete_ns / 1e9 / bin_s))
    share = len(served & tried) / len(tried) if tried else None
    worst, last = 0.0, None
    acked = sorted(o.complete_ns for o in ops if o.kind == "submit" and o.status == "ok" and o.complete_ns)
    for done in acked:
        if last is not None:
            worst = max(worst, (done - last) / 1e9)
        last = done
    return {"write_seconds": len(tried), "served_share": None if share is None else round(share, 4),
            "longest_gap_s": round(worst, 2),
            "operations": len(ops), "unknown": sum(1 for o in ops if o.status == "unknown"),
            "unknown_share": round(sum(1 for o in ops if o.status == "unknown") / len(ops), 4) if ops else 0}


def _fault_lines(result: dict[str, Any]) -> list[str]:
    lines = []
    linear = result.get("linearizability")
    if linear:
        lines.append(f"history: {linear['operations']} operations checked in {linear['partitions']} "
                     f"partitions, {linear['elapsed_s']} s: linearizable {linear['linearizable']}")
    avail = result.get("availability")
    if avail:
        lines.append(f"availability: writes served in {avail['served_share']:.1%} of the "
                     f"{avail['write_seconds']} seconds tried, longest gap {avail['longest_gap_s']} s; "
                     f"{avail['unknown']} of {avail['operations']} operations unknown "
                     f"({avail['unknown_share']:.2%})" if avail["served_share"] is not None else
                     "availability: no write tried")
    for kind, figures in sorted(result.get("fault_kinds", {}).items()):
        targets = ", ".join(f"{t} {n}" for t, n in sorted(figures["targets"].items()))
        recovered = figures["recovered"]
        lines.append(f"{kind} x{figures['n']} ({targets}): first write after it "
                     + (f"p50 {figures['failover_write']['p50_ms']} ms" if figures["failover_write"].get("n")
                        else "-")
                     + (f"; victim caught up p50 {recovered['p50_ms']} ms, max {recovered['max_ms']} ms"
                        if recovered.get("n") else ""))
    return lines


def summary(result: dict[str, Any]) -> str:
    v = result["verdict"]
    fk, fp = result["failover_kill"], result["failover_partition"]

    def line(name: str, stats: dict[str, Any]) -> str:
        if not stats.get("n"):
            return f"  {name}: none measured"
        return (f"  {name}: p50 {stats['p50_ms']} ms, p99 {stats['p99_ms']} ms, max {stats['max_ms']} ms "
                f"(n={stats['n']})")

    def hop_lines(kind: dict[str, Any]) -> list[str]:
        """The hops' p50s in order, then the two measured ends (all from the fault)."""
        if not kind["dispatch"].get("n"):
            return []
        steps = [(hop, kind["hops"][hop]) for hop in ALL_HOPS] + [("write", kind["write"]),
                                                              ("dispatch", kind["dispatch"])]
        return ["  hops, p50 from the fault: " + ", ".join(
            f"{hop} {stats['p50_ms']:.0f} ms" for hop, stats in sorted(
                ((h, st) for h, st in steps if st.get("n")), key=lambda item: item[1]["p50_ms"]))]

    drain = f"+{result['drain_s']} s drain" + ("" if result["drained"] else ", NOT drained")
    resyncs = result["resyncs"]
    lines = [
        f"soak: {'PASS' if v['ok'] else 'FAIL'} -- linearizable: {v.get('linearizable', '?')}, "
        f"{v['lost']} lost, {v.get('created_twice', 0)} created twice, {v['unfinished']} unfinished "
        f"{v['unfinished_states'] or ''}, {v['duplicated']} duplicated, "
        f"{v['over_committed_hosts']} over-committed hosts, {v['kills_not_effective']} kills and "
        f"{v['stops_not_effective']} stops without effect, memory growth: {v['memory_growth'] or 'none'}",
        f"ran {result['duration_s']} s ({drain}): "
        f"{result['submits_acknowledged']} submits acknowledged, {result['jobs_finished']} jobs finished "
        f"({result['throughput_jobs_per_s']}/s), {result['instances']} instances, "
        f"{result['kills_acknowledged']} kills, {result['stops']} stops, {result['holds']} holds",
        f"faults: {result['faults']}",
        "leader kill -> first committed write / first new dispatch:",
        line("write", fk["write"]), line("dispatch", fk["dispatch"]),
        *hop_lines(fk),
        "partition of the leader -> write / dispatch / old leader steps down:",
        line("write", fp["write"]), line("dispatch", fp["dispatch"]), line("step down", fp["step_down"]),
        *hop_lines(fp),
        f"  a submit to the cut-off leader: {', '.join(fp['minority_writes']) or '-'}; "
        f"minority writes committed: {v['minority_commits']}",
        f"scheduler resyncs: {resyncs['snapshot']} by snapshot, {resyncs['events']} by events",
        *_fault_lines(result),
    ]
    if v.get("fault_failures"):
        lines.append("fault failures: " + "; ".join(v["fault_failures"]))
    if v.get("too_many_unknown"):
        lines.append("too many operations with an unknown outcome (--max-unknown)")
    if v["examples"] and not v["ok"]:
        lines.append(f"examples: {v['examples']}")
    return "\n".join(lines)


FAULT_COLOURS = {"kill": "red", "partition": "purple", "pause": "orange", "host-reboot": "brown",
                 "disk-full": "black", "fsync-stall": "olive", "slow-disk": "yellowgreen",
                 "power-loss": "darkred", "clock-jump": "teal", "clock-skew": "cyan", "netem": "blue"}


def timeline(path: Path, started: float, instances: Sequence[checks.Instance],
             leaders: Sequence[tuple[float, int]], chaos: ChaosRecord) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    changes = sorted([(i.start_ms / 1000 - started, 1) for i in instances]
                     + [(i.end_ms / 1000 - started, -1) for i in instances if i.end_ms is not None])
    xs, ys, running = [0.0], [0], 0
    for t, delta in changes:
        running += delta
        xs.append(t)
        ys.append(running)
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(12, 6), height_ratios=(3, 1))
    top.step(xs, ys, where="post", linewidth=0.8, label="running instances")
    for failover in chaos.failovers:
        at = failover.at - started
        colour = FAULT_COLOURS.get(failover.kind, "grey")
        top.axvline(at, color=colour, linewidth=0.6, alpha=0.7)
        if failover.write_s is not None:
            top.axvspan(at, at + failover.write_s, color=colour, alpha=0.15)
    marked: set[str] = set()
    for event in chaos.events:  # each fault beyond kills as a band along the bottom, its own colour
        colour = FAULT_COLOURS.get(event.kind, "grey")
        end = (event.end or event.at + 1.0) - started
        top.axvspan(event.at - started, end, ymin=0.0, ymax=0.06, color=colour, alpha=0.8,
                    label=event.kind if event.kind not in marked else None)
        marked.add(event.kind)
    if marked:
        top.legend(loc="upper right", fontsize="small", title="faults (bands)")
    top.set_ylabel("running instances")
    top.set_title("XCE soak: running instances; leader kills (red), partitions (purple), other faults "
                  "(bands); shaded until the first committed write")
    bottom.step([t - started for t, _ in leaders], [leader for _, leader in leaders], where="post")
    bottom.set_yticks([0, 1, 2, 3], ["none", "1", "2", "3"])
    bottom.set_ylabel("leader")
    bottom.set_xlabel("seconds")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
