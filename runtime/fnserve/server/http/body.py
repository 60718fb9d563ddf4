"""Request and response bodies: bounded reading, Content-Encoding and Accept-Encoding.

Every size check counts bytes before they are kept, so neither a huge upload nor a small
compressed "zip bomb" can make the server hold more than `limit` bytes for one request.
"""

from __future__ import annotations

import mmap
import zlib
from typing import Any

from starlette.types import Receive

from fnserve.errors import InvalidInputError, PayloadTooLargeError, UnsupportedError
from fnserve.limits import DEFAULT_LIMITS, quote

# zlib wbits: gzip container, zlib container ("deflate" in HTTP), raw deflate (seen in the wild)
_GZIP_WBITS = 16 + zlib.MAX_WBITS
_ZLIB_WBITS = zlib.MAX_WBITS
_RAW_WBITS = -zlib.MAX_WBITS
_COMPRESS_LEVEL = 6  # zlib's default, as Triton uses
# First slice of input fed per compressed member (doubling after): small enough that a tiny
# member wastes little copying, and large members quickly reach large slices.
_FIRST_CHUNK = 512
# Bodies at least this large are read into an anonymous memory map (see _read_declared).
_MMAP_BYTES = 1 << 20


class ClientDisconnectedError(Exception):
    """The client went away before its request body was read."""


def too_large(size: int, limit: int) -> PayloadTooLargeError:
    """The error for a body of `size` bytes (or more) over `limit`."""
    return PayloadTooLargeError(
        f"request body of {size} bytes or more is over the limit of {limit} bytes"
    )


async def read_body(
    receive: Receive, limit: int, declared: int | None = None
) -> bytes | bytearray | memoryview:
    """Read the whole request body from ASGI `receive`, refusing more than `limit` bytes.

    Args:
        receive: the ASGI receive callable.
        limit: the largest body accepted.
        declared: the Content-Length header, when the client sent one (checked first).

    Raises:
        PayloadTooLargeError: the body is (or is declared) larger than `limit`.
        ClientDisconnectedError: the client disconnected first.
    """
    if declared is not None and declared > limit:
        raise too_large(declared, limit)
    message = await receive()
    if message["type"] != "http.request":
        raise ClientDisconnectedError
    body: bytes = message.get("body", b"")
    if not message.get("more_body", False):
        if len(body) > limit:
            raise too_large(len(body), limit)
        return body
    if declared is not None and declared >= len(body):
        return await _read_declared(receive, declared, body)
    return await _read_chunks(receive, limit, bytearray(body))


async def _read_declared(receive: Receive, declared: int, first: bytes) -> bytearray | memoryview:
    """Fill one buffer of the declared size in place: no regrowth or final copies, which for a
    60 MiB body cost the event loop ~150 ms in one go. Large buffers are anonymous memory
    maps, whose pages the kernel zeroes lazily as chunks land (`bytearray(n)` would zero all
    60 MiB at once, ~50 ms)."""
    buffer: bytearray | mmap.mmap = (
        mmap.mmap(-1, declared) if declared >= _MMAP_BYTES else bytearray(declared)
    )
    view = memoryview(buffer)
    view[: len(first)] = first
    size = len(first)
    more = True
    while more:
        message = await receive()
        if message["type"] != "http.request":
            raise ClientDisconnectedError
        chunk = message.get("body", b"")
        more = message.get("more_body", False)
        end = size + len(chunk)
        if end > declared:  # the HTTP parser holds bodies to Content-Length; never trust it
            raise InvalidInputError("request body is longer than its Content-Length")
        view[size:end] = chunk
        size = end
    if size != declared:
        raise InvalidInputError(f"request body of {size} bytes is shorter than its Content-Length")
    # orjson, zlib and numpy read a bytearray or a memoryview as they read bytes
    return view if isinstance(buffer, mmap.mmap) else buffer


async def _read_chunks(receive: Receive, limit: int, buffer: bytearray) -> bytearray:
    while True:
        if len(buffer) > limit:
            raise too_large(len(buffer), limit)
        message = await receive()
        if message["type"] != "http.request":
            raise ClientDisconnectedError
        buffer += message.get("body", b"")
        if not message.get("more_body", False):
            if len(buffer) > limit:
                raise too_large(len(buffer), limit)
            return buffer


