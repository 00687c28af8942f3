"""What a unary call costs a gRPC server in Python, by server kind: the leader's per-submit floor.

The leader's profile of a submit (bench/where_cpu_goes.py) puts half its CPU in grpc.aio's
per-message work. This measures that work alone, for the server kinds the leader could use: a
server whose handler only parses the request and answers (a SubmitJobsRequest of the write
benchmark's size in, a SubmitJobsResponse of one job out), over TLS, under N client processes
calling back to back (sync grpc channels, as bench/xce_bench.py's clients), in a process of its own;
its CPU (from /proc) over the calls it answered.

- `aio`: grpc.aio on asyncio's default loop (what the replicas run);
- `aio-uvloop`: the same on uvloop's loop (when uvloop is installed);
- `sync`: grpc.server with a thread pool of --threads workers.

    .venv/bin/python bench/grpc_server_cost.py [--clients 16] [--seconds 5] [--rounds 3]

Rounds interleave the kinds; prints each kind's median. Asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import select
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import fleet  # noqa: E402
from xce_bench import job_spec  # noqa: E402

from ops.local_cluster import free_ports  # noqa: E402
from xce import pki  # noqa: E402
from xce.v1 import api_pb2 as api  # noqa: E402

METHOD = "/bench.Bench/Submit"
KINDS = ("aio", "aio-uvloop", "sync")


def answer(request: api.SubmitJobsRequest) -> api.SubmitJobsResponse:
    return api.SubmitJobsResponse(jobs=[api.Job(id=1, spec=request.jobs[0])], revision=1)


def _handler(behaviour: grpc.RpcMethodHandler) -> grpc.GenericRpcHandler:
    return grpc.method_handlers_generic_handler("bench.Bench", {"Submit": behaviour})


def _credentials(tls: Path) -> grpc.ServerCredentials:
    key, cert = (tls / "replica-bench.key").read_bytes(), (tls / "replica-bench.crt").read_bytes()
    return grpc.ssl_server_credentials([(key, cert)])


def serve(kind: str, port: int, tls: Path, threads: int) -> None:
    """The server process: answers until killed."""
    unary = grpc.unary_unary_rpc_method_handler
    if kind == "sync":
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=threads))
        server.add_generic_rpc_handlers((_handler(unary(
            lambda request, context: answer(request), request_deserializer=api.SubmitJobsRequest.FromString,
            response_serializer=api.SubmitJobsResponse.SerializeToString)),))
        server.add_secure_port(f"127.0.0.1:{port}", _credentials(tls))
        server.start()
        print("ready", flush=True)
        server.wait_for_termination()
        return

    async def handle(request: api.SubmitJobsRequest,
                     context: grpc.aio.ServicerContext) -> api.SubmitJobsResponse:
        return answer(request)

    async def main() -> None:
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((_handler(unary(
            handle, request_deserializer=api.SubmitJobsRequest.FromString,
            response_serializer=api.SubmitJobsResponse.SerializeToString)),))
        server.add_secure_port(f"127.0.0.1:{port}", _credentials(tls))
        await server.start()
        print("ready", flush=True)
        await server.wait_for_termination()

    if kind == "aio-uvloop":
        import uvloop

        uvloop.run(main())
    else:
        asyncio.run(main())


def _client(port: int, ca: bytes, seconds: float, ready: Any, go: Any, start_at: Any, out: Any) -> None:
    """A client process: connected and warm, it says so (`ready`), then calls from the common
    start (`go`, `start_at`) for `seconds` and puts how many calls it made."""
    channel = grpc.secure_channel(f"127.0.0.1:{port}", grpc.ssl_channel_credentials(ca),
                                  options=[("grpc.ssl_target_name_override", "127.0.0.1")])
    call = channel.unary_unary(METHOD, request_serializer=api.SubmitJobsRequest.SerializeToString,
                               response_deserializer=api.SubmitJobsResponse.FromString)
    request = api.SubmitJobsRequest(request_id="r" * 32, jobs=[job_spec()])
    call(request, timeout=10)
    ready.put(True)
    go.wait(120)
    while time.time() < start_at.value:
        time.sleep(0.001)
    calls = 0
    while time.time() < start_at.value + seconds:
        call(request, timeout=10)
        calls += 1
    channel.close()
    out.put(calls)


def measure(kind: str, tls: Path, clients: int, seconds: float, threads: int) -> dict[str, float]:
    port = free_ports(1)[0]
    context = multiprocessing.get_context("spawn")
    workers: list[Any] = []
    with subprocess.Popen([sys.executable, __file__, "--serve", kind, "--port", str(port), "--tls", str(tls),
                           "--threads", str(threads)], stdout=subprocess.PIPE, text=True) as server:
        try:
            assert server.stdout is not None
            started = select.select([server.stdout], [], [], 60)[0]
            if not started or server.stdout.readline().strip() != "ready":
                raise RuntimeError(f"the {kind} server did not start")
            ready, out, go = context.Queue(), context.Queue(), context.Event()
            start_at = context.Value("d", 0.0)
            ca = (tls / "ca.crt").read_bytes()
            workers = [context.Process(target=_client, args=(port, ca, seconds, ready, go, start_at, out))
                       for _ in range(clients)]
            for worker in workers:
                worker.start()
            for _ in workers:  # every client connected and warm before the clock starts
                ready.get(timeout=120)
            start_at.value = time.time() + 0.2
            go.set()
            while time.time() < start_at.value:
                time.sleep(0.001)
            cpu_before = fleet.cpu_s(server.pid)
            calls = sum(out.get(timeout=seconds + 60) for _ in workers)
            cpu = fleet.cpu_s(server.pid) - cpu_before  # (to the last client's end: within a call)
            for worker in workers:
                worker.join(timeout=30)
                if worker.exitcode != 0:
                    raise RuntimeError(f"a client ended with {worker.exitcode}")
            return {"calls_per_s": calls / seconds, "server_us_per_call": cpu / calls * 1e6}
        finally:
            for worker in workers:
                if worker.is_alive():
                    worker.terminate()
                worker.join(timeout=30)
            server.kill()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=16, help="the sync server's thread pool")
    ap.add_argument("--serve", choices=KINDS, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--tls", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve:
        serve(args.serve, args.port, args.tls, args.threads)
        return 0
    try:
        import uvloop  # noqa: F401
        kinds = list(KINDS)
    except ImportError:
        print("(uvloop is not installed: aio-uvloop left out)")
        kinds = [k for k in KINDS if k != "aio-uvloop"]
    results: dict[str, list[dict[str, float]]] = {kind: [] for kind in kinds}
    with tempfile.TemporaryDirectory(prefix="xce-grpc-cost-") as tmp:
        tls = Path(tmp)
        pki.init_ca(tls, "bench")
        pki.issue(tls, "replica", "bench", sans=["127.0.0.1"])
        for n in range(args.rounds):
            for kind in (kinds if n % 2 == 0 else kinds[::-1]):
                result = measure(kind, tls, args.clients, args.seconds, args.threads)
                results[kind].append(result)
                print(f"round {n + 1} {kind:10} {result['calls_per_s']:8.0f} calls/s  "
                      f"{result['server_us_per_call']:6.0f} us of server CPU a call", flush=True)
    print(f"\nmedian of {args.rounds} ({args.clients} client processes, TLS, a "
          f"{api.SubmitJobsRequest(request_id='r' * 32, jobs=[job_spec()]).ByteSize()}-byte request):")
    for kind in kinds:
        rate = statistics.median(r["calls_per_s"] for r in results[kind])
        cost = statistics.median(r["server_us_per_call"] for r in results[kind])
        print(f"  {kind:10} {rate:8.0f} calls/s  {cost:6.0f} us of server CPU a call")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
