"""The command line's HTTP/2 (xce/http2.py): HPACK as RFC 7541's examples decode, and the framing."""

from __future__ import annotations

import pytest

from xce import http2


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
