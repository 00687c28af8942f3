"""Load and failover against the three-member etcd started by up.sh.

Runs in etcd's own virtual environment (etcd3 0.12 needs protobuf 3), so it
cannot import the project; it shares only the standard-library load
generator in bench/loadgen.py. Progress goes to stderr; the last line on
stdout is one JSON object with every figure.

Adapted from shared/peers/etcd/bench.py: 300-byte values (the size of the
XCE job spec), several failovers per run with the killed member restarted
and caught up in between, and results as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import etcd3

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from loadgen import ms, percentile, run_clients  # noqa: E402 - after the path is set

VALUE = os.urandom(150).hex()  # 300 bytes of ASCII
Endpoint = tuple[str, int]
FAILOVER_LIMIT_S = 60.0
CATCH_UP_TIMEOUT_S = 60.0
SETTLE_S = 1.0  # as in the XCE part: let the restarted member reconnect to both peers


def make_put_op(endpoint: Endpoint, client_id: int, run: str) -> Callable[[int], None]:
    """Runs in a client process: its own connection, warmed up by one put."""
    client = etcd3.client(host=endpoint[0], port=endpoint[1], timeout=10)
    client.put(f"warm/{run}/{client_id}", VALUE)

    def put(n: int) -> None:
        client.put(f"bench/{run}/{client_id}/{n}", VALUE)  # distinct keys; returns once committed

    return put


def leader_index(eps: list[Endpoint], timeout_s: float = 30.0) -> int:
    """Index into eps of the member that a live member names as leader."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for host, port in eps:
            try:
                client = etcd3.client(host=host, port=port, timeout=1)
                try:
                    return int(client.status().leader.name[1:]) - 1  # members are m1..m3
                finally:
                    client.close()
            except Exception:  # noqa: BLE001 - down or no leader yet: ask the next one
                continue
        time.sleep(0.05)
    raise TimeoutError(f"no etcd leader within {timeout_s:.0f} s")


def throughput(eps: list[Endpoint], clients: int, seconds: float, max_ops: int) -> dict[str, Any]:
    leader = leader_index(eps)
    # One client talks to the leader; more are spread over the members, as
    # etcd clients usually are (a follower forwards the proposal).
    targets = [eps[leader]] if clients == 1 else [eps[i % len(eps)] for i in range(clients)]
    run = f"{clients}c-{time.time_ns()}"
    args = [(targets[i], i, run) for i in range(clients)]
    return run_clients(make_put_op, args, seconds, max_ops).summary()


def member_pid(piddir: Path, member: int) -> int:
    pid = int((piddir / f"m{member}.pid").read_text().strip())
    comm = Path(f"/proc/{pid}/comm").read_text().strip()
    if comm != "etcd":  # a stale pid file must never make us kill something else
        raise RuntimeError(f"pid {pid} of m{member} is {comm!r}, not etcd")
    return pid


def probe_put(clients: list[Any], start: float) -> float | None:
    """Round-robin puts over the survivors until one commits; bounded in time and count."""
    for attempt in range(10_000):
        if time.monotonic() - start > FAILOVER_LIMIT_S:
            break
        try:
            clients[attempt % len(clients)].put("failover/probe", VALUE)
            return time.monotonic() - start
        except Exception:  # noqa: BLE001 - no leader yet or the request timed out
            time.sleep(0.01)
    return None


def failover_once(eps: list[Endpoint], piddir: Path, up_script: Path) -> dict[str, Any]:
    li = leader_index(eps)
    survivors = [ep for i, ep in enumerate(eps) if i != li]
    # Connected and warm before the kill, with a short per-put timeout (as in
    # the shared peer script) so a put stuck on the dead leader gives up fast.
    clients = [etcd3.client(host=h, port=p, timeout=0.2) for h, p in survivors]
    try:
        for client in clients:
            client.put("failover/warm", VALUE)
        pid = member_pid(piddir, li + 1)
        start = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        elapsed = probe_put(clients, start)
    finally:
        for client in clients:
            client.close()
    restart_member(pid, up_script)
    wait_caught_up(eps, li)
    return {"killed": li + 1, "ms": None if elapsed is None else ms(elapsed)}


def restart_member(pid: int, up_script: Path) -> None:
    # up.sh restarts every member whose pid is not a live etcd (our copy
    # treats a not-yet-reaped zombie as dead), keeping the member's data.
    subprocess.run([str(up_script)], check=True, capture_output=True, timeout=120,
                   stdin=subprocess.DEVNULL)


def wait_caught_up(eps: list[Endpoint], member_index: int) -> None:
    leader = leader_index(eps)
    deadline = time.monotonic() + CATCH_UP_TIMEOUT_S
    target = _status(eps[leader]).raft_index
    while time.monotonic() < deadline:
        try:
            if _status(eps[member_index]).raft_index >= target:
                time.sleep(SETTLE_S)
                return
        except Exception:  # noqa: BLE001 - still starting
            pass
        time.sleep(0.1)
    raise TimeoutError(f"etcd m{member_index + 1} did not catch up")


def _status(ep: Endpoint) -> Any:
    client = etcd3.client(host=ep[0], port=ep[1], timeout=1)
    try:
        return client.status()
    finally:
        client.close()


def failover(eps: list[Endpoint], piddir: Path, up_script: Path, kills: int) -> dict[str, Any]:
    samples = []
    for i in range(kills):
        sample = failover_once(eps, piddir, up_script)
        samples.append(sample)
        log(f"etcd failover {i + 1}/{kills}: killed m{sample['killed']}, first put after "
            f"{sample['ms']} ms")
    seconds = [s["ms"] / 1000 for s in samples if s["ms"] is not None]
    return {"kills": len(samples), "failed": len(samples) - len(seconds),
            "p50_ms": ms(percentile(seconds, 50)), "p99_ms": ms(percentile(seconds, 99)),
            "max_ms": ms(max(seconds, default=float("nan"))), "samples": samples}


def log(message: str) -> None:
    print(f"  {message}", file=sys.stderr, flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--clients", default="1,16")
    ap.add_argument("--max-ops", type=int, default=100_000)
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--members", type=int, default=3)
    ap.add_argument("--port0", type=int, default=23791)
    ap.add_argument("--piddir", type=Path, required=True)
    ap.add_argument("--up", type=Path, required=True, help="up.sh, to restart a killed member")
    a = ap.parse_args()
    eps = [("127.0.0.1", a.port0 + i) for i in range(a.members)]
    result: dict[str, Any] = {"value_bytes": len(VALUE), "throughput": {}}
    for clients in (int(c) for c in a.clients.split(",")):
        result["throughput"][str(clients)] = summary = throughput(eps, clients, a.seconds, a.max_ops)
        log(f"etcd {clients} client(s): {summary['per_s']:.0f} puts/s")
    if a.kills:
        result["failover"] = failover(eps, a.piddir, a.up, a.kills)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
