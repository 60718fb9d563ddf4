"""Options parsing, request data (random, zero, perf_analyzer files) and request encoding."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest

from fnserve.bench import payloads
from fnserve.bench.data import (
    InputSpec,
    Tensor,
    load_samples,
    make_requests,
    resolve_inputs,
    synthetic_sample,
)
from fnserve.bench.options import BenchError, BenchOptions, parse_concurrency, parse_shapes
from fnserve.protocol import grpc_service_pb2 as pb
from fnserve.tensors import from_raw

SPEC = InputSpec("INPUT0", "FP32", (4,))


class TestOptions:
    @pytest.mark.parametrize(
        ("values", "value_range", "expected"),
        [
            (None, None, (1,)),
            ("1,8,64", None, (1, 8, 64)),
            (None, "1:9:4", (1, 5, 9)),
            (None, "2:4", (2, 3, 4)),
        ],
    )
    def test_concurrency_forms(
        self, values: str | None, value_range: str | None, expected: tuple[int, ...]
    ) -> None:
        assert parse_concurrency(values, value_range) == expected

    @pytest.mark.parametrize(
        ("values", "value_range"),
        [("0", None), ("a", None), ("1", "1:2"), (None, "4:1"), (None, "1:2:3:4")],
    )
    def test_concurrency_rejects(self, values: str | None, value_range: str | None) -> None:
        with pytest.raises(BenchError, match="concurrency"):
            parse_concurrency(values, value_range)

    def test_shapes(self) -> None:
        assert parse_shapes(["INPUT0:1,2", "a:b:3"]) == (("INPUT0", (1, 2)), ("a:b", (3,)))
        with pytest.raises(BenchError, match="NAME:d1,d2"):
            parse_shapes(["INPUT0:x"])

    def test_from_cli_defaults_port_by_protocol_and_round_trips(self) -> None:
        common = {
            "concurrency": "1,2",
            "concurrency_range": None,
            "shape": ("X:3",),
            "model_version": "",
            "duration_s": 1.0,
            "warmup_s": 0.0,
            "input_data": "zero",
            "batch_size": 2,
            "binary": False,
            "workers": 0,
            "csv": None,
            "plot": None,
            "ui": False,
        }
        grpc = BenchOptions.from_cli(model="m", url=None, protocol="grpc", **common)
        http = BenchOptions.from_cli(model="m", url="http://h:1/", protocol="http", **common)
        assert (grpc.grpc_target, http.http_base) == ("127.0.0.1:8001", "http://h:1")
        assert BenchOptions.from_json(http.to_json()) == http
        assert http.encoding == "HTTP (JSON)"

    def test_check_rejects_bad_values(self) -> None:
        with pytest.raises(BenchError, match="--duration"):
            BenchOptions("m", "h:1", duration_s=0).check()
        with pytest.raises(BenchError, match="TLS"):
            BenchOptions("m", "https://h:1").check()


class TestInputs:
    def test_metadata_drops_batch_dimension_and_applies_shapes(self) -> None:
        metadata = {
            "inputs": [
                {"name": "A", "datatype": "FP32", "shape": [-1, -1, 3]},
                {"name": "B", "datatype": "INT8", "shape": [-1, 2]},
            ]
        }
        specs = resolve_inputs(metadata, 8, {"A": (5, 3)})
        assert specs == (InputSpec("A", "FP32", (5, 3)), InputSpec("B", "INT8", (2,)))
        assert resolve_inputs(metadata, 0, {})[1].dims == (-1, 2)

    @pytest.mark.parametrize(
        ("shapes", "match"), [({"A": (4,)}, "does not fit"), ({"Z": (1,)}, "does not have")]
    )
    def test_shape_errors(self, shapes: dict[str, tuple[int, ...]], match: str) -> None:
        metadata = {"inputs": [{"name": "A", "datatype": "FP32", "shape": [-1, 3]}]}
        with pytest.raises(BenchError, match=match):
            resolve_inputs(metadata, 8, shapes)

    def test_synthetic_samples_fit_every_datatype(self) -> None:
        specs = [
            InputSpec(t, t, (2, 3)) for t in ("BOOL", "INT8", "UINT64", "FP16", "BYTES", "BF16")
        ]
        sample = synthetic_sample(specs, zero=False)
        assert {name: a.shape for name, a in sample.items()} == dict.fromkeys(sample, (2, 3))
        assert sample["BYTES"].dtype == object
        assert sample["BF16"].dtype == np.uint16
        assert not synthetic_sample([SPEC], zero=True)["INPUT0"].any()
        with pytest.raises(BenchError, match="--shape INPUT0"):
            synthetic_sample([InputSpec("INPUT0", "FP32", (-1,))], zero=False)


class TestInputDataFile:
    def write(self, tmp_path: Path, data: object) -> Path:
        path = tmp_path / "data.json"
        path.write_text(json.dumps(data))
        return path

    def test_all_value_forms(self, tmp_path: Path) -> None:
        raw = base64.b64encode(np.arange(4, dtype="<f4").tobytes()).decode()
        path = self.write(
            tmp_path,
            {
                "data": [
                    {"INPUT0": [1, 2, 3, 4]},
                    {"INPUT0": {"content": [5, 6, 7, 8], "shape": [4]}},
                    [{"INPUT0": {"b64": raw}}, {"INPUT0": {"content": {"b64": raw}}}],  # a stream
                ]
            },
        )
        samples = load_samples(path, [SPEC])
        assert [s["INPUT0"].tolist() for s in samples] == [
            [1, 2, 3, 4],
            [5, 6, 7, 8],
            [0, 1, 2, 3],
            [0, 1, 2, 3],
        ]
        assert samples[0]["INPUT0"].dtype == np.float32

    def test_variable_dimension_comes_from_the_data(self, tmp_path: Path) -> None:
        path = self.write(tmp_path, {"data": [{"X": [1, 2, 3, 4, 5, 6]}]})
        sample = load_samples(path, [InputSpec("X", "INT32", (-1, 2))])[0]
        assert sample["X"].shape == (3, 2)

    @pytest.mark.parametrize(
        ("data", "match"),
        [
            ({"data": []}, "non-empty"),
            ({"data": [{"OTHER": [1]}]}, "entry 0 has no data for input 'INPUT0'"),
            ({"data": [{"INPUT0": [1, 2]}]}, "entry 0: input 'INPUT0': expected 4 elements"),
        ],
    )
    def test_errors_name_the_entry(self, tmp_path: Path, data: object, match: str) -> None:
        with pytest.raises(BenchError, match=match):
            load_samples(self.write(tmp_path, data), [SPEC])

    def test_unreadable_file(self, tmp_path: Path) -> None:
        with pytest.raises(BenchError, match="cannot read --input-data"):
            load_samples(tmp_path / "missing.json", [SPEC])


class TestRequests:
    def samples(self, count: int) -> list[dict[str, np.ndarray]]:
        return [{"INPUT0": np.full(4, i, dtype=np.float32)} for i in range(count)]

    def test_batches_use_every_sample_equally(self) -> None:
        requests = make_requests(self.samples(3), [SPEC], batch_size=2, batching=True)
        rows = [r[0].array[:, 0].tolist() for r in requests]
        assert rows == [[0, 1], [2, 0], [1, 2]]

    def test_without_batching(self) -> None:
        requests = make_requests(self.samples(2), [SPEC], batch_size=1, batching=False)
        assert [r[0].array.shape for r in requests] == [(4,), (4,)]
        with pytest.raises(BenchError, match="max_batch_size > 0"):
            make_requests(self.samples(2), [SPEC], batch_size=2, batching=False)

    def test_different_shapes_cannot_share_a_batch(self) -> None:
        samples = [{"X": np.zeros(2)}, {"X": np.zeros(3)}]
        with pytest.raises(BenchError, match="--batch-size 1"):
            make_requests(samples, [InputSpec("X", "FP64", (-1,))], batch_size=2, batching=True)


class TestPayloads:
    tensors = (
        Tensor("INPUT0", "FP32", np.arange(8, dtype=np.float32).reshape(2, 4)),
        Tensor("TEXT", "BYTES", np.array([b"ab", b"c"], dtype=object)),
    )

    def test_json(self) -> None:
        request = payloads.http_json(self.tensors)
        body = json.loads(request.body)
        assert body["inputs"][0] == {
            "name": "INPUT0",
            "datatype": "FP32",
            "shape": [2, 4],
            "data": list(range(8)),
        }
        assert body["inputs"][1]["data"] == ["ab", "c"]
        with pytest.raises(BenchError, match="use --binary"):
            payloads.http_json([Tensor("H", "FP16", np.zeros(2, dtype=np.float16))])

    def test_binary(self) -> None:
        request = payloads.http_binary(self.tensors)
        size = int(request.headers["Inference-Header-Content-Length"])
        header, raw = json.loads(request.body[:size]), request.body[size:]
        assert header["parameters"] == {"binary_data_output": True}
        first = header["inputs"][0]["parameters"]["binary_data_size"]
        assert from_raw("INPUT0", "FP32", (2, 4), raw[:first]).tolist() == [
            [0, 1, 2, 3],
            [4, 5, 6, 7],
        ]
        assert from_raw("TEXT", "BYTES", (2,), raw[first:]).tolist() == [b"ab", b"c"]

    def test_grpc(self) -> None:
        request = pb.ModelInferRequest.FromString(payloads.grpc_infer("m", "2", self.tensors))
        assert (request.model_name, request.model_version) == ("m", "2")
        assert [(i.name, list(i.shape)) for i in request.inputs] == [
            ("INPUT0", [2, 4]),
            ("TEXT", [2]),
        ]
        assert request.raw_input_contents[0] == self.tensors[0].array.tobytes()

    def test_infer_path_quotes_names(self) -> None:
        assert payloads.infer_path("a b", "3") == "/v2/models/a%20b/versions/3/infer"
