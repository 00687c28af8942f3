"""High-throughput computing, beside Slurm: many short jobs, arrays, `xce submit` latency, turnover.

`python bench/htc.py` (also a part of `make bench`). On one fresh local
cluster (three replicas, a scheduler, 2 workers of 4 slots: 8 slots, TLS
and tokens on, linearizable reads) it measures:

- (a) N `true` jobs, one `xce submit` process each in a shell loop, first
  submit until all have finished; (b) the same as one array;
- submitting an array of 1,000 and of 1,000,000 elements: the call's time,
  the request's bytes (the log entry is the request plus a few bytes) and
  the records it stores;
- `xce submit` from exec to exit, p50 and p99;
- the turnover of a slot, hop by hop, from the job records as the Sync
  stream delivers them: a job's end on its worker -> the entry with its
  end proposed -> the next job's dispatch proposed -> that job's start on
  the worker (entries carry the leader's stamp at proposal: each commit
  falls in the hop after it).

Slurm's figures come from ../shared/peers/slurm (up.sh with the htc profile,
`sbatch` in a loop, array_e2e.sh), when it can start; else it says so.
Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from client.channel import Client  # noqa: E402
from client.grpc_transport import channel_options  # noqa: E402
from ops.local_cluster import LocalCluster, LocalScheduler, LocalWorkers  # noqa: E402
from xce.v1 import api_pb2 as api  # noqa: E402
from xce.v1 import log_pb2 as log  # noqa: E402

SLURM = REPO.parent / "shared" / "peers" / "slurm"
# `xce` as users run it: the installed command (its console script), else the module.
_SCRIPT = Path(sys.executable).parent / "xce"
XCE = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "cli"]


CLI_TARGET_MS = 40  # `xce submit` and `bsub`, exec to exit, p50 (with TLS and a token)
TURNOVER_TARGET_MS = 10  # a slot's end -> the next job's start on it, p50


def _verdict(met: bool) -> str:
    return ": met" if met else ": NOT met"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


class Recorder:
    """Every job write the Sync stream carries, with the entry's stamp: when the leader proposed the
    entry that dispatched each job and the one that ended it (the leader's clock, the same machine's
    as the workers'). A hop that ends at a proposal leaves that entry's commit to the next hop."""

    def __init__(self, cluster: LocalCluster) -> None:
        import grpc

        self.dispatched: dict[int, int] = {}  # job -> stamp of the entry that made it RUN
        self.ended: dict[int, int] = {}       # job -> stamp of the entry that made it DONE/EXIT
        self.jobs: dict[int, api.Job] = {}
        credentials = cluster.scheduler_credentials("htc-bench")
        self._channel = credentials.channel(cluster.addresses[cluster.leader() - 1], channel_options())
        stream = self._channel.unary_stream("/xce.v1.SyncService/Sync",
                                            request_serializer=lambda m: m.SerializeToString(),
                                            response_deserializer=log.SyncMessage.FromString)
        self._call = stream(log.SyncRequest(), metadata=credentials.metadata())
        self._grpc = grpc
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for message in self._call:
                if message.WhichOneof("body") != "event":
                    continue
                for change in message.event.changes:
                    if change.table != "jobs" or change.deleted:
                        continue
                    job = api.Job.FromString(change.value)
                    before = self.jobs.get(job.id)
                    if job.state == api.RUN and (before is None or before.state != api.RUN):
                        self.dispatched[job.id] = job.modify_time_ms
                    if job.state in (api.DONE, api.EXIT) and job.id not in self.ended:
                        self.ended[job.id] = job.modify_time_ms
                    self.jobs[job.id] = job
        except self._grpc.RpcError:
            pass

    def close(self) -> None:
        self._call.cancel()
        self._channel.close()

    def turnover(self, ids: set[int]) -> dict[str, Any]:
        """Per hop, over the jobs that took a slot another had just freed (not the first wave)."""
        ends = sorted((t, j) for j, t in self.ended.items() if j in ids)
        names = ("end_to_report_proposed", "report_to_next_dispatch_proposed",
                 "dispatch_proposed_to_start", "slot_idle_total")
        hops: dict[str, list[float]] = {name: [] for name in names}
        for job_id in sorted(ids):
            job, dispatched = self.jobs.get(job_id), self.dispatched.get(job_id)
            if job is None or dispatched is None:
                continue
            freed = [(t, j) for t, j in ends if t <= dispatched]
            if not freed:
                continue  # the first wave: no slot was freed for it
            freed_at, freer = freed[-1]
            previous = self.jobs[freer]
            if dispatched - freed_at > 2000 or not previous.end_time_ms:
                continue
            hops["end_to_report_proposed"].append(freed_at - previous.end_time_ms)
            hops["report_to_next_dispatch_proposed"].append(dispatched - freed_at)
            hops["dispatch_proposed_to_start"].append(job.start_time_ms - dispatched)
            hops["slot_idle_total"].append(job.start_time_ms - previous.end_time_ms)
        return {name: {"p50_ms": pct(v, 0.5), "p90_ms": pct(v, 0.9), "n": len(v)} for name, v in hops.items()}


def xce_env(cluster: LocalCluster) -> dict[str, str]:
    env = {**os.environ, "XCE_DATA": str(cluster.data)}
    env.pop("XCE_CONTROLLERS", None)
    return env


def wait_hosts_ok(client: Client, count: int, timeout_s: float = 60) -> None:
    """Until `count` hosts are OK (the workers joined)."""
    deadline = time.monotonic() + timeout_s
    while sum(h.status == api.HOST_OK for h in client.list_hosts().hosts) < count:
        if time.monotonic() > deadline:
            raise RuntimeError("the workers did not join")
        time.sleep(0.1)


def run_array(client: Client, n: int, cwd: Path) -> tuple[int, float]:
    """(b): an array of `n` `true` elements submitted and waited for: (its id, seconds to its end)."""
    started = time.monotonic()
    spec = api.JobSpec(command=["true"], name="htc", cwd=str(cwd),
                       array=api.ArraySpec(ranges=[api.IndexRange(start=1, end=n)]))
    array = client.submit([spec]).jobs[0]
    while client.get_job(str(array.id)).state not in (api.DONE, api.EXIT):
        time.sleep(0.05)
    return array.id, time.monotonic() - started


def wait_done(client: Client, ids: list[int], timeout_s: float = 900) -> float:
    deadline = time.monotonic() + timeout_s
    pending = set(ids)
    while pending and time.monotonic() < deadline:
        pending = {i for i in pending if client.get_job(str(i)).state not in (api.DONE, api.EXIT)}
        if pending:
            time.sleep(0.05)
    if pending:
        raise RuntimeError(f"{len(pending)} jobs did not finish")
    return time.monotonic()


def lsf_latency(env: dict[str, str], work: Path, samples: int) -> dict[str, dict[str, float]]:
    """LSF's commands (cli/lsf/) from exec to exit, as `xce submit` above: bsub, bjobs of one job,
    bkill of a pending one, lsid."""
    from xce import lsf_bin

    env = {**env, "PATH": f"{lsf_bin.ensure()}:{env.get('PATH', '')}"}
    times: dict[str, list[float]] = {"bsub": [], "bjobs JOB": [], "bkill JOB": [], "lsid": []}
    job = ""  # the held job bsub just submitted: bjobs reads it, bkill ends it
    for _ in range(samples):
        for name, line in (("bsub", ["bsub", "-H", "true"]), ("bjobs JOB", ["bjobs", "{job}"]),
                           ("bkill JOB", ["bkill", "{job}"]), ("lsid", ["lsid"])):
            words = [job if word == "{job}" else word for word in line]
            started = time.perf_counter()
            done = subprocess.run(words, env=env, capture_output=True, text=True, cwd=work)
            times[name].append((time.perf_counter() - started) * 1000)
            if done.returncode:
                raise RuntimeError(f"{' '.join(words)}: {done.stderr}")
            if name == "bsub":
                job = done.stdout.split("<", 1)[1].split(">", 1)[0]
    return {name: {"p50": round(pct(v, 0.5), 1), "p99": round(pct(v, 0.99), 1), "n": len(v)}
            for name, v in times.items()}


def xce_figures(n: int, latency_samples: int, work: Path) -> dict[str, Any]:
    cluster = LocalCluster(work / "cluster", 3)
    workers = LocalWorkers(cluster)
    scheduler = LocalScheduler(cluster)
    out: dict[str, Any] = {}
    try:
        cluster.start()
        cluster.leader()
        scheduler.start()
        workers.start("w1", 4)
        workers.start("w2", 4)
        env = xce_env(cluster)
        with cluster.client() as client:
            wait_hosts_ok(client, 2)
            recorder = Recorder(cluster)
            # `xce submit` from exec to exit (the printed id is committed before it exits).
            lat = []
            for _ in range(latency_samples):
                started = time.perf_counter()
                done = subprocess.run([*XCE, "submit", "-q", "idle", "--", "true"],
                                      env=env, capture_output=True, text=True, cwd=work)
                lat.append((time.perf_counter() - started) * 1000)
                if done.returncode:
                    raise RuntimeError(done.stderr)
            out["submit_latency_ms"] = {"p50": round(pct(lat, 0.5), 1), "p99": round(pct(lat, 0.99), 1),
                                        "n": len(lat)}
            out["lsf_latency_ms"] = lsf_latency(env, work, max(10, latency_samples // 2))
            loop_ids: list[int] = []
            # (a) one CLI process per submit, in a shell loop (as a user's script would).
            # Its plain answer, as bsub's ("Job <17> ... is submitted"): --json would import
            # protobuf's JSON (20-40 ms a command), which such a loop does not need.
            script = f'for i in $(seq {n}); do {" ".join(XCE)} submit -- true; done'
            started = time.monotonic()
            done = subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True, cwd=work)
            submitted = time.monotonic()
            loop_ids = [int(line.split("<", 1)[1].split(">", 1)[0]) for line in done.stdout.splitlines()
                        if line.startswith("Job <")]
            if len(loop_ids) != n:
                raise RuntimeError(f"the loop submitted {len(loop_ids)} of {n}: {done.stderr[-500:]}")
            finished = wait_done(client, [int(i) for i in loop_ids])
            out["a_cli_loop"] = {"n": n, "submit_s": round(submitted - started, 2),
                                 "total_s": round(finished - started, 2),
                                 "jobs_per_s": round(n / (finished - started), 1)}
            # (b) one array.
            array_id, took = run_array(client, n, work)
            out["b_array"] = {"n": n, "total_s": round(took, 2), "jobs_per_s": round(n / took, 1)}
            element_ids = {j.id for j in client.list_jobs([f"array:eq:{array_id}"], page_size=5000)}
            out["turnover_ms"] = recorder.turnover(element_ids)
            recorder.close()
            # Submitting big arrays: one call each, into an inactive queue (nothing runs).
            client.put_queue(api.Queue(name="parked", priority=1, inactive=True), create=True)
            for size in (1_000, 1_000_000):
                spec = api.JobSpec(command=["true"], queue="parked", name=f"big{size}",
                                   array=api.ArraySpec(ranges=[api.IndexRange(start=1, end=size)]))
                request = api.SubmitJobsRequest(request_id=f"htc-{size}", jobs=[spec])
                started = time.perf_counter()
                record = client.submit(list(request.jobs), request_id=request.request_id).jobs[0]
                took = time.perf_counter() - started
                elements = len(client.list_jobs([f"array:eq:{record.id}"], page_size=5000))
                out[f"array_submit_{size}"] = {"ms": round(took * 1000, 1), "records": 1 + elements,
                                               "request_bytes": request.ByteSize()}
    finally:
        scheduler.kill()
        workers.stop()
        cluster.stop()
    return out


def slurm_figures(n: int) -> dict[str, Any]:
    if not (SLURM / "up.sh").exists():
        return {"error": f"no Slurm peer scripts at {SLURM}"}
    env = {**os.environ, "SLURM_PEER_SCHED_PARAMS": "batch_sched_delay=0,bf_interval=1"}
    # --clean: a fresh Slurm each run, as XCE's cluster is (a state recovered from earlier runs,
    # finished jobs kept MinJobAge, made its figures fall by half over consecutive runs).
    up = subprocess.run(["bash", str(SLURM / "up.sh"), "--clean"], env=env, capture_output=True, text=True,
                        timeout=900)
    if up.returncode != 0:
        return {"error": f"Slurm did not start: {(up.stderr or up.stdout)[-400:]}"}
    env["SLURM_CONF"] = "/tmp/slurm-peer/slurm.conf"
    out: dict[str, Any] = {}
    try:
        # (a) one sbatch per job in a shell loop, then until the queue is empty of them.
        script = (f'name=loop$RANDOM; t0=$(date +%s.%N); for i in $(seq {n}); do sbatch -Q -J $name '
                  '-o /dev/null -e /dev/null --wrap true >/dev/null; done; t1=$(date +%s.%N); '
                  'for _ in $(seq 1 6000); do [ "$(squeue -h -n $name -o %i | wc -l)" = 0 ] && break; '
                  'sleep 0.1; done; t2=$(date +%s.%N); echo "$t0 $t1 $t2"')
        done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=1800)
        t0, t1, t2 = (float(x) for x in done.stdout.split()[-3:])
        out["a_cli_loop"] = {"n": n, "submit_s": round(t1 - t0, 2), "total_s": round(t2 - t0, 2),
                             "jobs_per_s": round(n / (t2 - t0), 1)}
        done = subprocess.run(["bash", str(SLURM / "array_e2e.sh"), str(n)], env=env, capture_output=True,
                              text=True, timeout=1800)
        fields = dict(part.split("=") for part in done.stdout.split() if "=" in part)
        out["b_array"] = {"n": n, "total_s": float(fields["total_s"]),
                          "jobs_per_s": float(fields["jobs_per_s"])}
    except (ValueError, KeyError, subprocess.TimeoutExpired) as exc:
        out["error"] = f"Slurm measurement failed: {exc}"
    finally:
        subprocess.run(["bash", str(SLURM / "down.sh")], capture_output=True, timeout=300)
    return out


def main(argv: list[str] | None = None) -> int:
    import compileall

    # An installed CLI has its bytecode; an editable checkout under PYTHONDONTWRITEBYTECODE=1 would
    # compile every module on every command (~35 ms of each `xce submit`).
    for package in ("xce", "cli"):
        compileall.compile_dir(str(REPO / package), quiet=1)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("-n", type=int, default=500, help="jobs of (a) and elements of (b)")
    ap.add_argument("--latency-samples", type=int, default=100)
    ap.add_argument("--no-slurm", action="store_true")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="xce-htc-"))
    try:
        figures: dict[str, Any] = {"xce": xce_figures(args.n, args.latency_samples, work)}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    figures["slurm"] = {"error": "skipped (--no-slurm)"} if args.no_slurm else slurm_figures(args.n)
    xce, slurm = figures["xce"], figures["slurm"]
    print(f"{'':34}{'XCE':>14}{'Slurm':>14}{'ratio':>8}   target")
    for key, what, target in (("a_cli_loop", f"(a) {args.n} jobs, a CLI per submit", 1.0),
                              ("b_array", f"(b) one array of {args.n}", 10.0)):
        ours, theirs = xce[key]["jobs_per_s"], slurm.get(key, {}).get("jobs_per_s")
        ratio = f"{ours / theirs:.2f}x" if theirs else "-"
        print(f"{what:<34}{ours:>10.1f}/s {(f'{theirs:.1f}/s' if theirs else '-'):>13}{ratio:>8}   "
              f">= {target:g}x{_verdict(ours / theirs >= target) if theirs else ''}")
    lat = xce["submit_latency_ms"]
    print(f"xce submit, exec to exit: p50 {lat['p50']} ms, p99 {lat['p99']} ms ({lat['n']} runs); "
          f"target p50 <= {CLI_TARGET_MS} ms{_verdict(lat['p50'] <= CLI_TARGET_MS)}")
    for name, figures_of in xce["lsf_latency_ms"].items():
        goal = f"; target p50 <= {CLI_TARGET_MS} ms{_verdict(figures_of['p50'] <= CLI_TARGET_MS)}" \
            if name == "bsub" else ""
        print(f"{name + ',':<11} exec to exit: p50 {figures_of['p50']} ms, p99 {figures_of['p99']} ms "
              f"({figures_of['n']} runs){goal}")
    for size in (1_000, 1_000_000):
        a = xce[f"array_submit_{size}"]
        print(f"array of {size:>9,}: submit {a['ms']} ms, {a['request_bytes']} request bytes, "
              f"{a['records']} records")
    print("turnover of a slot, per hop (p50 / p90 ms):")
    for hop, v in xce["turnover_ms"].items():
        goal = f"  target p50 <= {TURNOVER_TARGET_MS} ms{_verdict(v['p50_ms'] <= TURNOVER_TARGET_MS)}" \
            if hop == "slot_idle_total" else ""
        print(f"  {hop:<36}{v['p50_ms']:>8} {v['p90_ms']:>8}  (n={v['n']}){goal}")
    if "error" in slurm:
        print(f"Slurm: {slurm['error']}")
    print(json.dumps(figures, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
