"""Triton's words for the core's records, shared by the HTTP and gRPC frontends.

The core names lifecycle states as DESIGN.md does; Triton's repository index (and every client
that reads it) knows READY, LOADING, UNLOADING and UNAVAILABLE, with the why in `reason`.
"""

from __future__ import annotations

from fnserve.types import IndexEntry, ModelState

_TRITON_STATES = {
    ModelState.UNLOADED: "UNAVAILABLE",
    ModelState.LOADING: "LOADING",
    ModelState.WARMING: "LOADING",
    ModelState.READY: "READY",
    ModelState.IDLE: "READY",  # it serves: the next request cold-starts it
    ModelState.DRAINING: "UNLOADING",
    ModelState.FAILED: "UNAVAILABLE",
}


def index_state(entry: IndexEntry) -> tuple[str, str]:
    """(state, reason) of an index row as Triton writes them."""
    reason = entry.reason
    if entry.state is ModelState.WARMING and not reason:
        reason = "warming up"
    return _TRITON_STATES[entry.state], reason
