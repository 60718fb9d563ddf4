"""The HTTP/2 frame guard, fed hand-made frames (no server needed)."""

from __future__ import annotations

from fnserve.server.h2guard import PREFACE, FloodBudget, FrameGuard, goaway


def frame(kind: int, flags: int = 0, stream_id: int = 0, payload: bytes = b"") -> bytes:
    head = len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream_id.to_bytes(4, "big")
    return head + payload


def test_ordinary_traffic_passes_in_any_split() -> None:
    data = PREFACE + frame(0x4) + frame(0x1, 0x4, 1, b"h" * 40) + frame(0x0, 0x1, 1, b"d" * 5000)
    for step in (1, 7, 9, 100, len(data)):
        guard = FrameGuard(FloodBudget())
        reasons = [guard.feed(data[i : i + step]) for i in range(0, len(data), step)]
        assert reasons == [None] * len(reasons)
        assert guard.saw_headers
        assert guard.last_stream_id == 1


def test_a_busy_connection_may_open_any_number_of_streams() -> None:
    # One gRPC channel carries every request of a client: 100,000 requests within seconds are
    # load, not a flood (a stream budget here once capped gRPC at 2,000 requests/s).
    guard = FrameGuard(FloodBudget(), expect_preface=False)
    requests = b"".join(
        frame(0x1, 0x4, sid, b"h" * 30) + frame(0x0, 0x1, sid, b"d" * 20)
        for sid in range(1, 200_000, 2)
    )
    assert guard.feed(requests) is None
    assert guard.last_stream_id == 199_999


def test_rapid_reset_is_reported_past_the_budget() -> None:
    guard = FrameGuard(FloodBudget(resets=10))
    pairs = b"".join(
        frame(0x1, 0x4, sid, b"h") + frame(0x3, 0, sid, b"\0\0\0\x08") for sid in range(1, 40, 2)
    )
    assert guard.feed(PREFACE + pairs) == "more than 10 stream resets in 10 s"


def test_pings_and_settings_floods_are_reported_but_acks_are_free() -> None:
    guard = FrameGuard(FloodBudget(pings=3), expect_preface=False)
    assert guard.feed(frame(0x6, 0x1, 0, b"\0" * 8) * 50) is None  # PING ACKs
    assert guard.feed(frame(0x6, 0, 0, b"\0" * 8) * 4) == "more than 3 pings in 10 s"
    guard = FrameGuard(FloodBudget(settings=2), expect_preface=False)
    assert guard.feed(frame(0x4) * 3) == "more than 2 SETTINGS frames in 10 s"


def test_continuation_flood_is_bounded() -> None:
    guard = FrameGuard(FloodBudget(header_block_bytes=1000), expect_preface=False)
    assert guard.feed(frame(0x1, 0, 1, b"h" * 500)) is None
    assert guard.feed(frame(0x9, 0, 1, b"c" * 400)) is None
    assert guard.feed(frame(0x9, 0, 1, b"c" * 400)) == "a header block of more than 1000 bytes"


def test_a_finished_header_block_starts_over() -> None:
    guard = FrameGuard(FloodBudget(header_block_bytes=1000), expect_preface=False)
    for sid in range(1, 20, 2):
        assert guard.feed(frame(0x1, 0, sid, b"h" * 500) + frame(0x9, 0x4, sid, b"c" * 400)) is None


def test_goaway_frame_layout() -> None:
    data = goaway(7, 0xB, b"why")
    assert data[:3] == (11).to_bytes(3, "big")
    assert data[3:9] == b"\x07\x00\x00\x00\x00\x00"
    assert int.from_bytes(data[9:13], "big") == 7
    assert int.from_bytes(data[13:17], "big") == 0xB
    assert data[17:] == b"why"
