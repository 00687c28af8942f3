"""`xce record` and `xce sim`: record a cluster's history; re-run its passes, with what-ifs.

`xce record --out FILE` writes the committed history (every event since the
first) as a recording (xce/recording.py; docs/recording.md); `--from REV`
starts it at revision REV (the view then is its baseline); `--follow` starts
at the view now and records until stopped (Ctrl-C, SIGTERM) or `--until REV`.
The file is written as FILE.part, 0600 (it holds every job in full), and
renamed when complete. Cluster admins only (the Sync stream's permission).

`xce sim --replay FILE` re-runs every recorded pass on the view it read and
says whether its decisions came out the same; `--verify FILE` does the same
and exits 1 at the first pass whose decisions differ, printing it. `--set
KEY=VALUE` (simulator/whatif.py) changes the policy they run with.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from xce.client import Client
from xce.private import open_private


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("record", help="record the cluster's committed history to a file, for xce sim "
                                      "(cluster admins)")
    p.add_argument("--out", required=True, type=Path, help="the recording (JSON lines; docs/recording.md)")
    start = p.add_mutually_exclusive_group()
    start.add_argument("--from", dest="from_revision", type=int, default=0, metavar="REV",
                       help="start at this revision: the view then is the baseline (default: the first)")
    start.add_argument("--follow", action="store_true",
                       help="start at the view now and record every event until stopped (Ctrl-C)")
    p.add_argument("--until", type=int, default=0, metavar="REV", help="with --follow: stop at this revision")
    p.add_argument("--json", action="store_true", help="print the answer as JSON")

    p = sub.add_parser("sim", help="simulate a workload on the real scheduler, or re-run a recording's "
                                   "passes; what-ifs (no cluster needed)")
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
    p.add_argument("--load", type=float, default=0.8, help="synthetic: the offered load (default 0.8)")
    p.add_argument("--seed", type=int, default=1, help="synthetic: the generator's seed (default 1)")
    p.add_argument("--plot", type=Path, metavar="DIR", help="write PNG plots to DIR")
    p.add_argument("--interactive", action="store_true",
                   help="step the simulation from standard input: events, passes, the view, pending reasons, "
                        "snapshots and restores, what-ifs from any point ('help' lists the commands)")
    p.add_argument("--out", type=Path, help="with --replay: write the re-run batches here (JSON lines)")
    p.add_argument("--json", action="store_true", help="print the answer as JSON")


def record(client: Client, args: argparse.Namespace) -> int:
    from xce.recorder import Recorder

    if args.from_revision < 0 or args.until < 0:
        print("xce record: a revision is a whole number, 0 or more", file=sys.stderr)
        return 2
    if args.until and not args.follow:
        print("xce record: --until goes with --follow", file=sys.stderr)
        return 2
    target = args.out.absolute()
    part = Path(f"{target}.part")
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    with os.fdopen(open_private(part), "w", encoding="utf-8") as out:
        recorder = Recorder(client, out, stop)
        try:
            done = recorder.follow(args.until) if args.follow else recorder.history(args.from_revision)
        except BaseException:
            out.close()
            part.unlink(missing_ok=True)
            raise
    part.replace(target)
    answer = {"out": str(target), "from_revision": done.from_revision, "last_revision": done.last_revision,
              "events": done.events}
    if args.json:
        print(json.dumps(answer))
    else:
        print(f"recorded {done.events} events, revisions {done.from_revision + 1}-{done.last_revision}, "
              f"to {target}")
    return 0


def sim(args: argparse.Namespace) -> int:
    if args.replay is None and args.verify is None:
        from xce import cli_simulate

        return cli_simulate.run(args)
    from scheduler.picker import PickerError
    from simulator import replay, whatif
    from xce import recording

    path = args.replay or args.verify
    try:
        changes = whatif.parse(args.set)
        recorded = recording.read(path)
        result = replay.replay(recorded, changes, first_only=bool(args.verify))
    except (whatif.WhatIfError, recording.RecordingError, PickerError) as exc:
        print(f"xce sim: {exc}", file=sys.stderr)
        return 2
    if args.out is not None and args.replay:
        with open(args.out, "w", encoding="utf-8") as out:
            for each, batch in result.batches:
                out.write(json.dumps({"pass": each.number, "revision": each.revision,
                                      "batch": recording.as_json(batch)}, sort_keys=True) + "\n")
    first = result.first
    answer: dict[str, Any] = {
        "recording": str(path), "passes": result.passes, "checked": result.checked, "skipped": result.skipped,
        "identical": result.identical, "decisions": result.decisions, "divergent": len(result.divergences),
        "first_divergence": None if first is None else first.__dict__}
    if args.json:
        print(json.dumps(answer, sort_keys=True))
    else:
        verb = "verified" if args.verify else "re-ran"
        skipped = f"; {result.skipped} skipped (views before the recording's start)" if result.skipped else ""
        print(f"{verb} {result.checked} of {result.passes} recorded passes ({result.decisions} decisions) of "
              f"{path}: {result.identical} byte-identical{skipped}")
        if first is not None:
            print(f"pass {first.number} (committed at revision {first.revision}, on the view at revision "
                  f"{first.base_revision}) differs at decision {first.index + 1}:\n"
                  f"  recorded: {first.recorded}\n  re-run:   {first.replayed}")
    return 1 if args.verify and first is not None else 0
