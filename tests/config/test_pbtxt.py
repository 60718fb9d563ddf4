"""config.pbtxt: protobuf text format against model_config.proto; unsupported fields refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fnserve.config.pbtxt import (
    Accelerator,
    ExecutionAccelerators,
    parse_config,
    to_accelerators,
    to_model_config,
)
from fnserve.errors import ModelConfigError

FULL = """
name: "scaler"
platform: "onnxruntime_onnx"
max_batch_size: 8
version_policy { latest { num_versions: 2 } }
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "Y" data_type: TYPE_STRING dims: [ -1 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
dynamic_batching {
  preferred_batch_size: [ 4, 8 ]
  max_queue_delay_microseconds: 100
  default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 5000 }
  priority_levels: 2
  default_priority_level: 1
  priority_queue_policy { key: 2 value: { max_queue_size: 3 } }
}
parameters { key: "intra_op_thread_count" value: { string_value: "1" } }
"""


def test_a_full_config_becomes_a_model_config() -> None:
    config = to_model_config(parse_config(FULL, "scaler/config.pbtxt"), version=3)
    assert (config.name, config.version, config.max_batch_size) == ("scaler", 3, 8)
    assert (config.backend, config.platform) == ("onnxruntime", "onnxruntime_onnx")
    assert [(t.name, t.datatype, list(t.dims)) for t in config.inputs] == [("X", "FP32", [4])]
    assert [(t.name, t.datatype) for t in config.outputs] == [("Y", "BYTES")]
    assert config.instance_group[0].count == 2
    assert config.instance_group[0].kind == "KIND_CPU"
    batching = config.dynamic_batching
    assert batching is not None
    assert list(batching.preferred_batch_size) == [4, 8]
    assert batching.default_queue_policy.timeout_action == "DELAY"
    assert batching.queue_policy(2).max_queue_size == 3
    assert config.parameters == {"intra_op_thread_count": "1"}
    doc = config.to_json()
    assert (doc["platform"], doc["backend"]) == ("onnxruntime_onnx", "onnxruntime")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('name: "m"\nmax_batch_size: "eight"', "2:17"),  # a bad value: line and column
        ('name: "m"\nmax_batch_sise: 8', 'has no field named "max_batch_sise"'),
        ("sequence_batching { }", "field 'sequence_batching' is not supported: sequence"),
        (
            "optimization { cuda { graphs: true } }",
            "field 'optimization.cuda' is not supported: CUDA graphs",
        ),
    ],
)
def test_errors_name_the_file_and_the_field(text: str, message: str) -> None:
    with pytest.raises(ModelConfigError, match="'m/config.pbtxt'") as caught:
        parse_config(text, "m/config.pbtxt")
    assert message in str(caught.value)


def test_reshape_and_format_are_read() -> None:
    message = parse_config(
        """
        max_batch_size: 4
        input [ { name: "X" data_type: TYPE_FP32 format: FORMAT_NHWC dims: [ -1, 4 ]
                  reshape { shape: [ -1, 2, 2 ] } } ]
        output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] reshape { shape: [ ] } } ]
        """,
        "m/config.pbtxt",
    )
    message.name = "m"
    config = to_model_config(message, 1)
    (x,), (y,) = config.inputs, config.outputs
    assert (x.dims, x.reshape, x.format) == ((-1, 4), (-1, 2, 2), "FORMAT_NHWC")
    assert (y.dims, y.reshape, y.model_dims) == ((1,), (), ())
    assert config.to_json()["output"][0]["reshape"] == {"shape": []}


@pytest.mark.parametrize(
    ("dims", "reshape", "message"),
    [
        ("[ 4 ]", "[ 3 ]", "fixed sizes multiply to 3 and 4"),
        ("[ -1, 4 ]", "[ 4 ]", "variable dims 0 and 1"),
        ("[ 4 ]", "[ -2 ]", "reshape must be a list of integers >= -1"),
    ],
)
def test_a_reshape_of_other_elements_is_refused(dims: str, reshape: str, message: str) -> None:
    text = f"""
        input [ {{ name: "X" data_type: TYPE_FP32 dims: {dims} reshape {{ shape: {reshape} }} }} ]
        output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ 1 ] }} ]
    """
    parsed = parse_config(text, "m/config.pbtxt")
    parsed.name = "m"
    with pytest.raises(ModelConfigError) as caught:
        to_model_config(parsed, 1)
    assert message in str(caught.value)


def test_decoupled_false_is_served_and_decoupled_true_refused() -> None:
    """Many real configs state Triton's default, `decoupled: false`, explicitly."""
    text = 'name: "m"\nmodel_transaction_policy { decoupled: false }'
    message = parse_config(text, "m/config.pbtxt")
    assert not message.model_transaction_policy.decoupled
    with pytest.raises(ModelConfigError) as caught:
        parse_config(text.replace("false", "true"), "m/config.pbtxt")
    assert "field 'model_transaction_policy.decoupled' is not supported: decoupled" in str(
        caught.value
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", {"latest": {"num_versions": 1}}),  # Triton's default
        ("version_policy { latest { num_versions: 2 } }", {"latest": {"num_versions": 2}}),
        ("version_policy { all { } }", {"all": {}}),
        ("version_policy { specific { versions: [ 3, 1 ] } }", {"specific": {"versions": [3, 1]}}),
    ],
)
def test_the_version_policy_is_reported_as_configured(text: str, expected: object) -> None:
    message = parse_config(f'name: "m"\n{text}', "c")
    message.input.add(name="X", data_type=11, dims=[1])
    message.output.add(name="Y", data_type=11, dims=[1])
    assert to_model_config(message, 1).to_json()["version_policy"] == expected


