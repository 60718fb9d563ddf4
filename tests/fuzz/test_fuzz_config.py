"""Fuzz the declaration parser: `ModelConfig` and its parts, and `ServerConfig.from_mapping`.

Property: building a declaration from arbitrary values either succeeds or raises a
`FnserveError` (`ModelConfigError`), whose message the CLI prints on one line; never a
TypeError or AttributeError from deep inside. Valid declarations round-trip through `to_json`.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, strategies as st

from fnserve.config.model_config import (
    DynamicBatching,
    InstanceGroup,
    ModelConfig,
    QueuePolicy,
    Tensor,
)
from fnserve.config.server import ServerConfig
from fnserve.tensors import DATATYPES
from tests.fuzz.strategies import json_values, only_fnserve_errors, scalars

anything = st.one_of(json_values, st.tuples(scalars, scalars))
ints = st.one_of(st.integers(-3, 70), scalars)
dims = st.one_of(st.lists(st.one_of(st.integers(-3, 8), scalars), max_size=4), anything)


def _maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(strategy, anything)


tensors = st.builds(
    lambda *args: only_fnserve_errors(lambda: Tensor(*args)),
    _maybe(st.text(max_size=4)),
    _maybe(st.sampled_from(DATATYPES)),
    dims,
    _maybe(st.booleans()),
)
policies = st.builds(
    lambda *args: only_fnserve_errors(lambda: QueuePolicy(*args)),
    _maybe(st.sampled_from(["REJECT", "DELAY"])),
    ints,
    _maybe(st.booleans()),
    ints,
)
batching = st.builds(
    lambda *args: only_fnserve_errors(lambda: DynamicBatching(*args)),
    st.one_of(st.lists(ints, max_size=3), anything),
    ints,
    _maybe(st.booleans()),
    ints,
    ints,
    _maybe(policies),
    st.one_of(st.dictionaries(ints, _maybe(policies), max_size=2), anything),
)
groups = st.builds(
    lambda *args: only_fnserve_errors(lambda: InstanceGroup(*args)),
    ints,
    _maybe(st.sampled_from(["KIND_AUTO", "KIND_CPU", "KIND_GPU"])),
    st.one_of(st.lists(ints, max_size=2), anything),
    _maybe(st.text(max_size=3)),
)


@given(
    _maybe(st.text(max_size=4)),
    st.one_of(st.lists(_maybe(tensors), max_size=3), anything),
    st.one_of(st.lists(_maybe(tensors), max_size=3), anything),
    ints,
    ints,
    _maybe(batching),
    st.one_of(st.lists(_maybe(groups), max_size=2), anything),
    st.one_of(st.dictionaries(scalars, scalars, max_size=2), anything),
)
def test_model_config_from_arbitrary_values(
    name: Any,
    inputs: Any,
    outputs: Any,
    version: Any,
    max_batch_size: Any,
    dynamic_batching: Any,
    instance_group: Any,
    parameters: Any,
) -> None:
    only_fnserve_errors(
        lambda: ModelConfig(
            name,
            inputs,
            outputs,
            version,
            max_batch_size,
            dynamic_batching,
            instance_group,
            parameters,
        )
    )


valid_tensors = st.builds(
    Tensor,
    st.text(alphabet="ABCXYZ_0123", min_size=1, max_size=6),
    st.sampled_from(DATATYPES),
    st.lists(st.integers(-1, 8), min_size=1, max_size=4),
)


@given(
    st.lists(valid_tensors, min_size=1, max_size=3, unique_by=lambda t: t.name),
    st.lists(valid_tensors, min_size=1, max_size=3, unique_by=lambda t: t.name),
    st.integers(0, 16),
    st.integers(1, 4),
)
def test_valid_model_config_round_trips(
    inputs: list[Tensor], outputs: list[Tensor], max_batch_size: int, count: int
) -> None:
    config = ModelConfig(
        "m",
        inputs,
        outputs,
        max_batch_size=max_batch_size,
        instance_group=[InstanceGroup(count, "KIND_CPU")],
    )
    doc = config.to_json()
    assert doc["name"] == "m"
    assert doc["max_batch_size"] == max_batch_size
    assert [t["name"] for t in doc["input"]] == [t.name for t in inputs]
    assert [list(map(int, t["dims"])) for t in doc["output"]] == [list(t.dims) for t in outputs]


server_keys = st.sampled_from(
    [
        "host",
        "http_port",
        "grpc_port",
        "max_body_bytes",
        "shutdown_timeout_s",
        "log_level",
        "max_name_length",
        "max_bytes_elements",
        "max_gzip_members",
        "nope",
        "",
    ]
)


@given(st.dictionaries(st.one_of(server_keys, scalars), anything, max_size=4))
def test_server_config_from_arbitrary_mapping(values: dict[Any, Any]) -> None:
    only_fnserve_errors(lambda: ServerConfig.from_mapping(values))
