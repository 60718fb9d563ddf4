"""What one `fnserve bench` run measures: the parsed command line, passed on to the driver."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

Protocol = Literal["http", "grpc"]
DEFAULT_PORTS: Mapping[str, int] = {"http": 8000, "grpc": 8001}


class BenchError(Exception):
    """A bench run cannot start or cannot finish; the message says why and what to do."""


@dataclass(frozen=True)
class BenchOptions:
    """One sweep: which model, over which protocol, at which concurrencies, with which data.

    Args:
        model: model name on the server.
        url: server address, `host:port` (an `http://` prefix is accepted for HTTP).
        protocol: `http` (KServe v2 REST) or `grpc` (`inference.GRPCInferenceService`).
        model_version: "" for the latest version.
        concurrency: requests in flight, one step per value (closed loop, like perf_analyzer).
        duration_s: measured seconds per step; `warmup_s` more run before the window opens.
        input_data: `random`, `zero`, or a perf_analyzer `--input-data` JSON file.
        shapes: per-input shapes without the batch dimension, for variable dimensions.
        batch_size: rows per request (models with `max_batch_size > 0`).
        binary: HTTP tensors as binary data (the extension tritonclient uses) instead of JSON.
        workers: Locust worker processes under one master (0: a single process).
        csv, plot: where to write the table and the chart (None: not written).
        ui: run Locust's web UI instead of the headless sweep.
    """

    model: str
    url: str
    protocol: Protocol = "http"
    model_version: str = ""
    concurrency: tuple[int, ...] = (1,)
    duration_s: float = 10.0
    warmup_s: float = 1.0
    input_data: str = "random"
    shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()
    batch_size: int = 1
    binary: bool = True
    workers: int = 0
    csv: Path | None = field(default=None, compare=False)
    plot: Path | None = field(default=None, compare=False)
    ui: bool = False

    @classmethod
    def from_cli(cls, **values: Any) -> BenchOptions:
        """Build from the `fnserve bench` options (strings as typed), checking each.

        Raises:
            BenchError: a value is malformed or out of range.
        """
        protocol = values.pop("protocol")
        url = values.pop("url") or f"127.0.0.1:{DEFAULT_PORTS[protocol]}"
        concurrency = parse_concurrency(values.pop("concurrency"), values.pop("concurrency_range"))
        shapes = parse_shapes(values.pop("shape"))
        options = cls(
            protocol=protocol, url=url.rstrip("/"), concurrency=concurrency, shapes=shapes, **values
        )
        options.check()
        return options

    def check(self) -> None:
        """Raise BenchError for values no run can use."""
        if self.duration_s <= 0 or self.warmup_s < 0:
            raise BenchError(
                f"--duration must be > 0 and --warmup >= 0, got "
                f"{self.duration_s} and {self.warmup_s}"
            )
        if self.batch_size < 1 or self.workers < 0:
            raise BenchError(
                f"--batch-size must be >= 1 and --workers >= 0, got "
                f"{self.batch_size} and {self.workers}"
            )
        if self.protocol == "grpc" and "://" in self.url:
            raise BenchError(f"--url for gRPC is host:port, got '{self.url}'")
        if self.url.startswith("https://"):
            raise BenchError(f"--url '{self.url}': TLS is not supported, use host:port")

    @property
    def http_base(self) -> str:
        """The URL Locust's HTTP users are pointed at."""
        return self.url if self.url.startswith("http://") else f"http://{self.url}"

    @property
    def grpc_target(self) -> str:
        """The `host:port` a gRPC channel connects to."""
        return self.url

    @property
    def encoding(self) -> str:
        """How tensors travel, as the report names it."""
        if self.protocol == "grpc":
            return "gRPC"
        return "HTTP (binary tensors)" if self.binary else "HTTP (JSON)"

    def to_json(self) -> str:
        """The form handed to the driver process (paths are the command side's business)."""
        data = asdict(self)
        data.update(csv=None, plot=None)
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> BenchOptions:
        """Inverse of `to_json`."""
        data = json.loads(text)
        data["concurrency"] = tuple(data["concurrency"])
        data["shapes"] = tuple((name, tuple(dims)) for name, dims in data["shapes"])
        return cls(**data)


def parse_concurrency(values: str | None, value_range: str | None) -> tuple[int, ...]:
    """`1,8,64` or perf_analyzer's `start:end[:step]` (end included); default one step of 1.

    Raises:
        BenchError: both or malformed forms, or a concurrency below 1.
    """
    if values and value_range:
        raise BenchError("give --concurrency or --concurrency-range, not both")
    try:
        if value_range:
            parts = [int(p) for p in value_range.split(":")]
            if len(parts) not in (2, 3):
                raise ValueError(value_range)
            start, end, step = (*parts, 1) if len(parts) == 2 else parts
            levels = tuple(range(start, end + 1, step)) if step > 0 else ()
        else:
            levels = tuple(int(v) for v in (values or "1").split(",") if v.strip())
    except ValueError:
        raise BenchError(
            f"concurrency must be like 1,8,64 or 1:64:8, got '{values or value_range}'"
        ) from None
    if not levels or min(levels) < 1:
        raise BenchError(f"concurrency levels must be >= 1, got '{values or value_range}'")
    return levels


def parse_shapes(specs: Iterable[str]) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """`NAME:d1,d2` per input (perf_analyzer's --shape), dimensions without the batch one.

    Raises:
        BenchError: a spec without a name, or with dimensions that are not integers >= 0.
    """
    shapes: dict[str, tuple[int, ...]] = {}
    for spec in specs:
        name, _, dims = spec.rpartition(":")
        try:
            shape = tuple(int(d) for d in dims.split(",") if d.strip())
        except ValueError:
            shape = (-1,)
        if not name or any(d < 0 for d in shape):
            raise BenchError(f"--shape must be NAME:d1,d2,... with dimensions >= 0, got '{spec}'")
        shapes[name] = shape
    return tuple(shapes.items())
