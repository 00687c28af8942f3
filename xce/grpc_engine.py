"""Which of gRPC core's I/O paths a replica's server takes.

grpcio (1.85) carries its sockets through its EventEngine by default: its listener is an
"experiment" turned on, and each message a server reads or writes crosses threads of the engine's
own before the completion queue that Python polls hears of it. Its older path, whose pollers read
the sockets in the thread that polls the queue, is still there behind the same switch. A unary call
that only parses its request and answers, TLS (bench/grpc_server_cost.py, grpc.aio, 2026-12-08,
medians of 3 interleaved runs): 1 client 483 -> 399 us of the server's CPU a call (1,483 -> 1,662
calls/s), 16 client processes 340 -> 293 us (2,324 -> 2,670 calls/s). The replicas (the daemons
that serve gRPC) serve on the older path unless GRPC_EXPERIMENTS says otherwise. The client switch
is left as gRPC sets it: with the older client path (`-event_engine_client`) too, the gateway's
channel did not reach a cluster whose replicas had all restarted, within a minute. gRPC reads the
variable when its core starts, so this runs before the replica's first import of grpc; a replica's
children (MUNGE's `unmunge`) use no gRPC.
"""

from __future__ import annotations

import os

POLLED_LISTENER = "-event_engine_listener"


def use_polled_listener() -> None:
    """The older I/O path for this process's servers, unless GRPC_EXPERIMENTS is set (an operator's
    choice wins). It changes nothing once grpc is imported (a test holds `xce`'s start to importing
    none before a replica's code)."""
    os.environ.setdefault("GRPC_EXPERIMENTS", POLLED_LISTENER)
