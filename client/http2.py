"""A small gRPC client over HTTP/2, for the command line: unary and server-streaming calls.

Theory of operation. The grpc package costs a command 40-80 ms to import
(and its core imports asyncio), more than all the rest of `xce submit`. A
gRPC call is an HTTP/2 POST: request headers (`:path /xce.v1.JobService/
SubmitJobs`, `content-type: application/grpc`, `te: trailers`, the
caller's metadata), the message as one length-prefixed DATA payload, and in
return headers, the response messages, and trailers with `grpc-status`,
`grpc-message` and any metadata (`x-xce-leader`). This module speaks just
that much of HTTP/2 (RFC 9113) over one TLS (ALPN h2) or plain TCP
connection per replica, with the standard library's socket and ssl:

- HPACK (RFC 7541): requests use literal fields without indexing (no state
  to keep); responses are decoded with the static table, a dynamic table,
  and the Huffman code (client/hpack_tables.py).
- Flow control: the client opens its windows wide at the start (it reads
  every response whole), and sends its own DATA within the server's window,
  waiting for WINDOW_UPDATE when it is spent.
- SETTINGS and PING are answered; GOAWAY and RST_STREAM end the call as
  UNAVAILABLE (retried by the client library, with the same request id).

Failures come out as `RpcFailure(code, details, trailers)` with gRPC's code
names, which `client.channel.Client` handles as it handles grpc's errors.
"""

from __future__ import annotations

import os
import socket
import ssl
import struct
import time
from collections.abc import Callable, Iterator, Sequence

from client.credentials import Credentials
from client.hpack_tables import HUFFMAN_CODES, HUFFMAN_LENGTHS, STATIC_TABLE

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = \
    0x0, 0x1, 0x3, 0x4, 0x5, 0x6, 0x7, 0x8, 0x9
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY = 0x1, 0x1, 0x4, 0x8, 0x20
SETTINGS_HEADER_TABLE_SIZE, SETTINGS_ENABLE_PUSH, SETTINGS_INITIAL_WINDOW_SIZE, SETTINGS_MAX_FRAME_SIZE = \
    0x1, 0x2, 0x4, 0x5
WINDOW = (1 << 31) - 1
MAX_MESSAGE = 64 << 20  # bytes of one response message

# gRPC status numbers -> names (grpc.StatusCode's)
CODES = ("OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
         "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
         "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED")


class RpcFailure(Exception):
    def __init__(self, code: str, details: str, trailers: Sequence[tuple[str, str]] = ()) -> None:
        super().__init__(f"{code}: {details}")
        self.code = code
        self.details = details
        self.trailers = tuple(trailers)


# ---------------------------------------------------------------- HPACK


def encode_headers(headers: Sequence[tuple[str, str]]) -> bytes:
    """Literal fields without indexing, new names, no Huffman: nothing for either side to remember."""
    out = bytearray()
    for name, value in headers:
        out.append(0)
        for text in (name.encode(), value.encode()):
            out += _integer(len(text), 7, 0)
            out += text
    return bytes(out)


def _integer(value: int, prefix: int, flags: int) -> bytes:
    limit = (1 << prefix) - 1
    if value < limit:
        return bytes([flags | value])
    out = bytearray([flags | limit])
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_HUFFMAN = {(length, code): symbol for symbol, (code, length) in enumerate(zip(HUFFMAN_CODES, HUFFMAN_LENGTHS,
                                                                              strict=True))}


def huffman_decode(data: bytes) -> bytes:
    out = bytearray()
    code = length = 0
    for byte in data:
        for shift in range(7, -1, -1):
            code = (code << 1) | ((byte >> shift) & 1)
            length += 1
            symbol = _HUFFMAN.get((length, code))
            if symbol is not None:
                if symbol == 256:
                    raise ValueError("EOS in a Huffman string")
                out.append(symbol)
                code = length = 0
            elif length > 30:
                raise ValueError("bad Huffman code")
    if length > 7 or code != (1 << length) - 1:  # padding: the most significant bits of EOS, all ones
        raise ValueError("bad Huffman padding")
    return bytes(out)


