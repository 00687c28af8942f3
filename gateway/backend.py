"""The gateway's way to the replicas: a client per request, carrying that caller's key.

One gRPC transport (channels to each replica, TLS with the cluster's client certificate) serves every
request; the metadata of each call is the caller's own token, so the controllers see and record the
caller, never the gateway. The replica that last led is tried first by every request.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from client.channel import Client
from client.credentials import Credentials
from client.grpc_transport import GrpcTransport

DEADLINE_S = 15.0  # a failover takes about a second; a leader lost for longer is a 503


class Backend:
    def __init__(self, addresses: Sequence[str], credentials: Credentials,
                 deadline_s: float = DEADLINE_S, metrics_address: str = "") -> None:
        self.metrics_address = metrics_address  # its /metrics (its own address), said on the event hub's Sync
        # The gateway's own key never acts for a caller: each request carries its caller's, and the own
        # key only rides beside it as proof of the route (`relay`). It acts only for the event hub.
        self.own = credentials
        self._tls = Credentials(credentials.insecure, credentials.ca, credentials.cert, credentials.key,
                                files=credentials.files)
        self.addresses = list(addresses)
        self.transport = GrpcTransport(self._tls)
        self.deadline_s = deadline_s
        self._leader = self.addresses[0]
        self._lock = threading.Lock()

    def client(self, token: str) -> Client:
        creds = Credentials(self._tls.insecure, self._tls.ca, self._tls.cert, self._tls.key, token=token,
                            files=self._tls.files, relay=self.own.token)
        client = Client(self.addresses, creds, deadline_s=self.deadline_s, transport=self.transport)
        client.prefer(self._leader)
        return client

    @property
    def leader(self) -> str:
        return self._leader

    def learned(self, client: Client) -> None:
        """The replica `client` ended on (the leader, after a redirect) is where the next calls go."""
        with self._lock:
            self._leader = client.target

    def close(self) -> None:
        self.transport.close()
