"""Limits on what one request may ask of the server, shared by the HTTP and gRPC codecs.

Every check here is O(1) or O(rank) and runs before anything proportional to the request is
allocated, so no request can make the event loop do unbounded work or hold unbounded memory.
`quote` is the one way a message echoes a client's value: truncated, whatever its size.
"""

from __future__ import annotations

import reprlib
from dataclasses import dataclass

from fnserve.errors import InvalidInputError

# numpy's NPY_MAXDIMS (64 since numpy 2.0): an array cannot have more dims. Triton declares no
# lower cap of its own (its dims are a repeated int64), so numpy's is the one that binds.
MAX_DIMS = 64
# Dims are int64 on the wire (gRPC) and in Triton; numpy also needs the product of the
# non-zero dims times the item size to fit in one, even for an empty array.
MAX_DIM = (1 << 63) - 1
# How much of a client's value an error message may echo.
QUOTE_CHARS = 64

_REPR = reprlib.Repr()  # (keyword arguments only from Python 3.12)
_REPR.maxlevel = 3
_REPR.maxlist = _REPR.maxtuple = 8
_REPR.maxdict = _REPR.maxset = 4
_REPR.maxstring = _REPR.maxother = QUOTE_CHARS
_REPR.maxlong = 40


@dataclass(frozen=True, slots=True)
class InputLimits:
    """Per-request limits on decoded input (see README, "Limits and timeouts").

    Args:
        max_name_length: longest model name, version or tensor name, in characters.
        max_bytes_elements: most BYTES elements in one request, all inputs together (each one
            costs a Python object of about 50 bytes however short its data).
        max_gzip_members: most gzip members in one Content-Encoding: gzip body.
    """

    max_name_length: int = 256
    max_bytes_elements: int = 1 << 20
    max_gzip_members: int = 64


DEFAULT_LIMITS = InputLimits()


def quote(value: object, limit: int = QUOTE_CHARS) -> str:
    """`value` quoted for an error message, cut to about `limit` characters.

    A string comes back as `'text'`, or `'first chars...' (N characters)` when long; anything
    else as a bounded repr (reprlib), so a huge list never gets formatted whole.
    """
    if isinstance(value, str):
        if len(value) <= limit:
            return f"'{value}'"
        return f"'{value[:limit]}...' ({len(value)} characters)"
    try:
        return _REPR.repr(value)
    except ValueError:  # an int past Python's 4300-digit str() limit
        return f"<{type(value).__name__}>"


def check_name(kind: str, value: str, limits: InputLimits = DEFAULT_LIMITS) -> str:
    """Refuse a client-given name (`kind`: "model name", "input name"...) that is too long.

    Raises:
        InvalidInputError: longer than `limits.max_name_length`.
    """
    if len(value) > limits.max_name_length:
        raise InvalidInputError(
            f"{kind} {quote(value)} is longer than the limit of {limits.max_name_length} characters"
        )
    return value


def check_model(name: str, version: str, limits: InputLimits = DEFAULT_LIMITS) -> None:
    """Check a request's model name and version lengths before they reach any lookup.

    Raises:
        InvalidInputError: either is longer than `limits.max_name_length`.
    """
    if len(name) > limits.max_name_length:
        check_name("model name", name, limits)
    if len(version) > limits.max_name_length:
        check_name("model version", version, limits)


def format_shape(shape: tuple[int, ...] | list[int]) -> str:
    """A shape for a message: `[1, 3]`, or its first dims and the count when long."""
    if len(shape) <= 8:
        return str(list(shape))
    head = ", ".join(str(dim) for dim in shape[:8])
    return f"[{head}, ...] ({len(shape)} dims)"
