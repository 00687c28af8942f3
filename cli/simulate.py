"""`xce sim`: a workload (`--swf`, `--synthetic`, `--workload`) through the real scheduler on a virtual
clock; a recording's passes (`--replay`, `--verify`) are cli/recordings.py's.

The workload runs as given; with what-ifs (`--set`, `--add-hosts`,
`--scale-arrivals`) it runs a second time with them, and both runs' figures
are printed side by side (and plotted with `--plot DIR`). The figures are the
same bytes for the same input and options (plots excepted); a progress line
goes to the terminal (stderr) on runs longer than a couple of seconds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from simulator import whatif, workload

PROGRESS_AFTER_S = 2.0


def declare_sim(p: argparse.ArgumentParser) -> None:
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--swf", type=Path, metavar="FILE", help="simulate an SWF trace (.swf or .swf.gz)")
    what.add_argument("--workload", type=Path, metavar="FILE",
                      help="simulate the jobs of a recording (xce record) on its hosts and queues")
    what.add_argument("--synthetic", type=int, metavar="JOBS",
                      help="simulate a synthetic trace of JOBS jobs (with --hosts, --load, --seed)")
    what.add_argument("--replay", type=Path, metavar="FILE",
                      help="re-run every recorded pass on the view it read; say what came out differently")
    what.add_argument("--verify", type=Path, metavar="FILE",
                      help="re-run every recorded pass; exit 1 at the first whose decisions differ")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a what-if: scheduler.picker, scheduler.max_dispatches, queue.NAME.picker, "
                        "queue.NAME.backfill, queue.NAME.priority, queue.NAME.slot_limit (repeat it)")
    p.add_argument("--add-hosts", metavar="NxS", help="a what-if: N more hosts of S slots each")
    p.add_argument("--scale-arrivals", type=float, metavar="F",
                   help="a what-if: jobs arrive F times as often (1.5: the same jobs in 2/3 of the time)")
    p.add_argument("--hosts", metavar="N[xS]",
                   help="the machine: N hosts of S slots (default: an SWF trace's MaxNodes x 1; synthetic "
                        "1000x16)")
    p.add_argument("--backfill", choices=("any", "none", "easy", "end_before", "conservative"),
                   help="the queue's backfill for an SWF or synthetic trace (default: any)")
    p.add_argument("--window", metavar="FIRST:COUNT", help="only COUNT jobs of an SWF trace from index FIRST")
    p.add_argument("--conventions", choices=("rlscheduler", "pyss", "accasim"), default="rlscheduler",
                   help="how an SWF trace's jobs are prepared, as the simulator whose figures are to be "
                        "reproduced does (docs/SIMULATION.md; default rlscheduler)")
    p.add_argument("--load", type=float, default=0.8, help="synthetic: the offered load (default 0.8)")
    p.add_argument("--seed", type=int, default=1, help="synthetic: the generator's seed (default 1)")
    p.add_argument("--plot", type=Path, metavar="DIR", help="write PNG plots to DIR")
    p.add_argument("--interactive", action="store_true",
                   help="step the simulation from standard input: events, passes, the view, pending reasons, "
                        "snapshots and restores, what-ifs from any point ('help' lists the commands)")
    p.add_argument("--sweep", type=Path, metavar="FILE",
                   help="many what-ifs of the workload, one a line (a name, then --set/--add-hosts/"
                        "--scale-arrivals), each in a process of its own: one table (docs/SIMULATION.md)")
    p.add_argument("--parallel", type=int, default=0, metavar="N",
                   help="with --sweep: processes at once (default: one a CPU)")
    p.add_argument("--on-cluster", action="store_true",
                   help="with --sweep: run them as a job array on the cluster, gather the same table")
    p.add_argument("--sweep-index", type=int, help=argparse.SUPPRESS)  # an element of --on-cluster's array
    p.add_argument("--faithful", action="store_true",
                   help="every event through the real apply and scheduler, even where counting slots gives "
                        "the same results faster (one-slot hosts, one queue: docs/SIMULATION.md)")
    p.add_argument("--out", type=Path, help="with --replay: write the re-run batches here (JSON lines); with "
                                           "--sweep --on-cluster: where the elements write their reports")
    p.add_argument("--json", action="store_true", help="print the answer as JSON")


def run_sim(args: argparse.Namespace) -> int:
    if args.sweep is not None:
        return _sweep(args)
    if args.on_cluster or args.sweep_index is not None or args.parallel:
        print("xce sim: --on-cluster and --parallel are for --sweep", file=sys.stderr)
        return 2
    if args.replay is None and args.verify is None:
        return simulate(args)
    from cli import recordings

    return recordings.replay(args)


def _sweep(args: argparse.Namespace) -> int:
    from cli import sweep

    if args.replay is not None or args.verify is not None or args.interactive:
        print("xce sim: --sweep runs a workload (--swf, --synthetic or --workload), not with --replay, "
              "--verify or --interactive", file=sys.stderr)
        return 2
    if args.set or args.add_hosts or args.scale_arrivals:
        print("xce sim: with --sweep, the what-ifs are the sweep file's (one configuration a line)",
              file=sys.stderr)
        return 2
    if args.parallel < 0:
        print("xce sim: --parallel: 1 or more", file=sys.stderr)
        return 2
    return sweep.run(args)


def simulate(args: argparse.Namespace) -> int:
    """`xce sim --swf | --synthetic | --workload`: run it, and again with the what-ifs if any."""
    # The simulator (the controller's state machine, the scheduler) only once a simulation runs:
    # not for building the parser, nor for --replay.
    from simulator import counting, engine, recording_file, report, swf, whatif

    try:
        changes = whatif.parse(args.set)
        base = _workload(args)
        changed = _what_if(base, args, changes)
    except (whatif.WhatIfError, swf.SwfError, recording_file.RecordingError, ValueError) as exc:
        print(f"xce sim: {exc}", file=sys.stderr)
        return 2
    unknown = changes.unknown_queues([q.name for q in base.queues])
    if unknown:
        print(f"xce sim: --set names queues the workload does not have: {', '.join(unknown)} (it has "
              f"{', '.join(q.name for q in base.queues)})", file=sys.stderr)
        return 2
    if not base.jobs:
        print("xce sim: the workload has no jobs", file=sys.stderr)
        return 2
    ordering = ordering_of(args)
    if args.interactive:  # the workload with its what-ifs from the start; more with `set`
        from cli import interactive_sim

        return interactive_sim.serve(engine.Engine(changed or base, engine.Settings(whatif=changes,
                                                                                    ordering=ordering)))
    try:
        runs = [("as given", base, engine.Settings(ordering=ordering))]
        if changed is not None:
            runs.append(("what-if", changed, engine.Settings(whatif=changes, ordering=ordering)))
        results = [(name, w, counting.run(w, settings, _progress(name), args.faithful))
                   for name, w, settings in runs]
    except engine.SimulationError as exc:
        print(f"xce sim: {exc}", file=sys.stderr)
        return 1
    figures = [(name, report.report(result, w.source, w.notes)) for name, w, result in results]
    if args.json:
        out: dict[str, Any] = figures[0][1] if len(figures) == 1 else {
            "as_given": figures[0][1], "what_if": figures[1][1], "changes": _changes(args)}
        print(json.dumps(out, sort_keys=True, indent=1))
    else:
        for name, each in figures:
            if len(figures) > 1:
                print(f"== {name}" + (f": {'; '.join(_changes(args))}" if name == "what-if" else ""))
            sys.stdout.write(report.as_text(each))
        if len(figures) > 1:
            a, b = figures[0][1]["overall"], figures[1][1]["overall"]
            print(f"what-if against as given: avg wait {_delta(a['avg_wait_s'], b['avg_wait_s'])}, "
                  f"avg bsld {_delta(a['avg_bsld'], b['avg_bsld'])}, utilization "
                  f"{a['utilization']:.4f} -> {b['utilization']:.4f}")
    if args.plot is not None:
        from simulator import plots

        try:
            written = plots.write([(name, result) for name, _, result in results], args.plot)
        except RuntimeError as exc:
            print(f"xce sim: {exc}", file=sys.stderr)
            return 1
        print("plots: " + ", ".join(str(p) for p in written), file=sys.stderr)
    return 0


def ordering_of(args: argparse.Namespace) -> Literal["each", "time"]:
    """When passes run: as the conventions' simulator runs them (an SWF trace's), else after each event."""
    from simulator import swf

    return swf.ORDERING[args.conventions] if args.swf is not None else "each"


def _workload(args: argparse.Namespace) -> workload.Workload:
    from simulator import recording_file, swf, workload
    from xce.v1 import api_pb2 as api

    if args.synthetic is not None:
        count, slots = workload.hosts_option(args.hosts or "1000x16")
        queue = api.Queue(name=workload.DEFAULT_QUEUE, backfill=_backfill(args))
        return workload.synthetic(args.synthetic, count, slots, args.load, args.seed, queue)
    if args.swf is not None:
        trace = swf.read(args.swf, args.conventions)
        if not trace.jobs:
            raise ValueError(f"{args.swf}: no jobs")
        if args.window:
            first, count = _window(args.window)
            trace = swf.Trace(trace.jobs[first:first + count], trace.header, trace.skipped,
                              trace.dropped_zero_run)
        hosts = workload.host_specs(*workload.hosts_option(args.hosts)) if args.hosts else []
        queue = api.Queue(name=workload.DEFAULT_QUEUE, backfill=_backfill(args))
        return workload.from_swf(trace, str(args.swf), hosts, queue)
    if args.hosts or args.backfill:
        raise ValueError("--hosts and --backfill are for SWF and synthetic traces (a recording has its own)")
    return workload.from_recording(recording_file.read(args.workload), str(args.workload))


def _what_if(base: workload.Workload, args: argparse.Namespace,
             changes: whatif.WhatIf) -> workload.Workload | None:
    from simulator import workload

    if not (changes or args.add_hosts or args.scale_arrivals):
        return None
    changed = base
    if args.add_hosts:
        changed = workload.more_hosts(changed, *workload.hosts_option(args.add_hosts))
    if args.scale_arrivals:
        changed = workload.scaled_arrivals(changed, args.scale_arrivals)
    return changed


def _window(text: str) -> tuple[int, int]:
    first, _, count = text.partition(":")
    try:
        a, b = int(first), int(count)
    except ValueError:
        raise ValueError(f"--window {text!r}: FIRST:COUNT, whole numbers") from None
    if a < 0 or b <= 0:
        raise ValueError(f"--window {text!r}: FIRST 0 or more, COUNT above 0")
    return a, b


def _backfill(args: argparse.Namespace) -> str:
    return "" if args.backfill in (None, "any") else str(args.backfill)


def _changes(args: argparse.Namespace) -> list[str]:
    said = [f"--set {item}" for item in args.set]
    if args.add_hosts:
        said.append(f"--add-hosts {args.add_hosts}")
    if args.scale_arrivals:
        said.append(f"--scale-arrivals {args.scale_arrivals}")
    return said


def _delta(before: float, after: float) -> str:
    if before == 0:
        return f"{before:.2f} -> {after:.2f}"
    return f"{before:.2f} -> {after:.2f} ({100 * (after - before) / before:+.1f} %)"


def _progress(name: str) -> Any:
    if not sys.stderr.isatty():
        return None
    began = time.monotonic()
    shown = [0.0]

    def tick(done: int, total: int, now_ms: int) -> None:
        elapsed = time.monotonic() - began
        if elapsed < PROGRESS_AFTER_S or elapsed - shown[0] < 0.5 and done < total:
            return
        shown[0] = elapsed
        width = 30
        filled = width * done // max(total, 1)
        sys.stderr.write(f"\r{name}: [{'#' * filled}{'.' * (width - filled)}] {done}/{total} jobs ended, "
                         f"{done / elapsed:.0f} jobs/s")
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()

    return tick
