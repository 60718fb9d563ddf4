"""Custom metric families (Triton python_backend's `pb_utils.MetricFamily`)."""

from __future__ import annotations

import threading

import pytest

from fnserve import custom_metrics
from fnserve.backends.triton_python import pb_utils
from fnserve.custom_metrics import CustomMetricError, MetricKind


def test_the_same_definition_is_the_same_family_and_labels_the_same_metric() -> None:
    first = custom_metrics.family("cm_same", "help", MetricKind.COUNTER)
    again = custom_metrics.family("cm_same", "help", MetricKind.COUNTER)
    assert first is again
    assert first.metric({"a": "1"}) is again.metric({"a": "1"})
    assert first.metric({"a": "1"}) is not first.metric({"a": "2"})
    assert first in custom_metrics.families()
    with pytest.raises(CustomMetricError, match="already exists as a counter"):
        custom_metrics.family("cm_same", "help", MetricKind.GAUGE)


def test_each_kind_allows_its_own_operations() -> None:
    counter = custom_metrics.family("cm_counter", "c", MetricKind.COUNTER).metric()
    counter.increment(2)
    assert counter.value() == 2
    with pytest.raises(CustomMetricError, match="cannot be incremented by -1"):
        counter.increment(-1)
    with pytest.raises(CustomMetricError, match="only supported for a gauge"):
        counter.set(3)
    gauge = custom_metrics.family("cm_gauge", "g", MetricKind.GAUGE).metric()
    gauge.set(5)
    gauge.increment(-2)
    assert gauge.value() == 3
    histogram = custom_metrics.family("cm_hist", "h", MetricKind.HISTOGRAM)
    with pytest.raises(CustomMetricError, match="needs buckets"):
        histogram.metric()
    with pytest.raises(CustomMetricError, match="must increase"):
        histogram.metric(buckets=[2, 1])
    metric = histogram.metric(buckets=[1, 2])
    for value in (0.5, 1.0, 1.5, 9):
        metric.observe(value)
    assert metric.snapshot() == (12.0, [2, 1, 1])  # le=1 holds 0.5 and 1.0
    with pytest.raises(CustomMetricError, match="not supported for a histogram"):
        metric.value()


def test_concurrent_increments_are_not_lost() -> None:
    counter = custom_metrics.family("cm_threads", "t", MetricKind.COUNTER).metric()

    def add() -> None:
        for _ in range(10_000):
            counter.increment(1)

    threads = [threading.Thread(target=add) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert counter.value() == 40_000


def test_pb_utils_speaks_tritons_api_and_exceptions() -> None:
    family = pb_utils.MetricFamily("cm_pb", "p", pb_utils.MetricFamily.GAUGE)
    metric = family.Metric(labels={"model": "m"})
    metric.set(4)
    assert metric.value() == 4
    with pytest.raises(pb_utils.TritonModelException, match="only supported for a histogram"):
        metric.observe(1)
    with pytest.raises(pb_utils.TritonModelException, match="unknown metric kind"):
        pb_utils.MetricFamily("cm_bad", "b", 7)
    with pytest.raises(pb_utils.TritonModelException, match="invalid metric family name"):
        pb_utils.MetricFamily("9 bad", "b", pb_utils.MetricFamily.COUNTER)
