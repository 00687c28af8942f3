"""What applying an entry costs a replica: a job's submit, DISPATCH, started and finished; a small submit.

    .venv/bin/python bench/apply_cost.py [--hosts 500] [--slots 40] [--jobs 20000] [--requests 4000]
                                         [--rounds 3]

The fleet's placement (bench/fleet.py) without its processes: one real StateStore (LMDB, synced as a
replica's) in a temporary directory, fed serialized entries as the Raft node hands them over (the
bytes, decoded by fsm.apply): the cluster's start, the hosts' joins, submits of JOBS_PER_REQUEST
one-slot jobs a request, then rounds of a decisions batch of DECISIONS_PER_BATCH dispatches, the
workers' `started` reports of those jobs and their `finished` reports, REPORTS_PER_ENTRY an entry.
Then the writes benchmark's submits (bench/xce_bench.py: one 300-byte job a request, a request id,
its audit note) as the leader group-commits them, SMALL_PER_ENTRY requests an entry and one a
entry. Every replica applies each of these entries, so each costs the cluster three times what this
prints. CPU time of the applying process (the store's commit included, the fsync's wait not),
microseconds a job or a request by kind, median of --rounds runs, each on a fresh store. Asserts
only that every entry was applied OK and every job ended.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import xce_bench  # noqa: E402

from controller import audit_trail  # noqa: E402
from controller.fsm.versions import ENTRY_FORMAT  # noqa: E402
from controller.store import StateStore  # noqa: E402
from xce.v1 import api_pb2 as api  # noqa: E402
from xce.v1 import log_pb2 as log  # noqa: E402

JOBS_PER_REQUEST = 1000  # as bench/fleet.py submits
DECISIONS_PER_BATCH = 500
REPORTS_PER_ENTRY = 200
SMALL_PER_ENTRY = 8  # about what 16 clients' one-job submits make an entry (group commit)
SCHEDULER = "sched-bench"
STAMP_MS = 1_800_000_000_000


class Feeder:
    """Entries into one store, timed by kind."""

    def __init__(self, store: StateStore) -> None:
        self.store = store
        self.index = 0
        self.seconds: dict[str, float] = defaultdict(float)

    def apply(self, entry: log.Entry, kind: str = "") -> list[log.Result]:
        self.index += 1
        entry.stamp_ms = STAMP_MS + self.index
        entry.format = ENTRY_FORMAT
        entry.proposer = 1
        data = entry.SerializeToString()
        began = time.process_time()
        results = self.store.apply(self.index, data)
        self.seconds[kind] += time.process_time() - began
        if results is None or any(r.code != log.OK for r in results):
            what = kind or entry.WhichOneof("body")
            raise SystemExit(f"entry {self.index} ({what}) was refused: {results}")
        return results


def one_run(hosts: int, slots: int, jobs: int, requests: int) -> dict[str, float]:
    """Microseconds a job (or a request) for each kind of entry, on fresh stores."""
    figures = {}
    feeds: list[Callable[[Feeder], dict[str, float]]] = [
        functools.partial(_feed, hosts=hosts, slots=slots, jobs=jobs),
        functools.partial(_small_submits, per_entry=1, requests=requests),
        functools.partial(_small_submits, per_entry=SMALL_PER_ENTRY, requests=requests)]
    for feed_one in feeds:
        with tempfile.TemporaryDirectory(prefix="xce-apply-cost-") as data:
            store = StateStore(Path(data) / "state", "bench")
            try:
                figures.update(feed_one(Feeder(store)))
            finally:
                store.close()
    return figures


def _start(feed: Feeder) -> None:
    feed.apply(log.Entry(init=log.InitCluster(cluster_id="bench", config_digest="bench",
                                              queues=[api.Queue(name="normal")], default_queue="normal")))


def _small_submits(feed: Feeder, per_entry: int, requests: int) -> dict[str, float]:
    """Submits as the writes benchmark's clients make them, `per_entry` requests an entry."""
    _start(feed)
    spec = xce_bench.job_spec()
    spec.queue, spec.user = "normal", "bench"
    kind = f"small submit, {per_entry} a entry"
    for first in range(0, requests, per_entry):
        entry = log.Entry()
        for number in range(first, first + per_entry):
            request = entry.submit.requests.add(request_id=f"bench/{number:012d}")
            request.jobs.append(spec)
            request.audit.via, request.audit.action = "grpc", "submit"
            request.audit.params = audit_trail.params_of(request)
            entry.submit.by.add(name="bench", role="user", via="grpc")
        feed.apply(entry, kind)
    return {kind: feed.seconds[kind] / requests * 1e6}


