"""Request and response bodies: bounded reading, Content-Encoding and Accept-Encoding.

Every size check counts bytes before they are kept, so neither a huge upload nor a small
compressed "zip bomb" can make the server hold more than `limit` bytes for one request.
"""

from __future__ import annotations

import zlib
from typing import Any

from starlette.types import Receive

from fnserve.errors import InvalidInputError, PayloadTooLargeError, UnsupportedError

# zlib wbits: gzip container, zlib container ("deflate" in HTTP), raw deflate (seen in the wild)
_GZIP_WBITS = 16 + zlib.MAX_WBITS
_ZLIB_WBITS = zlib.MAX_WBITS
_RAW_WBITS = -zlib.MAX_WBITS
_COMPRESS_LEVEL = 6  # zlib's default, as Triton uses


class ClientDisconnectedError(Exception):
    """The client went away before its request body was read."""


def too_large(size: int, limit: int) -> PayloadTooLargeError:
    """The error for a body of `size` bytes (or more) over `limit`."""
    return PayloadTooLargeError(
        f"request body of {size} bytes or more is over the limit of {limit} bytes"
    )


async def read_body(receive: Receive, limit: int, declared: int | None = None) -> bytes:
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
    return await _read_chunks(receive, limit, bytearray(body))


async def _read_chunks(receive: Receive, limit: int, buffer: bytearray) -> bytes:
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
            return bytes(buffer)


def decompress(body: bytes, encoding: bytes, limit: int) -> bytes:
    """Undo `Content-Encoding` (gzip, deflate, identity) without producing over `limit` bytes.

    Raises:
        PayloadTooLargeError: the decompressed body is larger than `limit`.
        InvalidInputError: the data is not valid for its encoding.
        UnsupportedError: an encoding other than gzip, deflate or identity.
    """
    name = encoding.strip().lower()
    if name in (b"", b"identity"):
        return body
    if name == b"gzip":
        return _inflate(body, _GZIP_WBITS, limit, name)
    if name == b"deflate":
        if body[:1] and (body[0] & 0x0F) == 8 and int.from_bytes(body[:2], "big") % 31 == 0:
            return _inflate(body, _ZLIB_WBITS, limit, name)
        return _inflate(body, _RAW_WBITS, limit, name)
    raise UnsupportedError(
        f"Content-Encoding '{encoding.decode('latin-1')}' is not supported, "
        "expected gzip, deflate or identity"
    )


def _inflate(data: bytes, wbits: int, limit: int, name: bytes) -> bytes:
    parts: list[bytes] = []
    total = 0
    while True:
        engine = zlib.decompressobj(wbits)
        try:
            chunk = engine.decompress(data, limit + 1 - total)
        except zlib.error as exc:
            raise InvalidInputError(
                f"request body is not valid {name.decode()} data: {exc}"
            ) from None
        total += len(chunk)
        if total > limit:
            raise too_large(total, limit)
        if not engine.eof:
            raise InvalidInputError(f"request body is truncated {name.decode()} data")
        parts.append(chunk)
        data = engine.unused_data
        # gzip allows several members back to back; anything else after the end is junk
        if not data or wbits != _GZIP_WBITS:
            break
    return b"".join(parts)


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
