"""The command line's HTTP/2 (client/http2.py): HPACK as RFC 7541's examples decode, and the framing."""

from __future__ import annotations

import pytest

from client import http2


def test_huffman_strings_decode_as_rfc_7541_c4_says() -> None:
    assert http2.huffman_decode(bytes.fromhex("f1e3c2e5f23a6ba0ab90f4ff")) == b"www.example.com"
    assert http2.huffman_decode(bytes.fromhex("a8eb10649cbf")) == b"no-cache"
    with pytest.raises(ValueError):
        http2.huffman_decode(bytes.fromhex("f1e3c2e5f23a6ba0ab90f400"))  # padding not all ones


def test_header_blocks_decode_with_the_dynamic_table_rfc_7541_c4() -> None:
    decoder = http2.HeaderDecoder()
    first = decoder.decode(bytes.fromhex("828684418cf1e3c2e5f23a6ba0ab90f4ff"))
    assert first == [(":method", "GET"), (":scheme", "http"), (":path", "/"),
                     (":authority", "www.example.com")]
    second = decoder.decode(bytes.fromhex("828684be5886a8eb10649cbf"))  # index 62: the entry the first added
    assert second[3] == (":authority", "www.example.com") and second[4] == ("cache-control", "no-cache")
    decoder.decode(bytes.fromhex("20"))  # a size update to 0 empties the table
    with pytest.raises(ValueError):
        decoder.decode(bytes.fromhex("be"))


def test_what_the_client_encodes_decodes_back() -> None:
    headers = [(":path", "/xce.v1.JobService/SubmitJobs"), ("authorization", "Bearer " + "x" * 300)]
    assert http2.HeaderDecoder().decode(http2.encode_headers(headers)) == headers


def test_grpc_messages_are_percent_decoded() -> None:
    assert http2.percent_decode("no job 17%5B1%5D: %E2%9C%93 100%") == "no job 17[1]: \u2713 100%"


class FakeServer:
    """The server end of a socketpair, speaking frames a test writes by hand."""

    def __init__(self) -> None:
        import socket

        self.server, client = socket.socketpair()
        self.connection = http2.Connection("fake:1", None, 5.0, connected=client)
        self.buffer = b""

    def read_frame(self) -> tuple[int, int, int, bytes]:
        while True:
            if self.buffer.startswith(http2.PREFACE):
                self.buffer = self.buffer[len(http2.PREFACE):]
            if len(self.buffer) >= 9:
                length = int.from_bytes(self.buffer[:3], "big")
                if len(self.buffer) >= 9 + length:
                    kind, flags = self.buffer[3], self.buffer[4]
                    stream = int.from_bytes(self.buffer[5:9], "big")
                    payload, self.buffer = self.buffer[9:9 + length], self.buffer[9 + length:]
                    return kind, flags, stream, payload
            self.buffer += self.server.recv(65536)

    def request(self) -> tuple[int, bytes]:
        """The next call's stream and body, once the client ended its half."""
        body = b""
        while True:
            kind, flags, stream, payload = self.read_frame()
            if kind == http2.DATA:
                body += payload
                if flags & http2.END_STREAM:
                    return stream, body

    def send(self, *frames: bytes) -> None:
        self.server.sendall(b"".join(frames))

    def close(self) -> None:
        self.connection.close()
        self.server.close()


def _literal(name: str, value: str, indexing: bool = False) -> bytes:
    return bytes([0x40 if indexing else 0]) + bytes([len(name)]) + name.encode() + bytes([len(value)]) + \
        value.encode()


def test_trailers_indexed_in_one_call_decode_in_the_next() -> None:
    import threading

    fake = FakeServer()

    def serve() -> None:
        for call in range(2):
            stream, body = fake.request()
            trailers = _literal("grpc-status", "0", indexing=True) if call == 0 else bytes([0xBE])
            fake.send(http2.frame(http2.HEADERS, http2.END_HEADERS, stream, bytes([0x88])),
                      http2.frame(http2.DATA, 0, stream, body),  # the request, echoed
                      http2.frame(http2.HEADERS, http2.END_HEADERS | http2.END_STREAM, stream, trailers))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        for word in (b"first", b"second"):
            assert list(fake.connection.call("/x/Y", word, (), 5.0)) == [word]
    finally:
        thread.join(5)
        fake.close()


def test_a_request_larger_than_the_window_waits_for_updates_and_an_early_error_ends_it() -> None:
    import struct
    import threading

    fake = FakeServer()
    big = b"x" * 100_000

    def serve() -> None:
        window = struct.pack(">HI", http2.SETTINGS_INITIAL_WINDOW_SIZE, 1000)
        fake.send(http2.frame(http2.SETTINGS, 0, 0, window))
        received = 0
        while received < len(big) + 5:
            kind, flags, stream, payload = fake.read_frame()
            if kind == http2.DATA:
                received += len(payload)
                update = struct.pack(">I", len(payload))
                fake.send(http2.frame(http2.WINDOW_UPDATE, 0, 0, update),
                          http2.frame(http2.WINDOW_UPDATE, 0, stream, update))
        fake.send(http2.frame(http2.HEADERS, http2.END_HEADERS, stream, bytes([0x88])),
                  http2.frame(http2.DATA, 0, stream, b"\0\0\0\0\2ok"),
                  http2.frame(http2.HEADERS, http2.END_HEADERS | http2.END_STREAM, stream,
                              _literal("grpc-status", "0")))
        # Second call: refused at once, with trailers only, before its body is in.
        while True:
            kind, flags, on, payload = fake.read_frame()
            if kind == http2.HEADERS:
                break
        fake.send(http2.frame(http2.HEADERS, http2.END_HEADERS | http2.END_STREAM, on,
                              bytes([0x88]) + _literal("grpc-status", "8") +
                              _literal("grpc-message", "too%20big")))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        assert list(fake.connection.call("/x/Y", big, (), 10.0)) == [b"ok"]
        with pytest.raises(http2.RpcFailure) as failure:
            list(fake.connection.call("/x/Y", big, (), 10.0))
        assert (failure.value.code, failure.value.details) == ("RESOURCE_EXHAUSTED", "too big")
    finally:
        thread.join(5)
        fake.close()