class HeaderDecoder:
    """HPACK decoding with the dynamic table (RFC 7541 section 2.3)."""

    def __init__(self, max_size: int = 4096) -> None:
        self.limit = max_size  # what SETTINGS_HEADER_TABLE_SIZE allows
        self.max_size = max_size
        self.table: list[tuple[str, str]] = []  # newest first
        self.size = 0

    def decode(self, block: bytes) -> list[tuple[str, str]]:
        headers: list[tuple[str, str]] = []
        i = 0
        while i < len(block):
            first = block[i]
            if first & 0x80:  # indexed field
                index, i = _read_integer(block, i, 7)
                headers.append(self._entry(index))
            elif first & 0x40:  # literal with incremental indexing
                index, i = _read_integer(block, i, 6)
                name, value, i = self._literal(block, i, index)
                headers.append((name, value))
                self._add(name, value)
            elif first & 0x20:  # dynamic table size update
                size, i = _read_integer(block, i, 5)
                if size > self.limit:
                    raise ValueError(f"a header table of {size} bytes, past the {self.limit} allowed")
                self.max_size = size
                self._evict()
            else:  # literal without indexing or never indexed
                index, i = _read_integer(block, i, 4)
                name, value, i = self._literal(block, i, index)
                headers.append((name, value))
        return headers

    def _literal(self, block: bytes, i: int, index: int) -> tuple[str, str, int]:
        if index:
            name = self._entry(index)[0]
        else:
            raw, i = _read_string(block, i)
            name = raw.decode("latin-1")
        raw, i = _read_string(block, i)
        return name, raw.decode("latin-1"), i

    def _entry(self, index: int) -> tuple[str, str]:
        if 1 <= index <= len(STATIC_TABLE):
            return STATIC_TABLE[index - 1]
        dynamic = index - len(STATIC_TABLE) - 1
        if 0 <= dynamic < len(self.table):
            return self.table[dynamic]
        raise ValueError(f"header index {index} out of range")

    def _add(self, name: str, value: str) -> None:
        self.table.insert(0, (name, value))
        self.size += len(name) + len(value) + 32
        self._evict()

    def _evict(self) -> None:
        while self.size > self.max_size and self.table:
            name, value = self.table.pop()
            self.size -= len(name) + len(value) + 32


