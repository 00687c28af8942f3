"""Readiness for systemd (`Type=notify`): sd_notify(3) without libsystemd.

systemd passes the address of a datagram socket in $NOTIFY_SOCKET; a daemon
sends `READY=1` there once it serves, `STOPPING=1` as it shuts down and
`STATUS=...` to show a line in `systemctl status`. Without the variable
(not under systemd, or `Type=simple`) nothing is sent.
"""

from __future__ import annotations

import logging
import os
import socket

log = logging.getLogger(__name__)


def notify(*fields: str) -> bool:
    """Send `fields` (such as "READY=1", "STATUS=serving") to systemd; False if not asked to."""
    address = os.environ.get("NOTIFY_SOCKET", "")
    if not address:
        return False
    if address.startswith("@"):  # an abstract socket
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(address)
            sock.sendall("\n".join(fields).encode())
    except OSError as exc:  # systemd gone or the socket wrong: the daemon serves regardless
        log.warning("cannot notify systemd at %s: %s", os.environ.get("NOTIFY_SOCKET"), exc)
        return False
    return True
