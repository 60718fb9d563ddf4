"""Request bodies in-process: bounded reading, decompression (zip bombs), response encoding."""

from __future__ import annotations

import gzip
import os
import time
import zlib
from collections.abc import Iterable

import pytest
from starlette.types import Message, Receive

from fnserve.errors import InvalidInputError, PayloadTooLargeError, UnsupportedError
from fnserve.server.http.body import (
    ClientDisconnectedError,
    compress,
    decompress,
    read_body,
    response_encoding,
)
from fnserve.server.http.errors import error_response, http_status


def _receiver(messages: Iterable[Message]) -> Receive:
    queue = list(messages)

    async def receive() -> Message:
        return queue.pop(0)

    return receive


def _chunks(*parts: bytes) -> list[Message]:
    last = len(parts) - 1
    return [{"type": "http.request", "body": p, "more_body": i < last} for i, p in enumerate(parts)]


class TestReadBody:
    async def test_single_message(self) -> None:
        assert await read_body(_receiver(_chunks(b"abc")), 10) == b"abc"

    async def test_chunks_are_joined(self) -> None:
        assert await read_body(_receiver(_chunks(b"ab", b"", b"cd")), 10) == b"abcd"

    async def test_declared_length_over_the_limit_reads_nothing(self) -> None:
        with pytest.raises(PayloadTooLargeError, match="11 bytes"):
            await read_body(_receiver([]), 10, declared=11)

    @pytest.mark.parametrize("parts", [(b"x" * 11,), (b"x" * 6, b"x" * 5), (b"x" * 11, b"y")])
    async def test_stream_over_the_limit(self, parts: tuple[bytes, ...]) -> None:
        with pytest.raises(PayloadTooLargeError):
            await read_body(_receiver(_chunks(*parts)), 10)

    async def test_declared_length_fills_one_buffer(self) -> None:
        body = await read_body(_receiver(_chunks(b"ab", b"cd", b"e")), 10, declared=5)
        assert body == b"abcde"

    async def test_large_declared_body_is_mapped_lazily(self) -> None:
        parts = [os.urandom(700_000), os.urandom(700_000), os.urandom(700_000)]
        body = await read_body(_receiver(_chunks(*parts)), 1 << 22, declared=2_100_000)
        assert isinstance(body, memoryview)  # an anonymous map, not a zero-filled bytearray
        assert body == b"".join(parts)

    async def test_body_shorter_than_declared(self) -> None:
        with pytest.raises(InvalidInputError, match="shorter than its Content-Length"):
            await read_body(_receiver(_chunks(b"ab", b"cd")), 10, declared=5)

    async def test_body_longer_than_declared(self) -> None:
        with pytest.raises(InvalidInputError, match="longer than its Content-Length"):
            await read_body(_receiver(_chunks(b"ab", b"cdef")), 10, declared=5)

    async def test_disconnect_while_reading(self) -> None:
        messages = [*_chunks(b"ab", b"cd")[:1], {"type": "http.disconnect"}]
        with pytest.raises(ClientDisconnectedError):
            await read_body(_receiver(messages), 10)


class TestDecompress:
    DATA = b'{"inputs": []}' * 10

    @pytest.mark.parametrize(
        ("encoding", "packed"),
        [
            (b"gzip", gzip.compress(DATA)),
            (b"GZIP ", gzip.compress(DATA)),
            (b"deflate", zlib.compress(DATA)),
            (b"deflate", zlib.compress(DATA, wbits=-15)),  # raw deflate, as some clients send
            (b"identity", DATA),
            (b"", DATA),
        ],
    )
    def test_round_trip(self, encoding: bytes, packed: bytes) -> None:
        assert decompress(packed, encoding, 1000) == self.DATA

    def test_concatenated_gzip_members(self) -> None:
        assert decompress(gzip.compress(b"ab") + gzip.compress(b"cd"), b"gzip", 10) == b"abcd"

    @pytest.mark.parametrize("encoding", [b"gzip", b"deflate"])
    def test_zip_bomb_stops_at_the_limit(self, encoding: bytes) -> None:
        bomb = compress(b"\x00" * (50 * 1024 * 1024), encoding)
        assert len(bomb) < 100_000
        with pytest.raises(PayloadTooLargeError):
            decompress(bomb, encoding, 1024 * 1024)

    def test_exactly_the_limit_is_accepted(self) -> None:
        assert len(decompress(gzip.compress(b"x" * 100), b"gzip", 100)) == 100

    @pytest.mark.parametrize("packed", [b"not gzip", gzip.compress(DATA)[:-12]])
    def test_corrupt_or_truncated(self, packed: bytes) -> None:
        with pytest.raises(InvalidInputError, match="gzip"):
            decompress(packed, b"gzip", 1000)

    def test_members_past_the_cap_are_refused(self) -> None:
        body = gzip.compress(b"a") * 65
        assert decompress(body[: len(body) // 65 * 64], b"gzip", 1000, max_members=64) == b"a" * 64
        with pytest.raises(InvalidInputError, match="more than 64 gzip members"):
            decompress(body, b"gzip", 1000, max_members=64)

    def test_many_members_take_linear_time(self) -> None:
        # 4 MB of empty members: re-slicing the rest per member (as before) copies ~40 GB
        body = gzip.compress(b"") * 200_000
        start = time.perf_counter()
        assert decompress(body, b"gzip", 1000, max_members=10**6) == b""
        assert time.perf_counter() - start < 5

    def test_large_and_small_members_mixed(self) -> None:
        parts = [os.urandom(300_000), b"", b"x", os.urandom(5000)]
        body = b"".join(gzip.compress(part) for part in parts)
        assert decompress(body, b"gzip", 10**6) == b"".join(parts)

    def test_unknown_encoding(self) -> None:
        with pytest.raises(UnsupportedError, match="br"):
            decompress(b"", b"br", 1000)


class TestResponseEncoding:
    @pytest.mark.parametrize(
        ("header", "expected"),
        [
            (None, None),
            (b"", None),
            (b"gzip", b"gzip"),
            (b"deflate", b"deflate"),
            (b"deflate, gzip", b"gzip"),
            (b"gzip;q=0, deflate", b"deflate"),
            (b"gzip; q=0.5", b"gzip"),
            (b"br", None),
            (b"identity", None),
        ],
    )
    def test_choice(self, header: bytes | None, expected: bytes | None) -> None:
        assert response_encoding(header) == expected

    @pytest.mark.parametrize(
        ("encoding", "unpack"), [(b"gzip", gzip.decompress), (b"deflate", zlib.decompress)]
    )
    def test_compress_matches_what_clients_undo(self, encoding: bytes, unpack: object) -> None:
        assert unpack(compress(b"payload" * 10, encoding)) == b"payload" * 10  # type: ignore[operator]


class TestErrorTable:
    def test_statuses_follow_the_class_hierarchy(self) -> None:
        assert http_status(PayloadTooLargeError("x")) == 413
        assert http_status(InvalidInputError("x")) == 400
        assert http_status(UnsupportedError("x")) == 501

    def test_unexpected_exceptions_hide_their_details(self) -> None:
        status, body = error_response(RuntimeError("/secret/path.py failed"))
        assert status == 500
        assert body == b'{"error":"Internal Server Error"}'
