"""`python -m soak`: the HA soak (see soak/README.md). Exit 0 when every check passes."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from soak.fault_kinds import CLASSIC, KINDS
from soak.report import summary
from soak.run import SoakConfig, SoakError, run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m soak", description=__doc__)
    ap.add_argument("--duration", type=float, default=150.0, help="seconds of load and chaos (then a drain)")
    ap.add_argument("--kill-every", type=float, default=15.0, help="seconds between leader kills (0: none)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--partitions", type=int, default=1, help="leader partitions (needs root and iproute2)")
    ap.add_argument("--rate", type=float, default=4.0,
                    help="submits per second (4: about two thirds of the workers' 26 slots busy)")
    ap.add_argument("--drain", type=float, default=300.0, help="seconds allowed for the drain")
    ap.add_argument("--out", type=Path, default=Path("soak-out"), help="soak.json, summary.txt, timeline.png")
    ap.add_argument("--faults", default=",".join(CLASSIC),
                    help=f"fault kinds, comma-separated, one a round ({', '.join(KINDS)}; all: every one); "
                         "the default is the classic round: leader kills, and --partitions cuts")
    ap.add_argument("--max-unknown", type=float, default=None,
                    help="fail if more than this share of the clients' operations had an unknown outcome "
                         "(make soak-long: 0.02)")
    ap.add_argument("--fault", default="", help=argparse.SUPPRESS)  # tests: a deliberately broken build
    args = ap.parse_args(argv)
    # SIGTERM unwinds like Ctrl-C: every process, namespace and directory is cleaned up.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    faults = KINDS if args.faults == "all" else tuple(k.strip() for k in args.faults.split(",") if k.strip())
    print(f"soak: seed {args.seed}", flush=True)
    try:
        result = run(SoakConfig(duration_s=args.duration, kill_every_s=args.kill_every, seed=args.seed,
                                partitions=args.partitions, rate=args.rate, drain_s=args.drain, out=args.out,
                                fault=args.fault, faults=faults, max_unknown=args.max_unknown))
    except SoakError as exc:
        print(f"soak: {exc}", file=sys.stderr)
        return 2
    print(summary(result), flush=True)
    print(f"soak: figures in {args.out}/soak.json, {args.out}/summary.txt, {args.out}/timeline.png")
    return 0 if result["verdict"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
