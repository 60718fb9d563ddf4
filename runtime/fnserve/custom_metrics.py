"""Metrics that model code defines (Triton python_backend's `pb_utils.MetricFamily`), kept for
the server's `/metrics` endpoint.

As in Triton, a family is a name, a description and a kind (counter, gauge, histogram); each
distinct label set of a family is one metric. A family asked for again with the same name,
description and kind is the same family (models define theirs in `initialize`, once per
instance); asked for with another description or kind, it is an error. Values are floats,
changed under a lock: instances run on threads of their own.
"""

from __future__ import annotations

import bisect
import math
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum


class MetricKind(IntEnum):
    """Triton's values (`pb_utils.MetricFamily.COUNTER` ...)."""

    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2


class CustomMetricError(ValueError):
    """A family or metric used against its kind, or defined twice differently."""


class CustomMetric:
    """One metric: a family's value for one label set."""

    def __init__(self, kind: MetricKind, labels: Mapping[str, str], buckets: Sequence[float]):
        self.kind = kind
        self.labels = dict(labels)
        self.buckets = tuple(buckets)  # histogram upper bounds, ascending (+Inf implied)
        self._lock = threading.Lock()
        self._value = 0.0  # counter, gauge; a histogram's sum
        self._counts = [0] * (len(self.buckets) + 1)

    def increment(self, value: float) -> None:
        if self.kind is MetricKind.HISTOGRAM:
            raise CustomMetricError("increment() is not supported for a histogram: observe()")
        if self.kind is MetricKind.COUNTER and value < 0:
            raise CustomMetricError(f"a counter cannot be incremented by {value} (< 0)")
        with self._lock:
            self._value += value

    def set(self, value: float) -> None:
        if self.kind is not MetricKind.GAUGE:
            raise CustomMetricError(f"set() is only supported for a gauge, not a {self._kind()}")
        with self._lock:
            self._value = float(value)

    def observe(self, value: float) -> None:
        if self.kind is not MetricKind.HISTOGRAM:
            raise CustomMetricError(
                f"observe() is only supported for a histogram, not a {self._kind()}"
            )
        with self._lock:
            self._value += value
            self._counts[bisect.bisect_left(self.buckets, value)] += 1

    def value(self) -> float:
        if self.kind is MetricKind.HISTOGRAM:
            raise CustomMetricError("value() is not supported for a histogram")
        return self._value

    def snapshot(self) -> tuple[float, list[int]]:
        """(value or sum, per-bucket counts with +Inf last), read together."""
        with self._lock:
            return self._value, list(self._counts)

    def _kind(self) -> str:
        return self.kind.name.lower()


@dataclass
class CustomFamily:
    name: str
    description: str
    kind: MetricKind
    metrics: dict[tuple[tuple[str, str], ...], CustomMetric] = field(default_factory=dict)

    def metric(
        self, labels: Mapping[str, str] | None = None, buckets: Sequence[float] | None = None
    ) -> CustomMetric:
        """The metric of `labels` (the same one for the same labels)."""
        labels = {str(k): str(v) for k, v in (labels or {}).items()}
        if self.kind is MetricKind.HISTOGRAM:
            if buckets is None:
                raise CustomMetricError(f"histogram '{self.name}' needs buckets")
            bounds = [float(b) for b in buckets]
            if bounds != sorted(set(bounds)) or any(math.isnan(b) for b in bounds):
                raise CustomMetricError(f"histogram buckets must increase, got {list(buckets)}")
        elif buckets is not None:
            raise CustomMetricError(f"only a histogram takes buckets ('{self.name}' is not)")
        else:
            bounds = []
        key = tuple(sorted(labels.items()))
        with _LOCK:
            found = self.metrics.get(key)
            if found is None:
                found = self.metrics[key] = CustomMetric(self.kind, labels, bounds)
        return found


_LOCK = threading.Lock()
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")  # Prometheus' metric names (ASCII only)
_FAMILIES: dict[str, CustomFamily] = {}


def family(name: str, description: str, kind: int) -> CustomFamily:
    """The family `name`, created on first use.

    Raises:
        CustomMetricError: an invalid name or kind, or the name already holds a family with
            another description or kind.
    """
    if not _NAME.fullmatch(name):
        raise CustomMetricError(f"invalid metric family name {name!r}")
    try:
        metric_kind = MetricKind(kind)
    except ValueError:
        raise CustomMetricError(f"unknown metric kind {kind!r}") from None
    with _LOCK:
        found = _FAMILIES.get(name)
        if found is None:
            found = _FAMILIES[name] = CustomFamily(name, description, metric_kind)
        elif (found.description, found.kind) != (description, metric_kind):
            raise CustomMetricError(
                f"metric family '{name}' already exists as a {found.kind.name.lower()} "
                f"described {found.description!r}"
            )
    return found


def families() -> list[CustomFamily]:
    """Every family defined so far, for the metrics endpoint."""
    with _LOCK:
        return list(_FAMILIES.values())
