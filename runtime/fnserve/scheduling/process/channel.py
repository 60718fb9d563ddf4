"""The control channel between the server and a worker: small length-prefixed pickled headers.

Only headers travel here (tensor references, row counts, request parameters, errors); the
tensors themselves lie in shared memory (`shm.py`). Both ends are fnserve, so pickle is safe.
"""

from __future__ import annotations

import pickle
import socket
import struct
from typing import Any

_LENGTH = struct.Struct("<I")


def pack(message: Any) -> bytes:
    """One frame: 4-byte little-endian length, then the pickled message."""
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _LENGTH.pack(len(body)) + body


def unpack_length(prefix: bytes) -> int:
    """The body length a frame's 4-byte prefix announces."""
    return int(_LENGTH.unpack(prefix)[0])


def recv_message(sock: socket.socket) -> Any:
    """Read one frame from a blocking socket; EOFError when the peer has gone."""
    size = unpack_length(_recv_exactly(sock, _LENGTH.size))
    return pickle.loads(_recv_exactly(sock, size))


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    buf = bytearray(size)
    view = memoryview(buf)
    got = 0
    while got < size:
        n = sock.recv_into(view[got:])
        if n == 0:
            raise EOFError("the peer closed the control channel")
        got += n
    return bytes(buf)
