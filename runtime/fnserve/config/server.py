"""Server settings: ports, limits, logging; built from CLI options or a mapping."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, NamedTuple

from fnserve.errors import ModelConfigError
from fnserve.limits import DEFAULT_LIMITS, InputLimits, quote

LogFormat = Literal["text", "json"]


class ModelDefaults(NamedTuple):
    """Server-wide settings every model version gets unless its own config says otherwise.

    Args:
        execution_timeout_s: longest one execution may run (0: no limit, as in Triton).
        max_queue_size: requests one model may hold waiting, when its queue policy sets none.
        drain_timeout_s: how long an unload waits for queued and running requests.
        debug_errors: send model error messages whole (host paths included) to clients.
        idle_timeout_s: scale a model to zero after this long unused (0: never).
        cold_start_timeout_s: how long requests wait for a scaled-to-zero model to come back.
        inline_us: a sync CPU model whose batches all take at most this long runs them on
            the event loop's thread (0: always on its own thread, the default; a model's
            parameter `inline_max_us` wins; see scheduling/inline.py).
    """

    execution_timeout_s: float = 0.0
    max_queue_size: int = 1024
    drain_timeout_s: float = 30.0
    debug_errors: bool = False
    idle_timeout_s: float = 0.0
    cold_start_timeout_s: float = 60.0
    inline_us: float = 0.0


class WatchSettings(NamedTuple):
    """How the served paths are watched for changes (`--watch`, `--model-control-mode poll`).

    Args:
        polling: look at the files every `poll_interval_s` (poll mode) instead of waiting for
            the operating system's change events (`--watch`).
        poll_interval_s: seconds between two looks, when polling.
    """

    polling: bool
    poll_interval_s: float


CONTROL_MODES = ("", "none", "explicit", "poll")  # "": not given (none, the API open)
# Triton's answer (UNAVAILABLE) to a repository load or unload in its none and poll modes.
REPOSITORY_API_REFUSED = "explicit model load / unload is not allowed if polling is enabled"


@dataclass(frozen=True)
class ServerConfig:
    """How `fnserve serve` listens and behaves.

    Args:
        host: address every frontend binds.
        http_port, grpc_port, metrics_port: 0 picks a free port (reported after binding).
        tls_cert, tls_key: PEM files of the certificate chain and its key; set, the HTTP and
            gRPC ports speak TLS only ("": plain).
        tls_client_ca: PEM file of the CA that signs client certificates; set, clients must
            present one (mutual TLS).
        max_body_bytes: largest accepted HTTP request body, after decompression.
        grpc_max_message_bytes: largest gRPC message received or sent.
        max_connections: open connections per port; one more is refused at once.
        header_timeout_s: time a connection has to send a complete request head (HTTP/1.1)
            or its first request (HTTP/2, gRPC) after connecting or after its last response.
        keep_alive_timeout_s: idle connections are closed after this long.
        max_header_bytes, max_headers, max_url_bytes: bounds of one HTTP request head (and of
            an HTTP/2 header list).
        h2_max_concurrent_streams: streams one HTTP/2 (h2c or gRPC) connection may have open.
        h2_window_bytes: the HTTP/2 flow-control windows the gRPC port grants (per stream and
            per connection): how much a client may send before the server reads it.
        stream_max_inflight: requests of one ModelStreamInfer stream running at once; past it
            the server stops reading the stream (backpressure to the client).
        shutdown_timeout_s: how long in-flight requests may take to finish on SIGINT/SIGTERM
            (and on an unload); past it they fail with 503 / UNAVAILABLE.
        execution_timeout_s: default limit of one model execution (0: none); a model's own
            `execution_timeout_s` wins.
        max_queue_size: default bound of each model's queue when its queue policy sets none.
        idle_timeout_s: default time a model may go unused before it scales to zero (0:
            never); a model's own `idle_timeout_s` wins.
        cold_start_timeout_s: how long requests for a scaled-to-zero model wait for its cold
            start before 503 / UNAVAILABLE.
        inline_us: default inline limit (`--inline-max-us`; 0: off); see ModelDefaults.
        memory_budget_bytes: host memory the loaded models may use together (0: no budget);
            past it the least recently used idle models are scaled to zero.
        gpu_memory_budget_bytes: the same for each GPU (0: no budget).
        debug_errors: send model exception messages to clients unscrubbed.
        max_name_length: longest model name, version or tensor name a request may give.
        max_bytes_elements: most BYTES elements in one inference request (all inputs).
        max_gzip_members: most members in one gzip-encoded HTTP request body.
        strict: refuse to start when a model file fails to import (default: serve the others).
        allow_empty: start even when no model was found (default: an error).
        model_control_mode: "none" loads every model at start; "explicit" loads only
            `load_models`; "poll" loads every model and reloads the ones whose files change,
            looking every `repository_poll_secs` (Triton's modes: the repository load/unload
            API is refused in "none" and "poll", as in Triton). "" (the mode not given) is
            "none" with that API open: fnserve's reload of changed code goes through it.
        load_models: names loaded at start in explicit mode ("*": all of them).
        repository_poll_secs: seconds between two looks at the files in poll mode.
        watch: reload the models whose files change as soon as the operating system reports
            the change (with mode "none").
        log_level, log_format: logging setup.
        admin_token, api_token: bearer tokens the control APIs (admin) and, when set, the
            inference and metadata APIs (api or admin) require ("": none).
        token_file: a file of named tokens, one `NAME ROLE TOKEN` a line (see server/access.py).
        http_restricted_api, grpc_restricted_protocol: Triton's `APIS:KEY=VALUE` restrictions.
        state_dir: where deployments (`fnserve deploy`) and the default job store are kept and
            found after a restart.
        deploy_max_bytes: largest deployment archive (its files may unpack to 8 times that).
        deploy_validate_timeout_s: how long a deployment's import, in a child process, may take.
        jobs: serve durable jobs (`/v2/jobs`); False: no job endpoints, no job store.
        jobs_db: the job store: a SQLite file path, or a `postgresql://` URL ("": `jobs.db`
            in `state_dir`).
        jobs_workers: jobs of one model this server runs at once (0: its max batch size).
        jobs_online_workers: the same while online requests are recent (they come first).
        jobs_online_rate: jobs started per second, at most, while online requests are recent
            (0: no pace).
        jobs_lease_s: how long a claimed job stays this server's without a renewal.
        jobs_max_attempts: attempts before a job fails with its last error.
        jobs_max_backlog: queued jobs one model may hold; past it submit answers 429.
        jobs_result_ttl_s: finished jobs and their results are deleted this long after.
        jobs_max_result_bytes: largest stored result; a larger one fails its job.
        jobs_max_wait_s: longest long-poll a client may ask for.
        model_cache: where model repositories served from object storage (`s3://...`) are
            copied to ("": `state_dir`/model-cache).
        s3_endpoint_url: an S3-compatible server to read `s3://` repositories from ("": the
            standard `AWS_ENDPOINT_URL_S3` / `AWS_ENDPOINT_URL` settings, else AWS).
    """

    host: str = "127.0.0.1"
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    tls_cert: str = ""
    tls_key: str = ""
    tls_client_ca: str = ""
    max_body_bytes: int = 64 * 1024 * 1024
    grpc_max_message_bytes: int = 256 * 1024 * 1024
    max_connections: int = 2048
    header_timeout_s: float = 10.0
    keep_alive_timeout_s: float = 75.0
    max_header_bytes: int = 64 * 1024
    max_headers: int = 100
    max_url_bytes: int = 8 * 1024
    h2_max_concurrent_streams: int = 128
    h2_window_bytes: int = 4 * 1024 * 1024
    stream_max_inflight: int = 64
    shutdown_timeout_s: float = 30.0
    execution_timeout_s: float = 0.0
    max_queue_size: int = 1024
    idle_timeout_s: float = 0.0
    cold_start_timeout_s: float = 60.0
    inline_us: float = 0.0
    memory_budget_bytes: int = 0
    gpu_memory_budget_bytes: int = 0
    debug_errors: bool = False
    max_name_length: int = DEFAULT_LIMITS.max_name_length
    max_bytes_elements: int = DEFAULT_LIMITS.max_bytes_elements
    max_gzip_members: int = DEFAULT_LIMITS.max_gzip_members
    strict: bool = False
    allow_empty: bool = False
    model_control_mode: str = ""
    load_models: tuple[str, ...] = ()
    repository_poll_secs: float = 15.0
    watch: bool = False
    log_level: str = "INFO"
    log_format: LogFormat = "text"
    admin_token: str = field(default="", repr=False)
    api_token: str = field(default="", repr=False)
    token_file: str = ""
    # Secrets: kept out of repr (and so out of logs and tracebacks).
    http_restricted_api: tuple[str, ...] = field(default=(), repr=False)
    grpc_restricted_protocol: tuple[str, ...] = field(default=(), repr=False)
    state_dir: str = ".fnserve-state"
    deploy_max_bytes: int = 64 * 1024 * 1024
    deploy_validate_timeout_s: float = 60.0
    jobs: bool = True
    jobs_db: str = field(default="", repr=False)  # a PostgreSQL URL may carry a password
    jobs_workers: int = 0
    jobs_online_workers: int = 1
    jobs_online_rate: float = 20.0
    jobs_lease_s: float = 30.0
    jobs_max_attempts: int = 3
    jobs_max_backlog: int = 100_000
    jobs_result_ttl_s: float = 7 * 24 * 3600.0
    jobs_max_result_bytes: int = 64 * 1024 * 1024
    jobs_max_wait_s: float = 60.0
    model_cache: str = ""
    s3_endpoint_url: str = ""

    def __post_init__(self) -> None:
        if self.execution_timeout_s < 0 or self.shutdown_timeout_s < 0:
            raise ModelConfigError(
                f"timeouts must be >= 0 seconds, got execution_timeout_s="
                f"{self.execution_timeout_s} and shutdown_timeout_s={self.shutdown_timeout_s}"
            )
        for name in ("max_queue_size", "idle_timeout_s", "memory_budget_bytes",
                     "gpu_memory_budget_bytes", "jobs_workers", "jobs_max_wait_s",
                     "inline_us", "jobs_online_rate"):  # fmt: skip
            if getattr(self, name) < 0:
                raise ModelConfigError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.cold_start_timeout_s <= 0:
            raise ModelConfigError(
                f"cold_start_timeout_s must be > 0, got {self.cold_start_timeout_s}"
            )
        _check_control_mode(self)
        _check_positive(self, _POSITIVE)

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

    def model_defaults(self) -> ModelDefaults:
        """The settings every served model version inherits."""
        return ModelDefaults(
            self.execution_timeout_s,
            self.max_queue_size,
            self.shutdown_timeout_s,
            self.debug_errors,
            self.idle_timeout_s,
            self.cold_start_timeout_s,
            self.inline_us,
        )

    def startup_models(self) -> tuple[str, ...] | None:
        """The models to load at start: None for all of them."""
        if self.model_control_mode != "explicit" or "*" in self.load_models:
            return None
        return self.load_models

    def repository_api_refusal(self) -> str:
        """Why the repository load/unload API refuses requests ("": it serves them): Triton
        refuses them in its none and poll modes, and so does fnserve when one is given."""
        mode = self.model_control_mode
        if mode not in ("none", "poll"):
            return ""
        return (
            f"{REPOSITORY_API_REFUSED} (model control mode '{mode}'; start the server in "
            f"explicit mode, or without --model-control-mode, to load and unload models)"
        )

    def watch_settings(self) -> WatchSettings | None:
        """How to watch the served paths for changes; None: they are not watched."""
        if self.model_control_mode == "poll":
            return WatchSettings(True, self.repository_poll_secs)
        if self.watch:
            return WatchSettings(False, self.repository_poll_secs)
        return None

    def jobs_store_location(self) -> str:
        """The job store's SQLite path or PostgreSQL URL (`--jobs-db`, else in `state_dir`)."""
        return self.jobs_db or str(Path(self.state_dir) / "jobs.db")

    def model_cache_dir(self) -> Path:
        """Where remote model repositories are copied to."""
        return Path(self.model_cache) if self.model_cache else Path(self.state_dir) / "model-cache"

    def input_limits(self) -> InputLimits:
        """The per-request input limits both codecs apply."""
        return InputLimits(self.max_name_length, self.max_bytes_elements, self.max_gzip_members)