def decompress(
    body: bytes | bytearray | memoryview,
    encoding: bytes,
    limit: int,
    max_members: int = DEFAULT_LIMITS.max_gzip_members,
) -> bytes | bytearray | memoryview:
    """Undo `Content-Encoding` (gzip, deflate, identity) without producing over `limit` bytes.

    Work is linear in the body and the output: the input is fed from a moving offset (never
    re-sliced per gzip member), and a gzip body may hold at most `max_members` members.

    Raises:
        PayloadTooLargeError: the decompressed body is larger than `limit`.
        InvalidInputError: the data is not valid for its encoding, or has too many members.
        UnsupportedError: an encoding other than gzip, deflate or identity.
    """
    name = encoding.strip().lower()
    if name in (b"", b"identity"):
        return body
    if name == b"gzip":
        return _Inflater(body, _GZIP_WBITS, limit, "gzip").run(max_members)
    if name == b"deflate":
        if body[:1] and (body[0] & 0x0F) == 8 and int.from_bytes(body[:2], "big") % 31 == 0:
            return _Inflater(body, _ZLIB_WBITS, limit, "deflate").run(1)
        return _Inflater(body, _RAW_WBITS, limit, "deflate").run(1)
    raise UnsupportedError(
        f"Content-Encoding {quote(encoding.decode('latin-1'))} is not supported, "
        "expected gzip, deflate or identity"
    )


class _Inflater:
    """Inflates back-to-back members of one body in time linear in input and output.

    zlib's `unused_data` copies everything after a member's end, so reading member after
    member from it is quadratic (a 10 MB body of empty gzip members took 68 s). Here each
    member is fed from the body's offset in chunks that start small and double, so the bytes
    copied past a member's end are at most what that member itself consumed (or one small
    chunk).
    """

    __slots__ = ("data", "limit", "name", "offset", "parts", "total", "wbits")

    def __init__(
        self, data: bytes | bytearray | memoryview, wbits: int, limit: int, name: str
    ) -> None:
        self.data = memoryview(data)
        self.wbits = wbits
        self.limit = limit
        self.name = name
        self.offset = 0
        self.total = 0
        self.parts: list[bytes] = []

    def run(self, max_members: int) -> bytes:
        members = 0
        while True:
            if members == max_members:
                raise InvalidInputError(
                    f"request body has more than {max_members} {self.name} members, the limit"
                )
            self._member()
            members += 1
            # gzip allows several members back to back; anything else after the end is junk
            if self.offset >= len(self.data) or self.wbits != _GZIP_WBITS:
                return b"".join(self.parts)

    def _member(self) -> None:
        engine = zlib.decompressobj(self.wbits)
        chunk = _FIRST_CHUNK
        end = len(self.data)
        while not engine.eof:
            if self.offset >= end:
                raise InvalidInputError(f"request body is truncated {self.name} data")
            stop = min(self.offset + chunk, end)
            self._feed(engine, self.data[self.offset : stop])
            self.offset = stop - len(engine.unused_data)
            chunk *= 2

    def _feed(self, engine: Any, piece: memoryview) -> None:
        try:
            out = engine.decompress(piece, self.limit + 1 - self.total)
            # more input than max_length let through waits in unconsumed_tail
            while engine.unconsumed_tail and self.total + len(out) <= self.limit:
                self._keep(out)
                out = engine.decompress(engine.unconsumed_tail, self.limit + 1 - self.total)
        except zlib.error as exc:
            raise InvalidInputError(f"request body is not valid {self.name} data: {exc}") from None
        self._keep(out)

    def _keep(self, out: bytes) -> None:
        self.total += len(out)
        if self.total > self.limit:
            raise too_large(self.total, self.limit)
        self.parts.append(out)


def response_encoding(accept: bytes | None) -> bytes | None:
    """Pick gzip or deflate from an `Accept-Encoding` header (gzip first), or None."""
    if not accept:
        return None
    offered: dict[bytes, float] = {}
    for item in accept.lower().split(b","):
        token, _, params = item.partition(b";")
        offered[token.strip()] = _quality(params)
    for name in (b"gzip", b"deflate"):
        if offered.get(name, 0.0) > 0.0:
            return name
    return None


def _quality(params: bytes) -> float:
    for param in params.split(b";"):
        key, _, value = param.strip().partition(b"=")
        if key == b"q":
            try:
                return float(value)
            except ValueError:
                return 0.0
    return 1.0


def compress(body: bytes, encoding: bytes) -> bytes:
    """Compress a response body as gzip or deflate (zlib container, as HTTP means it)."""
    wbits = _GZIP_WBITS if encoding == b"gzip" else _ZLIB_WBITS
    engine: Any = zlib.compressobj(_COMPRESS_LEVEL, zlib.DEFLATED, wbits)
    return bytes(engine.compress(body) + engine.flush())
