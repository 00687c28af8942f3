"""Peer connections that refuse oversized frames before buffering them.

Theory of operation. A peer's frame is a 4-byte length and that many bytes, which pysyncobj
buffers whole (growing a bytes object 8 KiB at a time: quadratic) before it decrypts anything, so
before the password proves the peer: a length of 2 GiB from anyone who can reach the port made a
leader buffer tens of MiB and lose its leadership, and even an 8 MiB frame cost seconds of CPU.
Until a frame has decrypted (the peer knows the password), frames are small: the handshake's are
tens of bytes. A peer has proven the password once a frame decrypted that carried the nonce this
side sent (a frame captured from another connection could decrypt, but not with this nonce).
Until then only one frame at a time is read, so junk queued behind a small first frame is never
buffered. After that, our largest frame is an AppendEntries batch (raft.APPEND_ENTRIES_BYTES,
2 MiB) or a snapshot chunk (64 KiB), compressed.
"""

from __future__ import annotations

import logging
import struct
from typing import Any

from controller.pysyncobj_internals import Connection

log = logging.getLogger(__name__)

MAX_FRAME_BYTES = 16 << 20
MAX_UNPROVEN_FRAME_BYTES = 64 << 10


class BoundedConnection(Connection):
    """A peer connection that hangs up on a frame longer than it allows before buffering it:
    MAX_UNPROVEN_FRAME_BYTES until the peer has proven the password, MAX_FRAME_BYTES after."""

    _proven = False

    def read_more(self) -> bool:
        if not self._proven and self._first_frame_complete():
            return False  # unproven: parse this frame before reading more
        more = super().read_more()
        buffer = self.read_buffer
        limit = MAX_FRAME_BYTES if self._proven else MAX_UNPROVEN_FRAME_BYTES
        if len(buffer) >= 4:
            (length,) = struct.unpack("i", buffer[:4])
            if not 0 <= length <= limit or len(buffer) > 2 * MAX_FRAME_BYTES + 8:
                log.warning("raft: a frame of %d bytes from %s exceeds %d%s: connection dropped", length,
                            _peer(self.peer_socket), limit,
                            "" if self._proven else " (before the password was proven)")
                self.disconnect()
                return False
        return more

    def _first_frame_complete(self) -> bool:
        buffer = self.read_buffer
        return len(buffer) >= 4 and len(buffer) - 4 >= struct.unpack("i", buffer[:4])[0]

    def parse_message(self) -> Any:
        nonce = self.nonce  # set: the frame must carry it, and the base class checks that it does
        message = super().parse_message()
        if message is not None and nonce:
            self._proven = True
        return message

    def disconnect(self) -> None:
        self._proven = False
        super().disconnect()


def _peer(sock: Any) -> str:
    if sock is None:
        return "?"
    try:
        return str(sock.getpeername())
    except OSError:
        return "?"