_POSITIVE = (
    "max_body_bytes",
    "deploy_max_bytes",
    "deploy_validate_timeout_s",
    "grpc_max_message_bytes",
    "max_connections",
    "header_timeout_s",
    "keep_alive_timeout_s",
    "max_header_bytes",
    "max_headers",
    "max_url_bytes",
    "h2_max_concurrent_streams",
    "h2_window_bytes",
    "stream_max_inflight",
    "repository_poll_secs",
    "jobs_online_workers",
    "jobs_lease_s",
    "jobs_max_attempts",
    "jobs_max_backlog",
    "jobs_result_ttl_s",
    "jobs_max_result_bytes",
)
# HTTP/2 caps flow-control windows at 2^31 - 1 (RFC 9113 §6.9.1); gRPC frames sizes in 32 bits.
_MAX_31_BIT = 2**31 - 1


def _check_control_mode(config: ServerConfig) -> None:
    mode = config.model_control_mode
    if mode not in CONTROL_MODES:
        raise ModelConfigError(
            f"model control mode must be 'none', 'explicit' or 'poll', got {quote(mode)}"
        )
    if config.load_models and mode != "explicit":
        raise ModelConfigError("--load-model requires --model-control-mode explicit (as in Triton)")
    if config.watch and mode not in ("", "none"):
        raise ModelConfigError(
            f"--watch cannot be combined with --model-control-mode {mode}: poll mode already "
            f"watches (by polling), and explicit mode leaves loads to the repository API"
        )


def _check_positive(config: ServerConfig, names: tuple[str, ...]) -> None:
    for name in names:
        value = getattr(config, name)
        if value <= 0:
            raise ModelConfigError(f"server setting '{name}' must be > 0, got {value}")
    for name in ("h2_window_bytes", "grpc_max_message_bytes"):
        if getattr(config, name) > _MAX_31_BIT:
            raise ModelConfigError(f"server setting '{name}' must be <= {_MAX_31_BIT}")


def _check_type(key: str, value: Any, default: Any) -> None:
    expected = type(default)
    ok = type(value) is expected or (expected is float and type(value) is int)
    if not ok:
        raise ModelConfigError(
            f"server setting '{key}' must be {expected.__name__}, got {quote(value)}"
        )
