"""`xce sim ... --sweep FILE`: the workload as given and each configuration of FILE (simulator/sweep.py),
each simulated in a process of its own, compared in one table (and a plot with `--plot DIR`).

With `--on-cluster` the same runs are a job array on the cluster `xce` talks to, one element a
configuration (element 0 the workload as given): each element runs `xce sim` (this Python, which the
cluster's hosts must have at the same path) with the same options and `--sweep-index I` on a copy of the
sweep file, its report (JSON) to `--out DIR` (an empty or new directory; default a new `xce-sweep-*`
in the current one; the hosts must see it and the trace, as a job's output file); `xce sim` waits for
the array to end, saying how far it is, and prints the same table from the elements' reports. So a
site's own cluster runs its what-ifs, as its users' jobs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from simulator import sweep

ARRAY_NAME = "xce-sweep"
POLL_S = 1.0
SAY_EVERY_S = 10.0  # how often the wait says how far the array is


def run(args: argparse.Namespace) -> int:
    try:
        configs = sweep.parse(args.sweep.read_text(encoding="utf-8"), str(args.sweep))
    except OSError as exc:
        print(f"xce sim: {args.sweep}: cannot read: {exc.strerror}", file=sys.stderr)
        return 2
    except sweep.SweepError as exc:
        print(f"xce sim: {exc}", file=sys.stderr)
        return 2
    refused = _refused(args, configs)
    if refused:
        print(f"xce sim: {refused}", file=sys.stderr)
        return 2
    if args.sweep_index is not None:  # one element of an array on a cluster
        if not 0 <= args.sweep_index <= len(configs):
            print(f"xce sim: --sweep-index {args.sweep_index}: 0 to {len(configs)}", file=sys.stderr)
            return 2
        figures = one(vars(args), None if args.sweep_index == 0 else configs[args.sweep_index - 1])
        print(json.dumps(figures, sort_keys=True))
        return 0 if "error" not in figures else 2
    if args.on_cluster:
        from cli import session

        return session.connected(args, lambda client, a: _on_cluster(client, a, configs), writes=True)
    # What each process needs is the command line: each reads the workload itself (nothing large is sent).
    runs: list[sweep.Config | None] = [None, *configs]
    workers = max(1, min(args.parallel or os.cpu_count() or 1, len(runs)))
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        reports = list(pool.map(one, [vars(args)] * len(runs), runs))
    return _shown(args, runs, reports)


def _refused(args: argparse.Namespace, configs: list[sweep.Config]) -> str | None:
    """Why the sweep cannot run (its workload unreadable, a configuration naming a queue it does not
    have), before anything runs."""
    from cli import simulate
    from simulator import recording_file, swf, whatif

    try:
        queues = [q.name for q in simulate._workload(args).queues]
    except (swf.SwfError, recording_file.RecordingError, ValueError) as exc:
        return str(exc)
    for config in configs:
        unknown = whatif.parse(list(config.sets)).unknown_queues(queues)
        if unknown:
            return (f"{config.name}: --set names queues the workload does not have: {', '.join(unknown)} (it "
                    f"has {', '.join(queues)})")
    return None


def one(options: dict[str, Any], config: sweep.Config | None) -> dict[str, Any]:
    """The report of one run: the workload of `options` (xce sim's), with the configuration's what-ifs."""
    from cli import simulate
    from simulator import counting, engine, recording_file, report, swf, whatif

    args = argparse.Namespace(**options)
    if config is not None:
        args.set, args.add_hosts = list(config.sets), config.add_hosts
        args.scale_arrivals = config.scale_arrivals
    else:
        args.set, args.add_hosts, args.scale_arrivals = [], None, None
    try:
        changes = whatif.parse(args.set)
        base = simulate._workload(args)
        w = simulate._what_if(base, args, changes) or base
        unknown = changes.unknown_queues([q.name for q in base.queues])
        if unknown:
            return {"error": f"--set names queues the workload does not have: {', '.join(unknown)}"}
        settings = engine.Settings(whatif=changes, ordering=simulate.ordering_of(args))
        result = counting.run(w, settings, faithful=args.faithful)
    except (whatif.WhatIfError, swf.SwfError, recording_file.RecordingError, ValueError,
            engine.SimulationError) as exc:
        return {"error": str(exc)}
    return report.report(result, w.source, w.notes)


def _shown(args: argparse.Namespace, runs: list[sweep.Config | None],
           reports: list[dict[str, Any]]) -> int:
    """The table of the runs that gave a report (the first must: it is what the others are compared
    with); each that did not, named on stderr (exit 1)."""
    names = [sweep.AS_GIVEN if c is None else c.name for c in runs]
    failed = [(name, r["error"]) for name, r in zip(names, reports, strict=True) if "error" in r]
    for name, error in failed:
        print(f"xce sim: {name}: {error}", file=sys.stderr)
    if "error" in reports[0]:
        return 1
    kept = [(name, c, r) for name, c, r in zip(names, runs, reports, strict=True) if "error" not in r]
    rows = [(name, r) for name, _, r in kept]
    if args.json:
        print(json.dumps({"configurations": [
            {"name": name, "options": [] if c is None else c.options(), "report": r} for name, c, r in kept],
            "failed": [name for name, _ in failed]}, sort_keys=True, indent=1))
    else:
        sys.stdout.write(sweep.table(rows))
    if args.plot is not None:
        from simulator import plots

        try:
            written = plots.sweep(rows, args.plot)
        except RuntimeError as exc:
            print(f"xce sim: {exc}", file=sys.stderr)
            return 1
        print(f"plot: {written}", file=sys.stderr)
    return 1 if failed else 0


def _on_cluster(client: Any, args: argparse.Namespace, configs: list[sweep.Config]) -> int:
    from xce.rules import array_spec
    from xce.v1 import api_pb2 as api

    if args.out:
        out = Path(args.out).resolve()
        out.mkdir(parents=True, exist_ok=True)
        if any(out.iterdir()):  # (an old report must not be read as this sweep's)
            print(f"xce sim: --out {out}: not empty", file=sys.stderr)
            return 2
    else:
        out = Path(tempfile.mkdtemp(prefix="xce-sweep-", dir=".")).resolve()
    copy = out / "sweep.txt"  # what the elements run, whatever becomes of the file meanwhile
    copy.write_text(args.sweep.read_text(encoding="utf-8"), encoding="utf-8")
    _, array = array_spec.parse_name(f"{ARRAY_NAME}[0-{len(configs)}]", lowest=0)
    # The element's index comes from its environment: the shell in front of xce sim reads it.
    command = ["/bin/sh", "-c", 'exec "$0" "$@" --sweep-index "$XCE_ARRAY_INDEX"', sys.executable, "-m",
               "cli", "sim", *element_options(args, copy)]
    where = str(out).replace("%", "%%")  # (an output path's % starts a pattern)
    spec = api.JobSpec(command=command, name=ARRAY_NAME, cwd=os.getcwd(), stdout_path=f"{where}/%I.json",
                       stderr_path=f"{where}/%I.err", stdout_overwrite=True, stderr_overwrite=True, slots=1)
    assert array is not None
    spec.array.CopyFrom(array)
    job = client.submit([spec]).jobs[0]
    total = len(configs) + 1
    print(f"Job array <{job.id}> of {total} simulations; their reports in {out}", file=sys.stderr)
    said = time.monotonic()
    try:
        while True:
            job = client.get_job(job.id)
            counts = list(job.array.counts) + [0] * 16
            ended = counts[api.DONE] + counts[api.EXIT]
            if ended >= total:
                break
            if time.monotonic() - said >= SAY_EVERY_S:
                said = time.monotonic()
                print(f"xce sim: {ended} of {total} ended, {counts[api.RUN]} running, {counts[api.PEND]} "
                      "pending", file=sys.stderr)
            time.sleep(POLL_S)
    except KeyboardInterrupt:
        print(f"xce sim: no longer waiting; the array runs on (`xce kill {job.id}` stops it), its reports "
              f"in {out}", file=sys.stderr)
        raise
    reports = []
    for index in range(len(configs) + 1):
        try:
            reports.append(json.loads((out / f"{index}.json").read_text(encoding="utf-8")))
        except (OSError, ValueError) as exc:
            error = (out / f"{index}.err").read_text(encoding="utf-8", errors="replace")[-500:] \
                if (out / f"{index}.err").exists() else ""
            reports.append({"error": f"element {index} left no report ({exc}) {error}".strip()})
    return _shown(args, [None, *configs], reports)


def element_options(args: argparse.Namespace, sweep_file: Path) -> list[str]:
    """xce sim's options for the workload (paths made absolute), as an element is to run it."""
    words = ["--sweep", str(sweep_file)]
    if args.swf is not None:
        words += ["--swf", str(Path(args.swf).resolve()), "--conventions", args.conventions]
    elif args.workload is not None:
        words += ["--workload", str(Path(args.workload).resolve())]
    else:
        words += ["--synthetic", str(args.synthetic), "--load", repr(args.load), "--seed", str(args.seed)]
    for option, value in (("--hosts", args.hosts), ("--backfill", args.backfill), ("--window", args.window)):
        if value:
            words += [option, str(value)]
    if args.faithful:
        words.append("--faithful")
    return words
