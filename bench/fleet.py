"""Fleet benchmark: committed placements per second, and failover under that load.

A real three-replica LocalCluster and a real `xce scheduler`; the hosts are
simulated (bench/fleet_sim.py: the real worker protocol over gRPC, jobs that
"run" for their declared duration without forking), 500 x 40 slots by
default, spread over two processes.

1. Placements: 20,000 one-slot jobs are submitted while no scheduler runs,
   then the scheduler starts. Measured: from the first RunJob any host
   receives (the leader sends it only after the DISPATCH is committed) to the
   last of the 20,000: committed placements per second. Also from the
   scheduler's start (it first reads the whole state).
2. Failover under load: the jobs end after 2-30 s and as many again wait,
   so dispatches go on; the leader is killed with SIGKILL `kills` times,
   each time with at least MIN_WAITING jobs waiting (the jobs submitted then
   run 20-60 s, so that the slots free up slower than the bench submits).
   Measured: kill -> the first RunJob of a (job, attempt) no host had seen
   before, i.e. a new committed dispatch delivered by the new leader.

With --requirements the hosts join with attributes (256 GB, 8 GPUs, half
X86_64 and half ARM; fleet_sim.described) and heartbeat with load indices,
and the jobs carry -R requirements (REQUIREMENTS: select on tags, memory
and load, rusage of mem and gpu, order[]), each re-checked at the commit
barrier. The jobs are 90 % of the slots, so that a type's hosts are never
short of room by chance of the order.

Part of `make bench`; alone: .venv/bin/python bench/fleet.py [--hosts N ...].
Prints figures, asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import big_state  # noqa: E402
from loadgen import ms, percentile  # noqa: E402

from client.channel import Client  # noqa: E402
from client.credentials import new_token  # noqa: E402
from ops.local_cluster import LocalCluster, LocalScheduler  # noqa: E402
from xce.v1 import api_pb2 as api  # noqa: E402

HERE = Path(__file__).resolve().parent
HISTORY_WORK = Path(tempfile.gettempdir()) / "xce-big-state-history"  # --history's state, built once
JOBS_PER_REQUEST = 1000
KILL_PHASE_SECONDS = (20, 60)  # how long the jobs submitted during the kills run
MIN_WAITING = 2000  # jobs waiting before a kill: what the new leader's first dispatch takes
STALL_S = 60.0  # a kill with no new dispatch this long after it is a stall (its sample: this)
SIM_PROCESSES = 2


class SimFleet:
    """The fleet_sim processes; their records are read after they stop."""

    def __init__(self, data: Path, addresses: list[str], hosts: int, slots: int, cluster: Path,
                 tokens: Path, joins_per_s: float = 0.0, attributes: bool = False) -> None:
        self.data = data
        self.procs: list[subprocess.Popen[bytes]] = []
        self.outs: list[Path] = []
        self.joins: list[tuple[float, str]] = []  # every host's joins (when, to which replica), once stopped
        share = -(-hosts // SIM_PROCESSES)
        for first in range(0, hosts, share):
            out = data / f"fleet-{first}.json"
            count = min(share, hosts - first)
            with open(data / f"fleet-{first}.log", "ab") as log:
                self.procs.append(subprocess.Popen(
                    [sys.executable, str(HERE / "fleet_sim.py"), str(out), ",".join(addresses), str(first),
                     str(count), str(slots), str(cluster), str(tokens), str(joins_per_s / SIM_PROCESSES),
                     "1" if attributes else "0"],
                    stdout=log, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL))
            self.outs.append(out)

    def progress(self) -> tuple[int, int]:
        """(RunJobs of new instances seen, hosts joined), from the progress files."""
        runs = joined = 0
        for out in self.outs:
            try:
                state = json.loads(out.with_suffix(".progress").read_text())
            except (OSError, ValueError):
                continue
            runs += state["runs"]
            joined += state["joined"]
        return runs, joined

    def stop(self) -> list[tuple[float, str]]:
        """Stop them; (first RunJob time, sending replica) of every instance, sorted."""
        if not self.procs:
            return []
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        times: list[tuple[float, str]] = []
        for proc, out in zip(self.procs, self.outs, strict=True):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if out.exists():
                record = json.loads(out.read_text())
                times += [(row[0], row[1]) for row in record["first_seen"]]
                self.joins += [(t, target) for t, target in record["joins"]]
        self.procs.clear()
        self.joins.sort()
        return sorted(times)


def wait_for(what: str, check: Any, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout_s:.0f} s")
        time.sleep(0.1)


# (share of jobs, -R): with --requirements. Half the hosts are of each type.
REQUIREMENTS = ((0.30, ""), (0.20, "select[type == X86_64] rusage[mem=2000]"),
                (0.20, "select[type == ARM && maxmem >= 128000] order[-mem]"),
                (0.15, "select[defined(gpu)] rusage[gpu=1]"),
                (0.15, "select[r1m < 8] order[r1m] rusage[mem=500]"))


def submit(client: Client, count: int, seconds: tuple[int, int], rng: random.Random,
           requirements: bool = False) -> None:
    shares, reqs = [s for s, _ in REQUIREMENTS], [r for _, r in REQUIREMENTS]
    for start in range(0, count, JOBS_PER_REQUEST):
        specs = [api.JobSpec(command=["sleep", str(rng.randint(*seconds))],
                             resource_req=rng.choices(reqs, shares)[0] if requirements else "")
                 for _ in range(min(JOBS_PER_REQUEST, count - start))]
        client.submit(specs)


def worker_tokens(hosts: int) -> tuple[dict[str, str], str]:
    """A worker token for each simulated host, and the cluster-file lines that admit them."""
    tokens, lines = {}, []
    for i in range(hosts):
        name = f"sim{i:05d}"
        tokens[name], digest = new_token()
        lines += ["[[auth.tokens]]", f'sha256 = "{digest}"', f'user = "{name}"', 'role = "worker"', ""]
    return tokens, "\n".join(lines)


def run(hosts: int = 500, slots: int = 40, jobs: int = 20_000, kills: int = 5,
        seed: int = 1, profile: Path | None = None, logs: Path | None = None,
        insecure: bool = False, requirements: bool = False, history: int = 0) -> dict[str, Any]:
    """`insecure`: plaintext gRPC (tokens are still checked), to compare with TLS. `requirements`:
    hosts with attributes and load, jobs with -R (the module's docstring). `history`: the cluster
    starts from a state holding this many finished jobs in its history (bench/big_state.py)."""
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="xce-fleet-") as tmp:
        data = Path(tmp)
        tokens, admitted = worker_tokens(hosts)
        cluster = LocalCluster(data, extra_config="[hosts]\nheartbeat_s = 2.0\nheartbeat_timeout_s = 10.0\n\n"
                               + admitted, insecure=insecure)
        token_file = data / "fleet-tokens.json"
        token_file.write_text(json.dumps(tokens))
        scheduler = LocalScheduler(cluster, "fleet-sched", lease_s=5.0)
        fleet: SimFleet | None = None
        if history:
            built = big_state.build(HISTORY_WORK, cluster.config.cluster_id, list(cluster.config.queues),
                                    finished=history, live=0, running=0, progress=True, hosts=0)
            big_state.seed(cluster, built)
        try:
            cluster.start()
            cluster.leader(timeout_s=60)
            fleet = SimFleet(data, cluster.addresses, hosts, slots, cluster.config_path, token_file,
                             attributes=requirements)
            started = time.monotonic()
            wait_for(f"{hosts} hosts joined", lambda: fleet is not None and fleet.progress()[1] >= hosts, 120)
            joined_s = time.monotonic() - started
            with Client(cluster.addresses, cluster.credentials, deadline_s=60.0) as client:
                if requirements:  # select[r1m < 8] waits for a host's load to be committed
                    wait_for("every host's load", lambda: all(
                        h.load for h in client.list_hosts().hosts), 120)
                submit(client, jobs, (2, 30), rng, requirements)
                scheduler_start = time.time()
                scheduler.start()
                roles = _roles(cluster, scheduler, fleet)
                cpu_before = {role: cpu_s(pid) for role, pid in roles.items()}
                if profile is not None:  # from the first placement on
                    wait_for("a first placement", lambda: fleet is not None and fleet.progress()[0] > 0, 120)
                profilers = _profile(profile, {role: pid for role, pid in roles.items()
                                               if not role.startswith("fleet")})
                wait_for(f"{jobs} placements", lambda: fleet is not None and fleet.progress()[0] >= jobs, 600)
                cpu = {role: round(cpu_s(pid) - cpu_before[role], 1) for role, pid in roles.items()}
                submit(client, jobs, (2, 30), rng, requirements)  # the next wave, as slots free up
                for profiler in profilers:
                    profiler.wait(timeout=60)
                submitted = 2 * jobs

                def backlog() -> int:
                    """Jobs waiting (submitted, not placed yet) after topping them up to two waves."""
                    nonlocal submitted
                    assert fleet is not None
                    # Two waves' worth: a wave refills the slots idle since the last ended, the other waits.
                    # They run longer than the first waves: slots of 2-30 s jobs free up faster (~1,250/s)
                    # than one client submits (~700/s), and the backlog was gone by every kill.
                    more = 2 * jobs - (submitted - fleet.progress()[0])
                    if more > 0:
                        submit(client, more, KILL_PHASE_SECONDS, rng, requirements)
                        submitted += more
                    return submitted - fleet.progress()[0]

                kill_times = _kill_leaders(cluster, fleet, kills, backlog)
                time.sleep(2.0)  # the last kill's first new dispatch reaches the records
            times = fleet.stop()
        finally:
            try:
                scheduler.kill()
                if fleet is not None:
                    fleet.stop()
            finally:
                cluster.stop()
                if logs is not None:
                    logs.mkdir(parents=True, exist_ok=True)
                    for path in [*data.glob("*.log"), *data.glob("fleet-*.json")]:
                        shutil.copy(path, logs / path.name)
    wave = [t for t, _ in times[:jobs]]
    span = wave[-1] - wave[0] if len(wave) == jobs else float("nan")
    # A RunJob the dead leader sent just before the kill may land just after it: not a failover.
    gaps = _first_after_each_kill(times, kill_times)
    # Where each kill's time went: the first host's join to another replica (the new leader serving).
    first_joins = _first_after_each_kill(fleet.joins if fleet is not None else [], kill_times)
    missing = sum(1 for g in gaps if g != g or g > STALL_S)
    gaps = [g if g == g and g <= STALL_S else STALL_S for g in gaps]  # a stall counts as at least STALL_S
    return {
        "hosts": hosts, "slots_per_host": slots, "jobs": jobs, "join_s": round(joined_s, 2),
        "requirements": requirements, "tls": not insecure, "history": history,
        "placements_per_s": round(jobs / span, 1) if span > 0 else None,
        "first_to_last_s": round(span, 2),
        "scheduler_start_to_last_s": round(wave[-1] - scheduler_start, 2) if wave else None,
        "target_placements_per_s": 10_000 if requirements else 12_000,
        "target_failover_p99_ms": 1000,
        "cpu_s_during_placement": cpu,
        "failover": {"kills": len(kill_times), "no_new_dispatch_seen": missing,
                     "samples_ms": [ms(g) for g in gaps],
                     "kill_to_first_join_ms": [ms(g) for g in first_joins],
                     "killed_at": [round(kill, 3) for kill, _ in kill_times],
                     "p50_ms": ms(percentile(gaps, 50)) if gaps else None,
                     "p99_ms": ms(percentile(gaps, 99)) if gaps else None,
                     "max_ms": ms(max(gaps)) if gaps else None},
    }


def _first_after_each_kill(events: list[tuple[float, str]],
                           kill_times: list[tuple[float, str]]) -> list[float]:
    """For each kill, the time to the first event (time, replica) of another replica than the killed
    one (nan: none)."""
    return [next((t for t, replica in events if t > kill and replica != killed), float("nan")) - kill
            for kill, killed in kill_times]


def _roles(cluster: LocalCluster, scheduler: LocalScheduler, fleet: SimFleet) -> dict[str, int]:
    leader = cluster.leader()
    roles = {("leader" if rid == leader else f"follower-{rid}"): p.pid for rid, p in cluster.procs.items()}
    roles["scheduler"] = scheduler.pid()
    roles |= {f"fleet-{i}": p.pid for i, p in enumerate(fleet.procs)}
    return roles


def cpu_s(pid: int, reaped: bool = False) -> float:
    """User + system CPU seconds of a live process (Linux /proc); `reaped`: with those of the
    children it has waited for."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = int(fields[11]) + int(fields[12]) + (int(fields[13]) + int(fields[14]) if reaped else 0)
    return ticks / os.sysconf("SC_CLK_TCK")


def _profile(into: Path | None, pids: dict[str, int], seconds: int = 15) -> list[subprocess.Popen[bytes]]:
    """py-spy (if installed) on these processes for `seconds` (the placement phase): raw stacks into
    `into`, a file per process name."""
    spy = Path(sys.executable).parent / "py-spy"
    if into is None or not spy.exists():
        return []
    into.mkdir(parents=True, exist_ok=True)
    return [subprocess.Popen([str(spy), "record", "--gil", "-p", str(pid), "-d", str(seconds), "-f", "raw",
                              "-o", str(into / f"{name}.txt")], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
            for name, pid in pids.items()]


def _kill_leaders(cluster: LocalCluster, fleet: SimFleet, kills: int,
                  top_up: Callable[[], int]) -> list[tuple[float, str]]:
    """kill -9 the leader `kills` times while dispatches go on: (kill time, its address) each. Before
    each kill `top_up` (which says how many jobs wait) is called until MIN_WAITING jobs wait, for at
    most STALL_S: a kill with nothing left to dispatch would wait for a dispatch that never comes."""
    kill_times = []
    for _ in range(kills):
        deadline = time.monotonic() + STALL_S
        while top_up() < MIN_WAITING and time.monotonic() < deadline:
            time.sleep(1.0)
        time.sleep(3.0)  # dispatches flowing before the kill
        leader = cluster.leader(timeout_s=60)
        before = fleet.progress()[0]
        kill_times.append((time.time(), cluster.address(leader)))
        cluster.kill(leader)
        try:
            wait_for("a new dispatch after the kill", lambda b=before: fleet.progress()[0] > b, STALL_S)
        except TimeoutError:  # counted (no_new_dispatch_seen, and as STALL_S in the figures): the run goes on
            print(f"fleet: no new dispatch within {STALL_S:.0f} s of kill {len(kill_times)}", file=sys.stderr,
                  flush=True)
        cluster.restart(leader)
        cluster.leader(timeout_s=60)
    return kill_times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--hosts", type=int, default=500)
    ap.add_argument("--slots", type=int, default=40)
    ap.add_argument("--jobs", type=int, default=None,
                    help="default 20,000 (--requirements: 90%% of the slots)")
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--profile", type=Path, help="py-spy each replica and the scheduler into this directory")
    ap.add_argument("--logs", type=Path, help="copy the daemons' logs into this directory")
    ap.add_argument("--insecure", action="store_true", help="plaintext gRPC (tokens still checked)")
    ap.add_argument("--history", type=int, default=0,
                    help="start from a state with this many finished jobs in history (built once, cached)")
    ap.add_argument("--requirements", action="store_true",
                    help="hosts with attributes and load, jobs with -R (default jobs: 90%% of the slots)")
    args = ap.parse_args()
    jobs = args.jobs if args.jobs is not None else \
        int(args.hosts * args.slots * 0.9) if args.requirements else 20_000
    result = run(args.hosts, args.slots, jobs, args.kills, profile=args.profile, logs=args.logs,
                 insecure=args.insecure, requirements=args.requirements, history=args.history)
    print(summary(result))
    print(json.dumps(result))
    return 0


def _p50(samples_ms: list[float | None]) -> float | None:
    seen = [s for s in samples_ms if s is not None]
    return round(percentile(seen, 50), 2) if seen else None


def summary(result: dict[str, Any]) -> str:
    failover = result["failover"]
    mode = (f", {result['history']:,} finished jobs in history" if result.get("history") else "") + \
        (" with -R requirements" if result.get("requirements") else "") + \
        (", TLS" if result.get("tls") else ", plaintext")
    return (f"fleet: {result['hosts']} hosts x {result['slots_per_host']} slots, "
            f"{result['jobs']:,} jobs{mode}: "
            f"{result['placements_per_s']:,} committed placements/s "
            f"(first to last RunJob {result['first_to_last_s']} s; target >= "
            f"{result['target_placements_per_s']:,}/s)\n"
            f"failover under that load ({failover['kills']} kills): kill -> first new dispatch p50 "
            f"{failover['p50_ms']} ms, p99 {failover['p99_ms']} ms, max {failover['max_ms']} ms; "
            f"{failover['no_new_dispatch_seen']} with none within {STALL_S:.0f} s; the first host re-joined "
            f"p50 {_p50(failover['kill_to_first_join_ms'])} ms after the kill "
            f"(target p99 <= {result['target_failover_p99_ms']} ms over 10 kills)")


if __name__ == "__main__":
    sys.exit(main())
