"""A leader's Sync stream as one unbroken sequence of messages: resumed after the last event read
when it breaks (a leader killed, a replica restarted), from whichever replica leads then.

Used by `xce record` (simulator/cluster_recorder.py) and the gateway's event stream (gateway/event_hub.py). A
driver: a stream over the client's transport, a thread's blocking reads.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

from client.channel import RETRYABLE, Client, XceError, hint
from client.http2 import RpcFailure
from xce.v1 import log_pb2 as log

SYNC = "/xce.v1.SyncService/Sync"
STREAM_S = 24 * 3600.0  # one stream's deadline when following; it is then resumed
GIVE_UP_S = 60.0  # no replica answered for this long: give up


def sync_messages(client: Client, history: bool, resume_after: Callable[[], int], stop: threading.Event,
                  clock: Callable[[], float] = time.monotonic,
                  give_up_s: float = GIVE_UP_S) -> Iterator[log.SyncMessage]:
    """The stream's messages, resumed after `resume_after()` (the last event the caller took) when it
    breaks, until `stop` is set. `history`: events only, never a snapshot (a stream resumed after an
    event is always one). Events at or below `resume_after()` are skipped: a resumed stream never
    repeats one. A refusal that is not a retryable one (OUT_OF_RANGE: compacted) raises XceError.
    Which replica, and the pause between tries, are the client's route (client/leader_route.py)."""
    route = client.route
    quiet_since = clock()
    while not stop.is_set():
        after = resume_after()
        request = log.SyncRequest(from_revision=after, history=history or after > 0)
        target = route.target
        try:
            stream = client.transport.stream(target, SYNC, request.SerializeToString(),
                                             client.credentials.metadata(), STREAM_S)
            for raw in stream:
                quiet_since = clock()
                route.reset()
                message = log.SyncMessage.FromString(raw)
                if message.HasField("event") and message.event.revision <= resume_after():
                    continue  # already taken before the stream broke
                yield message
                if stop.is_set():
                    return
        except RpcFailure as failure:
            leader = hint(failure.trailers)
            if failure.code == "FAILED_PRECONDITION" and leader:
                if route.redirected(target, leader):
                    continue
            elif failure.code not in RETRYABLE:
                raise XceError(failure.code, failure.details) from None
            else:
                route.failed(target)
        if clock() - quiet_since > give_up_s:
            raise XceError("UNAVAILABLE", f"no replica served the Sync stream for {give_up_s:.0f} s")
        stop.wait(route.pause_s())
