"""`xce sim` against an independent simulator, AccaSim 1.1.3 (PyPI), job by job.

For each trace of ../shared/traces (its jobs prepared by the accasim conventions) and for seeded
traces of wide jobs (simulator/workload.py: wide_trace; 8-64 of 100 one-slot hosts), the very same jobs
are written as an SWF file and run by AccaSim (bench/accasim_runner.py, its own process) and by XCE with
AccaSim's event order (`--conventions accasim`: at each time every end, then every arrival, then the
pass). Each job's start time is compared:

- AccaSim's FirstInFirstOut against XCE's `backfill none`: they must be identical;
- AccaSim's EASYBackfilling against XCE's `easy`: they differ, because AccaSim 1.1.3's EASY is not
  Mu'alem and Feitelson's. Two rules of its scheduler_class.py make the difference: (1) the blocked
  head is not tried again before its reservation time, even when room frees earlier (jobs end before
  their estimates); (2) the jobs that backfill are given an empty list of reserved nodes
  (`reserved_nodes=[]`), so they are not kept off the head's nodes and may delay it past its
  reservation. The reservation itself is reckoned once, when the head blocks, from the running jobs'
  start + estimate, and kept until the head starts; with no event left, its clock moves a second at
  a time (so the head starts at its reservation). `accasim_easy` below is XCE's counted simulation
  with exactly those rules instead of EASY's: it must give AccaSim's start times for every job, which
  shows that these rules are the whole difference.

With --faithful, XCE's side also runs every event through the real apply and scheduler (slow; the
counted and the faithful paths are held equal by tests/sim/test_counting.py). Prints a table; exits
1 if FIFO or the model of AccaSim's EASY differs from AccaSim on any job.

`.venv/bin/python bench/crossval_accasim.py [--seeds 20] [--wide-jobs 500] [--faithful] [--json]`
(`make crossval`; about 4 minutes, most of it AccaSim on the Lublin traces).
"""

from __future__ import annotations

import argparse
import heapq
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from simulator import counting, engine, swf, workload  # noqa: E402
from xce.v1 import api_pb2 as api  # noqa: E402

HERE = Path(__file__).resolve().parent
TRACES = HERE.parent.parent / "shared" / "traces"
SHARED = ("lublin_256.swf", "lublin_256_new2.swf", "NASA-iPSC-1993-3.1-cln.swf.gz")
Starts = dict[int, int]  # job id -> start (s)


def accasim(path: Path, nodes: int, policy: str, work: Path) -> Starts:
    out = subprocess.run([sys.executable, str(HERE / "accasim_runner.py"), str(path), str(nodes), policy,
                          str(work / policy)], check=True, capture_output=True, text=True).stdout
    return {int(job): int(start) for job, start, _ in (line.split() for line in out.splitlines())}


