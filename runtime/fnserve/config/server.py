"""Server settings: ports, limits, logging; built from CLI options or a mapping."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

from fnserve.errors import ModelConfigError
from fnserve.limits import DEFAULT_LIMITS, InputLimits, quote

LogFormat = Literal["text", "json"]


@dataclass(frozen=True)
class ServerConfig:
    """How `fnserve serve` listens and behaves.

    Args:
        host: address every frontend binds.
        http_port, grpc_port, metrics_port: 0 picks a free port (reported after binding).
        max_body_bytes: largest accepted HTTP request body, after decompression (gRPC has no
            limit of its own below 2 GiB, as in Triton).
        shutdown_timeout_s: how long in-flight requests may take to finish on SIGINT/SIGTERM.
        max_name_length: longest model name, version or tensor name a request may give.
        max_bytes_elements: most BYTES elements in one inference request (all inputs).
        max_gzip_members: most members in one gzip-encoded HTTP request body.
        log_level, log_format: logging setup.
    """

    host: str = "127.0.0.1"
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    max_body_bytes: int = 64 * 1024 * 1024
    shutdown_timeout_s: float = 30.0
    max_name_length: int = DEFAULT_LIMITS.max_name_length
    max_bytes_elements: int = DEFAULT_LIMITS.max_bytes_elements
    max_gzip_members: int = DEFAULT_LIMITS.max_gzip_members
    log_level: str = "INFO"
    log_format: LogFormat = "text"

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> ServerConfig:
        """Build from a mapping, rejecting unknown keys (with the list of known ones) and values
        whose type differs from the setting's default (an int where a float is expected is fine).

        Raises:
            ModelConfigError: an unknown key or a value of the wrong type.
        """
        defaults = {f.name: f.default for f in fields(cls)}
        unknown = sorted(quote(key) for key in values if key not in defaults)
        if unknown:
            raise ModelConfigError(
                f"unknown server setting(s) {', '.join(unknown)}; "
                f"known: {', '.join(sorted(defaults))}"
            )
        for key, value in values.items():
            _check_type(key, value, defaults[key])
        return cls(**values)

    def input_limits(self) -> InputLimits:
        """The per-request input limits both codecs apply."""
        return InputLimits(self.max_name_length, self.max_bytes_elements, self.max_gzip_members)


def _check_type(key: str, value: Any, default: Any) -> None:
    expected = type(default)
    ok = type(value) is expected or (expected is float and type(value) is int)
    if not ok:
        raise ModelConfigError(
            f"server setting '{key}' must be {expected.__name__}, got {quote(value)}"
        )