def _feed(feed: Feeder, hosts: int, slots: int, jobs: int) -> dict[str, float]:
    _start(feed)
    lease = log.Entry(lease=log.LeaseEntry(scheduler_id=SCHEDULER, duration_ms=10**9))
    epoch = feed.apply(lease)[0].lease_epoch
    names = [f"sim{i:05d}" for i in range(hosts)]
    generation = {}
    for name in names:
        generation[name] = feed.apply(log.Entry(join_host=api.HostSpec(name=name, slots=slots)))[0].generation
    pending: list[int] = []
    for start in range(0, jobs, JOBS_PER_REQUEST):
        entry = log.Entry()
        request = entry.submit.requests.add(request_id=f"bench-{start}")
        for _ in range(min(JOBS_PER_REQUEST, jobs - start)):
            request.jobs.add(command=["sleep", "60"], queue="normal", user="bench", slots=1)
        entry.submit.by.add(name="bench", role="user", via="grpc")
        pending += list(feed.apply(entry, "submit")[0].job_ids)
    free = [(name, s) for s in range(slots) for name in names]  # spread as the scheduler's pass does
    done = 0
    while pending:
        wave = pending[:min(len(pending), len(free))]
        pending = pending[len(wave):]
        placed = list(zip(wave, free, strict=False))
        for start in range(0, len(placed), DECISIONS_PER_BATCH):
            entry = log.Entry()
            batch = entry.decisions
            batch.scheduler_id, batch.lease_epoch = SCHEDULER, epoch
            for job_id, (name, _) in placed[start:start + DECISIONS_PER_BATCH]:
                dispatch = batch.decisions.add().dispatch
                dispatch.job_id, dispatch.host = job_id, name  # at attempt 0, a new job's
            outcomes = feed.apply(entry, "dispatch")[0].outcomes
            if any(o.code for o in outcomes):
                raise SystemExit(f"a dispatch was refused: {[o for o in outcomes if o.code][:1]}")
        for kind in ("started", "finished"):
            for start in range(0, len(placed), REPORTS_PER_ENTRY):
                entry = log.Entry()
                for job_id, (name, _) in placed[start:start + REPORTS_PER_ENTRY]:
                    relayed = entry.reports.reports.add(host=name, generation=generation[name])
                    relayed.report.job_id = job_id
                    if kind == "started":
                        relayed.report.started.pid, relayed.report.started.time_ms = 1, STAMP_MS
                    else:
                        relayed.report.finished.exit_code, relayed.report.finished.time_ms = 0, STAMP_MS
                feed.apply(entry, kind)
        done += len(placed)
    if done != jobs:
        raise SystemExit(f"{done} of {jobs} jobs ended")
    return {kind: seconds / jobs * 1e6 for kind, seconds in feed.seconds.items() if kind}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=500)
    ap.add_argument("--slots", type=int, default=40)
    ap.add_argument("--jobs", type=int, default=20_000)
    ap.add_argument("--requests", type=int, default=4000, help="small submit requests, at each batching")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    runs = [one_run(args.hosts, args.slots, args.jobs, args.requests) for _ in range(args.rounds)]
    kinds = ("submit", "dispatch", "started", "finished")
    print(f"## Apply on one replica, CPU ({args.hosts} hosts x {args.slots} slots, {args.jobs:,} jobs; "
          f"{args.requests:,} small submit requests; median of {args.rounds})\n")
    print("| entry | us a job (a request) |\n|---|---|")
    for kind in kinds:
        print(f"| {kind} | {statistics.median(r[kind] for r in runs):.1f} |")
    total = statistics.median(sum(r[k] for k in kinds) for r in runs)
    print(f"| a placed job's four | {total:.1f} |")
    for kind in (k for k in runs[0] if k.startswith("small")):
        print(f"| {kind} | {statistics.median(r[kind] for r in runs):.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
