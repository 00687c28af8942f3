"""`xce record` and `xce sim --replay|--verify`: record a cluster's history; re-run its passes,
with what-ifs.

`xce record --out FILE` writes the committed history (every event since the
first) as a recording (simulator/recording_file.py; docs/recording.md); `--from REV`
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

from client.channel import Client
from xce.private import open_private


def declare_record(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, type=Path, help="the recording (JSON lines; docs/recording.md)")
    start = p.add_mutually_exclusive_group()
    start.add_argument("--from", dest="from_revision", type=int, default=0, metavar="REV",
                       help="start at this revision: the view then is the baseline (default: the first)")
    start.add_argument("--follow", action="store_true",
                       help="start at the view now and record every event until stopped (Ctrl-C)")
    p.add_argument("--until", type=int, default=0, metavar="REV", help="with --follow: stop at this revision")
    p.add_argument("--json", action="store_true", help="print the answer as JSON")


def run_record(client: Client, args: argparse.Namespace) -> int:
    from simulator.cluster_recorder import Recorder

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


def replay(args: argparse.Namespace) -> int:
    """`xce sim --replay FILE` or `--verify FILE`."""
    from scheduler.picker import PickerError
    from simulator import recording_file, whatif
    from simulator import replay as replaying

    path = args.replay or args.verify
    try:
        changes = whatif.parse(args.set)
        recorded = recording_file.read(path)
        result = replaying.replay(recorded, changes, first_only=bool(args.verify))
    except (whatif.WhatIfError, recording_file.RecordingError, PickerError) as exc:
        print(f"xce sim: {exc}", file=sys.stderr)
        return 2
    if args.out is not None and args.replay:
        with open(args.out, "w", encoding="utf-8") as out:
            for each, batch in result.batches:
                out.write(json.dumps({"pass": each.number, "revision": each.revision,
                                      "batch": recording_file.as_json(batch)}, sort_keys=True) + "\n")
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