def test_a_missing_datatype_is_refused() -> None:
    message = parse_config('name: "m"\ninput [ { name: "X" dims: [ 1 ] } ]', "c")
    message.output.add(name="Y", data_type=1, dims=[1])
    with pytest.raises(ModelConfigError, match="tensor 'X': data_type is missing"):
        to_model_config(message, 1)


# optimization: execution accelerators are read; every other field is refused by name

ACCELERATED = """
name: "m"
backend: "onnxruntime"
optimization { execution_accelerators {
  gpu_execution_accelerator : [ {
    name : "tensorrt"
    parameters { key: "precision_mode" value: "FP16" }
    parameters { key: "max_workspace_size_bytes" value: "1073741824" }
  }, { name: "cuda" } ]
  cpu_execution_accelerator : [ { name : "openvino" } ]
} }
"""


def test_execution_accelerators_are_read_in_order() -> None:
    accelerators = to_accelerators(parse_config(ACCELERATED, "m/config.pbtxt"))
    assert accelerators == ExecutionAccelerators(
        gpu=(
            Accelerator(
                "tensorrt",
                {"precision_mode": "FP16", "max_workspace_size_bytes": "1073741824"},
            ),
            Accelerator("cuda"),
        ),
        cpu=(Accelerator("openvino"),),
    )
    assert accelerators
    assert not to_accelerators(parse_config('backend: "onnxruntime"', "c"))


@pytest.mark.parametrize("backend", ["pytorch", "tensorrt", "python"])
def test_execution_accelerators_of_other_backends_are_refused(backend: str) -> None:
    message = parse_config(ACCELERATED.replace('"onnxruntime"', f'"{backend}"'), "c")
    with pytest.raises(ModelConfigError) as caught:
        to_accelerators(message)
    assert f"not supported by backend '{backend}'" in str(caught.value)
    assert "'optimization.execution_accelerators'" in str(caught.value)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("graph", "{ level: 1 }"),
        ("priority", ": PRIORITY_MAX"),
        ("cuda", "{ busy_wait_events: true }"),
        ("input_pinned_memory", "{ enable: false }"),
        ("output_pinned_memory", "{ enable: false }"),
        ("gather_kernel_buffer_threshold", ": 4"),
        ("eager_batching", ": true"),
    ],
)
def test_other_optimization_fields_are_refused_by_name(field: str, value: str) -> None:
    with pytest.raises(ModelConfigError) as caught:
        parse_config(f"optimization {{ {field} {value} }}", "m/config.pbtxt")
    message = str(caught.value)
    assert f"field 'optimization.{field}' is not supported: " in message
    assert "not implemented" in message


class TestLabelFilename:
    TEXT = (
        'name: "m" input [ { name: "X" data_type: TYPE_FP32 dims: [ 3 ] } ] '
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 3 ] label_filename: "%s" } ]'
    )

    def _config(self, filename: str, model_dir: Path | None) -> Any:
        return to_model_config(
            parse_config(self.TEXT % filename, "m/config.pbtxt"), 1, None, model_dir
        )

    def test_labels_are_read_one_per_line_as_triton_reads_them(self, tmp_path: Path) -> None:
        (tmp_path / "labels.txt").write_bytes(b"cat\n\nbird\xff\n")
        config = self._config("labels.txt", tmp_path)
        (output,) = config.outputs
        assert output.labels == ("cat", "", "bird\udcff")  # non-UTF-8 bytes kept as they are
        assert config.to_json()["output"][0]["label_filename"] == "labels.txt"

    def test_an_unlabelled_output_reports_an_empty_label_filename(self) -> None:
        message = parse_config(FULL, "scaler/config.pbtxt")
        assert to_model_config(message, 1).to_json()["output"][0]["label_filename"] == ""

    @pytest.mark.parametrize(
        ("filename", "message"),
        [
            ("../labels.txt", "label file path '../labels.txt' for output 'Y' in model 'm' is "
             "outside model directory"),
            ("/etc/hostname", "is outside model directory"),
            ("missing.txt", "label file 'missing.txt' for output 'Y' in model 'm' cannot be "
             "read: No such file or directory"),
        ],
    )  # fmt: skip
    def test_a_file_outside_the_model_or_missing_fails(
        self, tmp_path: Path, filename: str, message: str
    ) -> None:
        (tmp_path / "labels.txt").write_text("a\n")
        model_dir = tmp_path / "m"
        model_dir.mkdir()
        with pytest.raises(ModelConfigError) as caught:
            self._config(filename, model_dir)
        assert message in str(caught.value)