def _read_integer(data: bytes, i: int, prefix: int) -> tuple[int, int]:
    limit = (1 << prefix) - 1
    value = data[i] & limit
    i += 1
    if value < limit:
        return value, i
    shift = 0
    while True:
        if i >= len(data):
            raise ValueError("truncated integer")
        byte = data[i]
        i += 1
        value += (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, i


def _read_string(data: bytes, i: int) -> tuple[bytes, int]:
    huffman = data[i] & 0x80
    length, i = _read_integer(data, i, 7)
    raw = data[i:i + length]
    if len(raw) != length:
        raise ValueError("truncated string")
    return (huffman_decode(raw) if huffman else raw), i + length


# ---------------------------------------------------------------- the connection


class _Stream:
    """The call in progress on a connection."""

    def __init__(self, stream_id: int) -> None:
        self.id = stream_id
        self.headers: list[tuple[str, str]] = []
        self.body = bytearray()
        self.messages: list[bytes] = []
        self.done = False


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


class Connection:
    """One HTTP/2 connection to a replica; calls one at a time (the command line's way)."""

    def __init__(self, address: str, tls: ssl.SSLContext | None, timeout_s: float,
                 connected: socket.socket | None = None) -> None:
        host, _, port = address.rpartition(":")
        self.authority = address
        self.scheme = "https" if tls is not None else "http"
        name = host.strip("[]")
        # An ASCII name as bytes: a str goes through the idna codec (~2 ms to import) in getaddrinfo
        # and in ssl, for nothing (addresses and DNS names are ASCII).
        wire_name: str | bytes = name.encode("ascii") if name.isascii() else name
        raw = connected or socket.create_connection((wire_name, int(port)), timeout=timeout_s)  # type: ignore[arg-type]
        if raw.family in (socket.AF_INET, socket.AF_INET6):
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            self.sock: socket.socket = tls.wrap_socket(raw, server_hostname=wire_name) \
                if tls is not None else raw
        except BaseException:
            raw.close()
            raise
        if tls is not None and self.sock.selected_alpn_protocol() != "h2":  # type: ignore[attr-defined]
            self.sock.close()
            raise RpcFailure("UNAVAILABLE", f"{address} does not speak HTTP/2")
        self.buffer = bytearray()
        self.decoder = HeaderDecoder()
        self.next_stream = 1
        self.send_window = 65535  # the connection's, from the server
        self.stream_window_initial = 65535
        self.window = 65535  # the current stream's send window
        self.max_frame = 16384
        self.closed = False
        self.going_away = False
        self.received = 0  # bytes of DATA since the receive windows were last topped up
        self.active = _Stream(0)
        self._block = bytearray()  # a header block being received, and its stream
        self._block_stream = 0
        self._block_ends = False
        settings = struct.pack(">HIHIHI", SETTINGS_ENABLE_PUSH, 0, SETTINGS_INITIAL_WINDOW_SIZE, WINDOW,
                               SETTINGS_HEADER_TABLE_SIZE, 4096)
        self.sock.sendall(PREFACE + frame(SETTINGS, 0, 0, settings) +
                          frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", WINDOW - 65535)))

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            try:
                self.sock.close()
            except OSError:
                pass

    def abort(self) -> None:
        """End the connection from another thread: a read blocked on it returns at once (a shutdown
        wakes it, where a close would not), and the reader's failure closes it."""
        self.going_away = True
        try:
            socket.socket.shutdown(self.sock, socket.SHUT_RDWR)  # the plain socket's: ssl's drops its state
        except OSError:
            pass

    def call(self, path: str, message: bytes, metadata: Sequence[tuple[str, str]], timeout_s: float,
             ) -> Iterator[bytes]:
        """The response messages of one call, as they come; RpcFailure for a gRPC error status."""
        deadline = time.monotonic() + timeout_s
        stream = self.next_stream
        self.next_stream += 2
        self.active = _Stream(stream)
        timeout_ms = min(99_999_999, max(1, int(timeout_s * 1000)))  # at most 8 digits (gRPC's format)
        headers = [(":method", "POST"), (":scheme", self.scheme), (":path", path),
                   (":authority", self.authority), ("content-type", "application/grpc"), ("te", "trailers"),
                   ("grpc-timeout", f"{timeout_ms}m"), *metadata]
        self.sock.settimeout(max(0.01, timeout_s))
        self.sock.sendall(frame(HEADERS, END_HEADERS, stream, encode_headers(headers)))
        self._send_data(struct.pack(">BI", 0, len(message)) + message, deadline)
        return self._responses(deadline)

    def _send_data(self, body: bytes, deadline: float) -> None:
        active = self.active
        self.window = self.stream_window_initial  # this stream's: a new initial size moves it (_handle)
        sent = 0
        while not active.done:  # an early answer (an error's trailers) ends the sending
            room = min(self.window, self.send_window, self.max_frame)
            if room > 0 or sent == len(body):
                piece = body[sent:sent + room]
                last = sent + len(piece) == len(body)
                self.sock.sendall(frame(DATA, END_STREAM if last else 0, active.id, piece))
                sent += len(piece)
                self.window -= len(piece)
                self.send_window -= len(piece)
                if last:
                    return
                continue
            self._handle(*self._frame(deadline))  # wait for the server to open its window

    def _responses(self, deadline: float) -> Iterator[bytes]:
        active = self.active
        while True:
            while active.messages:
                yield active.messages.pop(0)
            if active.done:
                self._finish(active.headers)
                return
            self._handle(*self._frame(deadline))

    def _handle(self, kind: int, flags: int, on: int, payload: bytes) -> None:
        """One frame from the server, whichever stream it belongs to: header blocks are always
        decoded (HPACK's table is the connection's), the active call's state follows the rest."""
        handler = self._HANDLERS.get(kind)
        if handler is not None:
            handler(self, flags, on, payload)

    def _headers(self, flags: int, on: int, payload: bytes) -> None:
        payload = _unpad(flags, payload)
        if flags & PRIORITY:
            payload = payload[5:]
        self._block_stream, self._block_ends = on, bool(flags & END_STREAM)
        self._block = bytearray()
        self._header_block(flags, on, payload)

    def _continuation(self, flags: int, on: int, payload: bytes) -> None:
        if on != self._block_stream:
            raise ValueError("CONTINUATION of another stream")
        self._header_block(flags, on, payload)

    def _header_block(self, flags: int, on: int, payload: bytes) -> None:
        self._block += payload
        if flags & END_HEADERS:
            decoded = self.decoder.decode(bytes(self._block))
            active = self.active
            if on == active.id:
                active.headers += decoded
                active.done = active.done or self._block_ends

    def _data(self, flags: int, on: int, payload: bytes) -> None:
        self._consumed(on, len(payload))
        active = self.active
        if on != active.id:
            return
        active.body += _unpad(flags, payload)
        body = active.body
        while len(body) >= 5:
            length = struct.unpack(">I", body[1:5])[0]
            if length > MAX_MESSAGE:
                raise RpcFailure("RESOURCE_EXHAUSTED", f"a response message of {length} bytes")
            if len(body) < 5 + length:
                break
            if body[0]:
                raise RpcFailure("INTERNAL", "a compressed response, which was not asked for")
            active.messages.append(bytes(body[5:5 + length]))
            del body[:5 + length]
        active.done = active.done or bool(flags & END_STREAM)

    def _reset(self, flags: int, on: int, payload: bytes) -> None:
        if on == self.active.id:
            self.close()
            raise RpcFailure("UNAVAILABLE", "the server reset the call")

    def _goaway(self, flags: int, on: int, payload: bytes) -> None:
        last_stream = struct.unpack(">I", payload[:4])[0] & 0x7FFFFFFF if len(payload) >= 4 else 0
        self.going_away = True  # no new call on this connection
        if self.active.id > last_stream:
            self.close()
            raise RpcFailure("UNAVAILABLE", "the server is going away")

    def _settings(self, flags: int, on: int, payload: bytes) -> None:
        if flags & ACK:
            return
        for i in range(0, len(payload) - 5, 6):
            key, value = struct.unpack(">HI", payload[i:i + 6])
            if key == SETTINGS_INITIAL_WINDOW_SIZE:
                self.window += value - self.stream_window_initial  # RFC 9113 6.9.2
                self.stream_window_initial = value
            elif key == SETTINGS_MAX_FRAME_SIZE:
                self.max_frame = value
        self.sock.sendall(frame(SETTINGS, ACK, 0))

    def _ping(self, flags: int, on: int, payload: bytes) -> None:
        if not flags & ACK:
            self.sock.sendall(frame(PING, ACK, 0, payload))

    def _window_update(self, flags: int, on: int, payload: bytes) -> None:
        if len(payload) != 4:
            return
        increment = struct.unpack(">I", payload)[0] & 0x7FFFFFFF
        if on == 0:
            self.send_window += increment
        elif on == self.active.id:
            self.window += increment

    _HANDLERS: dict[int, Callable[[Connection, int, int, bytes], None]] = {
        HEADERS: _headers, CONTINUATION: _continuation, DATA: _data, RST_STREAM: _reset,
        GOAWAY: _goaway, SETTINGS: _settings, PING: _ping, WINDOW_UPDATE: _window_update}

    def _consumed(self, stream: int, size: int) -> None:
        """Keep the receive windows open: a long stream (a snapshot of gigabytes) never stalls."""
        self.received += size
        if self.received >= 1 << 30:
            update = struct.pack(">I", self.received)
            self.sock.sendall(frame(WINDOW_UPDATE, 0, 0, update) + frame(WINDOW_UPDATE, 0, stream, update))
            self.received = 0

    def _finish(self, headers: list[tuple[str, str]]) -> None:
        values = dict(headers)
        status = values.get("grpc-status")
        if status is None:
            raise RpcFailure("UNKNOWN" if values.get(":status") == "200" else "UNAVAILABLE",
                             f"no grpc-status (HTTP {values.get(':status', '?')})", headers)
        code = CODES[int(status)] if status.isdigit() and int(status) < len(CODES) else "UNKNOWN"
        if code != "OK":
            raise RpcFailure(code, percent_decode(values.get("grpc-message", "")), headers)

    def _frame(self, deadline: float) -> tuple[int, int, int, bytes]:
        while True:
            if len(self.buffer) >= 9:
                length = int.from_bytes(self.buffer[:3], "big")
                if len(self.buffer) >= 9 + length:
                    kind, flags = self.buffer[3], self.buffer[4]
                    stream = struct.unpack(">I", self.buffer[5:9])[0] & 0x7FFFFFFF
                    payload = bytes(self.buffer[9:9 + length])
                    del self.buffer[:9 + length]
                    return kind, flags, stream, payload
            left = deadline - time.monotonic()
            if left <= 0:
                raise RpcFailure("DEADLINE_EXCEEDED", "no answer in time")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(1 << 16)
            except TimeoutError:
                raise RpcFailure("DEADLINE_EXCEEDED", "no answer in time") from None
            if not chunk:
                raise RpcFailure("UNAVAILABLE", "the connection closed")
            self.buffer += chunk


def percent_decode(text: str) -> str:
    """grpc-message is percent-encoded UTF-8 (gRPC's HTTP/2 protocol)."""
    if "%" not in text:
        return text
    raw = bytearray()
    i = 0
    while i < len(text):
        pair = text[i + 1:i + 3]
        if text[i] == "%" and len(pair) == 2 and all(c in "0123456789abcdefABCDEF" for c in pair):
            raw.append(int(pair, 16))
            i += 3
        else:
            raw += text[i].encode()
            i += 1
    return raw.decode("utf-8", "replace")


def _unpad(flags: int, payload: bytes) -> bytes:
    if not flags & PADDED:
        return payload
    if not payload or payload[0] >= len(payload):
        raise ValueError("bad padding")
    return payload[1:len(payload) - payload[0]]


def tls_context(ca: bytes, cert: bytes | None, key: bytes | None, cert_path: str | None = None,
                key_path: str | None = None) -> ssl.SSLContext:
    """Mutual TLS against the cluster CA, offering HTTP/2 (what a gRPC server takes). ssl loads a
    certificate only from files: the given paths, or else the bytes written where only this process
    can read them."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_verify_locations(cadata=ca.decode())
    context.set_alpn_protocols(["h2"])
    if cert_path and key_path:
        context.load_cert_chain(cert_path, key_path)
    elif cert is not None and key is not None:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="xce-tls-") as tmp:
            cert_file, key_file = os.path.join(tmp, "c"), os.path.join(tmp, "k")
            for path, data in ((cert_file, cert), (key_file, key)):
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
            context.load_cert_chain(cert_file, key_file)
    return context


class Http2Transport:
    """client.channel's transport without the grpc package: one Connection per replica."""

    def __init__(self, credentials: Credentials) -> None:
        self.credentials = credentials
        self._connections: dict[str, Connection] = {}
        self._context: ssl.SSLContext | None = None

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()

    def unary(self, address: str, path: str, request: bytes, metadata: Sequence[tuple[str, str]],
              timeout_s: float) -> bytes:
        # Read to the trailers: the status is there, and the connection is left between calls.
        messages = list(self.stream(address, path, request, metadata, timeout_s))
        if len(messages) != 1:
            raise RpcFailure("INTERNAL", f"{len(messages)} response messages to a unary call")
        return messages[0]

    def stream(self, address: str, path: str, request: bytes, metadata: Sequence[tuple[str, str]],
               timeout_s: float) -> Iterator[bytes]:
        yield from self.open_stream(address, path, request, metadata, timeout_s)

    def open_stream(self, address: str, path: str, request: bytes, metadata: Sequence[tuple[str, str]],
                    timeout_s: float) -> Http2Stream:
        return Http2Stream(self, address, path, request, metadata, timeout_s)

    def _drop(self, address: str, connection: Connection) -> None:
        connection.close()
        if self._connections.get(address) is connection:
            self._connections.pop(address)

    def _connection(self, address: str, timeout_s: float) -> Connection:
        connection = self._connections.get(address)
        if connection is not None and not connection.closed and not connection.going_away:
            return connection
        if connection is not None:
            connection.close()
        try:
            connection = Connection(address, self._tls(), min(timeout_s, CONNECT_TIMEOUT_S))
        except ssl.SSLError as exc:
            raise RpcFailure("UNAVAILABLE", f"{address}: TLS: {exc.reason or exc}") from None
        except OSError as exc:
            raise RpcFailure("UNAVAILABLE", f"{address}: {exc.strerror or exc}") from None
        self._connections[address] = connection
        return connection

    def _tls(self) -> ssl.SSLContext | None:
        credentials = self.credentials
        if credentials.insecure:
            return None
        if self._context is None:
            credentials.check()
            ca, cert, key = credentials.tls()
            assert ca is not None  # check() says so
            files = credentials.files
            paths = (str(files.cert), str(files.key)) if files is not None and files.cert and files.key \
                and (cert, key) == (credentials.cert, credentials.key) else (None, None)
            self._context = tls_context(ca, cert, key, *paths)
        return self._context


class Http2Stream:
    """One call's response messages, read on the transport's connection to `address` when iterated;
    `cancel` from another thread aborts that connection (the command line's calls are one at a
    time, so it carries no other), and the read raises RpcFailure("CANCELLED")."""

    def __init__(self, transport: Http2Transport, address: str, path: str, request: bytes,
                 metadata: Sequence[tuple[str, str]], timeout_s: float) -> None:
        self._transport = transport
        self._call = (address, path, request, tuple(metadata), timeout_s)
        self._connection: Connection | None = None
        self._cancelled = False

    def __iter__(self) -> Iterator[bytes]:
        address, path, request, metadata, timeout_s = self._call
        if self._cancelled:
            raise RpcFailure("CANCELLED", "cancelled by the caller")
        connection = self._connection = self._transport._connection(address, timeout_s)
        if self._cancelled:  # (cancelled while connecting)
            connection.abort()
        try:
            yield from connection.call(path, request, metadata, timeout_s)
        except (OSError, ValueError, IndexError, struct.error) as exc:
            self._transport._drop(address, connection)
            raise self._failure(RpcFailure("UNAVAILABLE", f"{address}: {exc}")) from None
        except RpcFailure as exc:
            if exc.code in ("UNAVAILABLE", "DEADLINE_EXCEEDED") or self._cancelled:
                self._transport._drop(address, connection)
            raise self._failure(exc) from None

    def cancel(self) -> None:
        self._cancelled = True
        connection = self._connection
        if connection is not None:
            connection.abort()

    def _failure(self, failure: RpcFailure) -> RpcFailure:
        return RpcFailure("CANCELLED", "cancelled by the caller") if self._cancelled else failure


CONNECT_TIMEOUT_S = 1.0
