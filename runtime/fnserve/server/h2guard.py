"""A cheap watch over the frames an HTTP/2 client sends, against floods the h2 stacks allow.

Neither Hypercorn (h2c on the HTTP port) nor grpclib limits how fast a client may open and
reset streams or ping: 100,000 HEADERS + RST_STREAM pairs in 1.3 s ("rapid reset",
CVE-2023-44487) stalled the whole server 21 s and grew it by 760 MB. `FrameGuard` reads only
the 9-byte header of each frame as the bytes arrive (no parsing, no copies of payloads) and
counts stream resets, pings and SETTINGS per time window, and bounds a header block spread
over CONTINUATION frames. New streams are not budgeted: one connection carrying thousands of
requests a second is what a gRPC client does, and the work in flight is already bounded by
SETTINGS_MAX_CONCURRENT_STREAMS (a stream cancelled early counts as a reset). Past a budget the
connection is answered with GOAWAY(ENHANCE_YOUR_CALM) and closed, as nginx and Go's net/http do.
It also tells when the client's first request head (HEADERS) arrived, for the header timeout.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_HEADER_SIZE = 9
_HEADERS, _RST_STREAM, _SETTINGS, _PING, _GOAWAY, _CONTINUATION = 0x1, 0x3, 0x4, 0x6, 0x7, 0x9
_ACK = 0x1
_END_HEADERS = 0x4
ENHANCE_YOUR_CALM = 0xB
REFUSED_STREAM = 0x7
NO_ERROR = 0x0


@dataclass(frozen=True)
class FloodBudget:
    """How many of each control frame one connection may send per `window_s`.

    Generous for real clients (tritonclient cancels or pings a few times per minute), far
    below what a flood needs to hurt.
    """

    window_s: float = 10.0
    resets: int = 50
    pings: int = 200
    settings: int = 200
    header_block_bytes: int = 256 * 1024  # one HEADERS + CONTINUATION block (CONTINUATION flood)


class FrameGuard:
    """Counts one connection's incoming control frames; `feed` says when to cut it off.

    Args:
        budget: frames allowed per window.
        expect_preface: skip the 24-byte client preface first (False when it was consumed).
    """

    __slots__ = (
        "_budget",
        "_counts",
        "_block",
        "_head",
        "_limits",
        "_preface_left",
        "_skip",
        "_window_start",
        "last_stream_id",
        "saw_headers",
    )

    def __init__(self, budget: FloodBudget, expect_preface: bool = True) -> None:
        self._budget = budget
        self._limits = (budget.resets, budget.pings, budget.settings)  # per slot of `_counts`
        self._preface_left = len(PREFACE) if expect_preface else 0
        self._skip = 0  # payload bytes of the current frame still to pass over
        self._head = b""  # a frame header split across reads
        self._counts = [0, 0, 0]  # resets, pings, settings
        self._block = -1  # bytes of the header block being continued, -1 when none is open
        self._window_start = time.monotonic()
        self.last_stream_id = 0
        self.saw_headers = False

    def feed(self, data: bytes) -> str | None:
        """Account for `data`; returns why the connection must be closed, or None."""
        view = memoryview(data)
        if self._preface_left:
            taken = min(self._preface_left, len(view))
            self._preface_left -= taken
            view = view[taken:]
        while view:
            if self._skip:
                taken = min(self._skip, len(view))
                self._skip -= taken
                view = view[taken:]
                continue
            need = _HEADER_SIZE - len(self._head)
            self._head += bytes(view[:need])
            view = view[need:]
            if len(self._head) < _HEADER_SIZE:
                return None
            reason = self._frame(self._head)
            self._head = b""
            if reason is not None:
                return reason
        return None

    def _frame(self, header: bytes) -> str | None:
        self._skip = int.from_bytes(header[:3], "big")
        kind, flags = header[3], header[4]
        if kind in (_HEADERS, _CONTINUATION):
            reason = self._header_block(kind, flags)
            if reason is not None:
                return reason
        if kind == _HEADERS:
            self.saw_headers = True
            stream_id = int.from_bytes(header[5:9], "big") & 0x7FFFFFFF
            if stream_id > self.last_stream_id:
                self.last_stream_id = stream_id
        elif kind == _RST_STREAM:
            return self._count(0, "stream resets")
        elif kind == _PING and not flags & _ACK:
            return self._count(1, "pings")
        elif kind == _SETTINGS and not flags & _ACK:
            return self._count(2, "SETTINGS frames")
        return None

    def _header_block(self, kind: int, flags: int) -> str | None:
        """Bound one header block however many CONTINUATION frames carry it."""
        self._block = self._skip if kind == _HEADERS else self._block + self._skip
        limit = self._budget.header_block_bytes
        if self._block > limit:
            return f"a header block of more than {limit} bytes"
        if flags & _END_HEADERS:
            self._block = -1
        return None

    def _count(self, slot: int, what: str) -> str | None:
        now = time.monotonic()
        budget = self._budget
        if now - self._window_start > budget.window_s:
            self._window_start = now
            self._counts = [0, 0, 0]
        self._counts[slot] += 1
        limit = self._limits[slot]
        if self._counts[slot] > limit:
            return f"more than {limit} {what} in {budget.window_s:g} s"
        return None


def goaway(last_stream_id: int, error_code: int, debug: bytes = b"") -> bytes:
    """A serialized GOAWAY frame (RFC 9113 §6.8), to write before closing a connection."""
    payload = (last_stream_id & 0x7FFFFFFF).to_bytes(4, "big") + error_code.to_bytes(4, "big")
    payload += debug[:256]
    return len(payload).to_bytes(3, "big") + bytes([_GOAWAY, 0]) + b"\x00" * 4 + payload
