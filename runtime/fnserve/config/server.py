"""Server settings: ports, limits, logging; built from CLI options or a mapping."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal, NamedTuple

from fnserve.errors import ModelConfigError

LogFormat = Literal["text", "json"]


class ModelDefaults(NamedTuple):
    """Server-wide settings every model version gets unless its own config says otherwise.

    Args:
        execution_timeout_s: longest one execution may run (0: no limit, as in Triton).
        max_queue_size: requests one model may hold waiting, when its queue policy sets none.
        drain_timeout_s: how long an unload waits for queued and running requests.
        debug_errors: send model error messages whole (host paths included) to clients.
    """

    execution_timeout_s: float = 0.0
    max_queue_size: int = 1024
    drain_timeout_s: float = 30.0
    debug_errors: bool = False


@dataclass(frozen=True)
class ServerConfig:
    """How `fnserve serve` listens and behaves.

    Args:
        host: address every frontend binds.
        http_port, grpc_port, metrics_port: 0 picks a free port (reported after binding).
        max_body_bytes: largest accepted HTTP request body, after decompression (gRPC has no
            limit of its own below 2 GiB, as in Triton).
        shutdown_timeout_s: how long in-flight requests may take to finish on SIGINT/SIGTERM
            (and on an unload); past it they fail with 503 / UNAVAILABLE.
        execution_timeout_s: default limit of one model execution (0: none); a model's own
            `execution_timeout_s` wins.
        max_queue_size: default bound of each model's queue when its queue policy sets none.
        debug_errors: send model exception messages to clients unscrubbed.
        strict: refuse to start when a model file fails to import (default: serve the others).
        allow_empty: start even when no model was found (default: an error).
        log_level, log_format: logging setup.
    """

    host: str = "127.0.0.1"
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    max_body_bytes: int = 64 * 1024 * 1024
    shutdown_timeout_s: float = 30.0
    execution_timeout_s: float = 0.0
    max_queue_size: int = 1024
    debug_errors: bool = False
    strict: bool = False
    allow_empty: bool = False
    log_level: str = "INFO"
    log_format: LogFormat = "text"

    def __post_init__(self) -> None:
        if self.execution_timeout_s < 0 or self.shutdown_timeout_s < 0:
            raise ModelConfigError(
                f"timeouts must be >= 0 seconds, got execution_timeout_s="
                f"{self.execution_timeout_s} and shutdown_timeout_s={self.shutdown_timeout_s}"
            )
        if self.max_queue_size < 0:
            raise ModelConfigError(f"max_queue_size must be >= 0, got {self.max_queue_size}")

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> ServerConfig:
        """Build from a mapping, rejecting unknown keys with the list of known ones."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ModelConfigError(
                f"unknown server setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
            )
        return cls(**values)

    def model_defaults(self) -> ModelDefaults:
        """The settings every served model version inherits."""
        return ModelDefaults(
            self.execution_timeout_s,
            self.max_queue_size,
            self.shutdown_timeout_s,
            self.debug_errors,
        )