def xce(trace: swf.Trace, nodes: int, mode: str, faithful: bool) -> Starts:
    queue = api.Queue(name="normal", backfill="" if mode == "any" else mode)
    w = workload.from_swf(trace, "crossval", workload.one_slot_hosts(nodes), queue)
    result = counting.run(w, engine.Settings(ordering="time"), faithful=faithful)
    return {f.key: f.start_ms // 1000 for f in result.finished}


def accasim_easy(trace: swf.Trace, nodes: int) -> Starts:
    """AccaSim 1.1.3's EASYBackfilling as it behaves (the rules above), on slot counts."""
    jobs = {job.id: job for job in trace.jobs}
    events = [(job.submit_s, 1, job.id) for job in trace.jobs]  # (time, 0 end | 1 arrival, job): ends first
    heapq.heapify(events)
    free, queue, starts = nodes, list[int](), Starts()
    running: dict[int, int] = {}  # job -> expected end (start + estimate)
    blocked: int | None = None
    reserved: int | None = None
    now = 0
    while events or queue:
        # With no event left, AccaSim moves its clock a second at a time: nothing changes before the
        # head's reservation, when it is tried again.
        now = events[0][0] if events else max(now + 1, reserved or 0)
        while events and events[0][0] == now:
            _, kind, job_id = heapq.heappop(events)
            if kind == 0:
                free += jobs[job_id].procs
                del running[job_id]
            else:
                queue.append(job_id)
        if not queue:
            continue
        started: list[int] = []

        def start(job_id: int, now: int = now, started: list[int] = started) -> None:
            nonlocal free
            free -= jobs[job_id].procs
            starts[job_id] = now
            started.append(job_id)
            heapq.heappush(events, (now + jobs[job_id].run_s, 0, job_id))

        waiting, reached = list(queue), False
        if reserved is not None and reserved <= now:  # (1): tried only from its reservation on
            reached, head, waiting = True, waiting[0], waiting[1:]
            if jobs[head].procs <= free:
                start(head)
                blocked = reserved = None
        if blocked is None and waiting:
            k = 0
            while k < len(waiting) and jobs[waiting[k]].procs <= free:
                start(waiting[k])
                k += 1
            if k < len(waiting):
                blocked, fill = waiting[k], waiting[k + 1:]
                if reserved is None:
                    reserved = _reservation(jobs, running, started, blocked, free, now)
            else:
                fill = []
        else:
            fill = waiting if reached else waiting[1:]
        for job_id in fill:  # (2): nothing kept off the head's nodes
            if jobs[job_id].procs <= free:
                start(job_id)
        for job_id in started:
            running[job_id] = now + jobs[job_id].estimate_s
        gone = set(started)
        queue = [j for j in queue if j not in gone]
    return starts


def _reservation(jobs: dict[int, swf.Job], running: dict[int, int], started: list[int], head: int,
                 free: int, now: int) -> int:
    """The first expected end (running jobs' start + estimate, this pass's now + estimate) at which the
    free slots reach the head's size."""
    ends = sorted([*((end, jobs[j].procs) for j, end in running.items()),
                   *((now + jobs[j].estimate_s, jobs[j].procs) for j in started)])
    for end, procs in ends:
        free += procs
        if free >= jobs[head].procs:
            return end
    raise ValueError(f"job {head} is larger than the machine")


def differing(ours: Starts, theirs: Starts) -> list[int]:
    return sorted(j for j in theirs.keys() | ours.keys() if ours.get(j) != theirs.get(j))


def compare(name: str, trace: swf.Trace, nodes: int, faithful: bool) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="xce-crossval-") as tmp:
        work = Path(tmp)
        path = work / "trace.swf"
        path.write_text("\n".join(swf.lines(trace)) + "\n")
        fifo, ebf = accasim(path, nodes, "fifo", work), accasim(path, nodes, "ebf", work)
    none, easy = xce(trace, nodes, "none", faithful), xce(trace, nodes, "easy", faithful)
    model = accasim_easy(trace, nodes)
    return {"trace": name, "jobs": len(trace.jobs), "nodes": nodes,
            "fifo_vs_none": len(differing(none, fifo)), "ebf_vs_easy": len(differing(easy, ebf)),
            "ebf_vs_its_rules": len(differing(model, ebf)), "first_ebf_vs_easy": differing(easy, ebf)[:1]}


def traces(seeds: int, wide_jobs: int) -> list[tuple[str, swf.Trace, int]]:
    out = []
    for name in SHARED:
        trace = swf.read(TRACES / name, "accasim")
        out.append((name, trace, trace.max_nodes()))
    for seed in range(1, seeds + 1):
        out.append((f"wide seed {seed}", workload.wide_trace(wide_jobs, 100, (8, 64), seed=seed), 100))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20, help="seeded wide-job traces (default 20)")
    parser.add_argument("--wide-jobs", type=int, default=500, help="jobs in each (default 500)")
    parser.add_argument("--faithful", action="store_true",
                        help="XCE's side through the real apply and scheduler")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = [compare(name, trace, nodes, args.faithful)
            for name, trace, nodes in traces(args.seeds, args.wide_jobs)]
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(f"{'trace':<32} {'jobs':>6} {'FIFO vs none':>13} {'EBF vs easy':>12} {'EBF vs its rules':>17}")
        for row in rows:
            print(f"{row['trace']:<32} {row['jobs']:>6} {row['fifo_vs_none']:>13} {row['ebf_vs_easy']:>12} "
                  f"{row['ebf_vs_its_rules']:>17}")
        print("(jobs whose start time differs; EBF vs easy differ by AccaSim's two rules: "
              "bench/crossval_accasim.py)")
    sys.exit(1 if any(row["fifo_vs_none"] or row["ebf_vs_its_rules"] for row in rows) else 0)


if __name__ == "__main__":
    main()
