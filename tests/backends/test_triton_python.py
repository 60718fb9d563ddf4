"""The Triton python backend on real `model.py` files written for Triton (no mocks)."""

from __future__ import annotations

import asyncio
import json
import logging
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fnserve.backends.base import ModelFileSpec, OneRequest
from fnserve.backends.registry import factory_for
from fnserve.backends.triton_python import pb_utils
from fnserve.backends.triton_python.backend import (
    TritonPythonBackend,
    TritonPythonBackendFactory,
)
from fnserve.config.model_config import DynamicBatching, InstanceGroup, ModelConfig, Tensor
from fnserve.errors import (
    InvalidInputError,
    ModelExecutionError,
    ModelNotFoundError,
    RepositoryError,
    UnavailableError,
    UnsupportedError,
)
from fnserve.model import InstanceContext
from fnserve.runtime import Runtime
from fnserve.scheduling.instance import ThreadInstance
from fnserve.scheduling.runner import BatchRunner
from fnserve.types import InferInput, InferRequest
from tests.backends.triton_python_models import ADD_SUB

CPU = InstanceContext("add_sub", 1, 0, "KIND_CPU", "cpu", {})


def _write(tmp_path: Path, source: str, name: str = "add_sub") -> Path:
    path = tmp_path / name / "1" / "model.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source))
    return path


def _config(name: str = "add_sub", max_batch_size: int = 8, **kwargs: Any) -> ModelConfig:
    return ModelConfig(
        name=name,
        inputs=[Tensor("INPUT0", "FP32", [4]), Tensor("INPUT1", "FP32", [4])],
        outputs=[Tensor("OUTPUT0", "FP32", [4]), Tensor("OUTPUT1", "FP32", [4])],
        max_batch_size=max_batch_size,
        backend="python",
        instance_group=(InstanceGroup(kind="KIND_CPU"),),
        **kwargs,
    )


def _backend(path: Path, config: ModelConfig | None = None) -> Any:
    return factory_for(ModelFileSpec(config or _config(), path)).create(CPU)


def _inputs(rows: int = 3) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(rows)
    return {
        "INPUT0": rng.standard_normal((rows, 4)).astype(np.float32),
        "INPUT1": rng.standard_normal((rows, 4)).astype(np.float32),
    }


def _input(name: str, array: np.ndarray) -> InferInput:
    return InferInput(name, "FP32", array)


@pytest.fixture
def add_sub(tmp_path: Path) -> Path:
    return _write(tmp_path, ADD_SUB)


def test_the_registry_builds_a_triton_python_backend(add_sub: Path) -> None:
    factory = factory_for(ModelFileSpec(_config(), add_sub))
    assert isinstance(factory, TritonPythonBackendFactory)
    assert (factory.name, factory.process_isolation) == ("python", False)
    backend = factory.create(CPU)
    assert isinstance(backend, TritonPythonBackend)
    assert backend.is_async is False


def test_initialize_gets_tritons_args(add_sub: Path) -> None:
    args = _backend(add_sub).model.args
    assert set(args) == {
        "model_config",
        "model_instance_kind",
        "model_instance_name",
        "model_instance_device_id",
        "model_repository",
        "model_version",
        "model_name",
    }
    assert all(isinstance(v, str) for v in args.values())
    config = json.loads(args["model_config"])
    assert config["name"] == "add_sub"
    assert config["max_batch_size"] == 8
    assert [o["data_type"] for o in config["output"]] == ["TYPE_FP32", "TYPE_FP32"]
    assert args["model_instance_kind"] == "CPU"
    assert args["model_instance_device_id"] == "0"
    assert args["model_instance_name"] == "add_sub_0"
    assert args["model_repository"] == str(add_sub.parent.parent)
    assert (args["model_version"], args["model_name"]) == ("1", "add_sub")


def test_add_sub_equals_numpy_and_passes_the_runners_checks(add_sub: Path) -> None:
    config = _config()
    backend = _backend(add_sub, config)
    runner = BatchRunner(config, backend)
    inputs = _inputs(5)
    out = runner.check_outputs(runner.call(inputs, [{"p": 1}]), rows=5)
    np.testing.assert_array_equal(out["OUTPUT0"], inputs["INPUT0"] + inputs["INPUT1"])
    np.testing.assert_array_equal(out["OUTPUT1"], inputs["INPUT0"] - inputs["INPUT1"])
    assert out["OUTPUT0"].dtype == np.float32
    assert backend.model.seen == [(["OUTPUT0", "OUTPUT1"], '{"p": 1}')]


# Per request, as in Triton: a model that reads one row per request and echoes what it saw.
PER_REQUEST = """
    import json

    import numpy as np
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def execute(self, requests):
            self.batches = getattr(self, "batches", []) + [len(requests)]
            responses = []
            for request in requests:
                params = json.loads(request.parameters())
                if params.get("fail"):
                    code = getattr(pb_utils.TritonError, params["fail"])
                    error = pb_utils.TritonError(f"refused {request.request_id()}", code)
                    responses.append(pb_utils.InferenceResponse(error=error))
                    continue
                first = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()[0][0]
                wanted = request.requested_output_names()
                outputs = [
                    pb_utils.Tensor(name, np.full((1, 4), first + i, np.float32))
                    for i, name in enumerate(["OUTPUT0", "OUTPUT1"])
                    if name in wanted
                ]
                responses.append(pb_utils.InferenceResponse(outputs))
            return responses
"""


async def test_each_request_of_a_batch_is_its_own_request(tmp_path: Path) -> None:
    """Three requests batched together reach `execute` as three requests, each with its own
    rows, parameters, id and requested outputs, and a response with an error fails only its
    request, with the status of its code and the model's own message."""
    config = _config(
        "per_request", dynamic_batching=DynamicBatching(max_queue_delay_microseconds=200_000)
    )
    path = _write(tmp_path, PER_REQUEST, "per_request")
    runtime = Runtime([ModelFileSpec(config, path)])
    await runtime.start()
    try:

        def request(value: float, **kwargs: Any) -> InferRequest:
            rows = np.full((1, 4), value, np.float32)
            return InferRequest(
                "per_request", (_input("INPUT0", rows), _input("INPUT1", rows)), **kwargs
            )

        ok, only_one, refused = await asyncio.gather(
            runtime.infer(request(1.0, id="a")),
            runtime.infer(request(5.0, id="b", outputs=("OUTPUT1",))),
            runtime.infer(request(9.0, id="c", parameters={"fail": "INVALID_ARG"})),
            return_exceptions=True,
        )
        model = runtime.registry.resolve("per_request", "", True).loaded
        assert model is not None
        (instance,) = model.pool.instances
        assert isinstance(instance, ThreadInstance)
        assert isinstance(instance.runner.backend, TritonPythonBackend)
        assert instance.runner.backend.model.batches == [3]  # one batch of three requests
        assert not isinstance(ok, BaseException)
        assert [o.name for o in ok.outputs] == ["OUTPUT0", "OUTPUT1"]
        assert ok.outputs[1].data.tolist() == [[2.0] * 4]
        assert not isinstance(only_one, BaseException)
        assert [(o.name, o.data.tolist()) for o in only_one.outputs] == [("OUTPUT1", [[6.0] * 4])]
        assert isinstance(refused, InvalidInputError)  # 400 / INVALID_ARGUMENT
        assert refused.message == "refused c"
    finally:
        await runtime.aclose()


@pytest.mark.parametrize(
    ("code", "error"),
    [
        ("INVALID_ARG", InvalidInputError),
        ("NOT_FOUND", ModelNotFoundError),
        ("UNAVAILABLE", UnavailableError),
        ("UNSUPPORTED", UnsupportedError),
        ("INTERNAL", ModelExecutionError),
        ("UNKNOWN", ModelExecutionError),
    ],
)
def test_an_error_response_gets_the_status_of_its_code(
    tmp_path: Path, code: str, error: type[Exception]
) -> None:
    backend = _backend(_write(tmp_path, PER_REQUEST, "per_request"), _config("per_request"))
    (answer,) = backend.execute_each([OneRequest(_inputs(1), {"fail": code}, None, "r7")])
    assert type(answer) is error
    assert str(answer) == "refused r7"


def test_output_dtypes_follow_the_config(tmp_path: Path) -> None:
    config = ModelConfig(
        name="add_sub",
        inputs=[Tensor("INPUT0", "INT32", [2]), Tensor("INPUT1", "INT32", [2])],
        outputs=[Tensor("OUTPUT0", "INT64", [2]), Tensor("OUTPUT1", "FP64", [2])],
        max_batch_size=4,
        backend="python",
    )
    out = _backend(_write(tmp_path, ADD_SUB), config).execute(
        {"INPUT0": np.array([[1, 2]], np.int32), "INPUT1": np.array([[3, 5]], np.int32)}, [{}]
    )
    assert out["OUTPUT0"].dtype == np.int64
    assert out["OUTPUT1"].dtype == np.float64
    assert out["OUTPUT1"].tolist() == [[-2.0, -3.0]]


def test_an_error_response_fails_its_request_with_the_models_message(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def execute(self, requests):
                return [
                    pb_utils.InferenceResponse(
                        output_tensors=[], error=pb_utils.TritonError("INPUT0 must be positive")
                    )
                    for _ in requests
                ]
        """,
    )
    config = _config()
    runner = BatchRunner(config, _backend(path, config))
    with pytest.raises(ModelExecutionError) as info:
        runner.call(_inputs(), [{}])
    assert str(info.value) == "INPUT0 must be positive"  # as Triton passes it on


def test_a_raising_execute_is_one_model_execution_error(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def execute(self, requests):
                raise pb_utils.TritonModelException("bad batch")
        """,
    )
    config = _config()
    runner = BatchRunner(config, _backend(path, config))
    with pytest.raises(ModelExecutionError, match="raised TritonModelException: bad batch"):
        runner.call(_inputs(), [{}])


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ("return None", "must return a list of one pb_utils.InferenceResponse.*returned None"),
        ("return []", "returned a list of 0"),
        ("return [{'OUTPUT0': 1}]", "returned a dict in its list"),
    ],
)
def test_a_wrong_return_value_is_explained(tmp_path: Path, body: str, error: str) -> None:
    path = _write(
        tmp_path,
        f"""
        class TritonPythonModel:
            def execute(self, requests):
                {body}
        """,
    )
    with pytest.raises(ModelExecutionError, match=error):
        _backend(path).execute(_inputs(), [{}])


def test_a_raising_initialize_fails_the_load_naming_the_file(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """
        class TritonPythonModel:
            def initialize(self, args):
                raise FileNotFoundError("weights.bin is missing")

            def execute(self, requests):
                return []
        """,
    )
    with pytest.raises(RepositoryError) as info:
        _backend(path)
    message = str(info.value)
    assert str(path) in message
    assert "initialize(args) failed at model.py line 4" in message
    assert "FileNotFoundError: weights.bin is missing" in message


def test_an_import_error_or_a_missing_class_fails_the_load(tmp_path: Path) -> None:
    broken = _write(tmp_path, "import not_a_module_anywhere\n", "broken")
    with pytest.raises(RepositoryError, match=f"importing '{broken}' failed at line 1.*"):
        _backend(broken)
    empty = _write(tmp_path, "X = 1\n", "empty")
    with pytest.raises(RepositoryError, match="defines no class TritonPythonModel"):
        _backend(empty)


def test_unload_calls_finalize_once(tmp_path: Path) -> None:
    marker = tmp_path / "finalized"
    path = _write(
        tmp_path,
        f"""
        from pathlib import Path

        class TritonPythonModel:
            def execute(self, requests):
                return []

            def finalize(self):
                with Path({str(marker)!r}).open("a") as f:
                    f.write("x")
        """,
    )
    backend = _backend(path)
    assert not marker.exists()
    backend.unload()
    backend.unload()
    assert marker.read_text() == "x"
    assert backend.model is None


def test_a_raising_finalize_is_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = _write(
        tmp_path,
        """
        class TritonPythonModel:
            def execute(self, requests):
                return []

            def finalize(self):
                raise RuntimeError("boom")
        """,
    )
    with caplog.at_level(logging.ERROR):
        _backend(path).unload()
    assert "finalize() raised" in caplog.text


def test_an_unprovided_pb_utils_use_fails_the_load_naming_it(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """
        import triton_python_backend_utils as utils
        from triton_python_backend_utils import load_model, Tensor

        class TritonPythonModel:
            def initialize(self, args):
                try:
                    self.ready = utils.is_model_ready("other")
                except AttributeError:  # guarded: the model copes without it
                    self.ready = None

            def execute(self, requests):
                utils.get_model_dir()
                requests[0].get_response_sender()
                call = utils.InferenceRequest(model_name="m", inputs=[], requested_output_names=[])
                call.exec(decoupled=True)
                return [utils.InferenceResponse([], parameters={"a": 1})]
        """,
    )
    with pytest.raises(RepositoryError) as info:
        _backend(path)
    message = str(info.value)
    assert message.startswith("model 'add_sub' (")
    assert "model.py uses what fnserve's triton_python_backend_utils does not provide" in message
    for use in (
        "pb_utils.load_model (line 3)",
        "pb_utils.get_model_dir (line 13)",
        "get_response_sender() (decoupled response senders are not supported) (line 14)",
        "exec(decoupled=True) (decoupled models are not supported) (line 16)",
        "InferenceResponse(parameters=...) (response parameters are not sent) (line 17)",
    ):
        assert use in message
    assert "line 9" not in message  # the guarded use


def test_a_use_the_syntax_hides_fails_when_reached_naming_itself(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def execute(self, requests):
                getattr(pb_utils, "get_model_dir")()
                return []
        """,
    )
    config = _config()
    runner = BatchRunner(config, _backend(path, config))
    with pytest.raises(ModelExecutionError) as info:
        runner.call(_inputs(), [{}])
    assert "pb_utils.get_model_dir is not provided by fnserve" in str(info.value)
    assert not hasattr(pb_utils, "get_model_dir")  # still an AttributeError for feature checks


@pytest.mark.parametrize("method", ["exec", "async_exec"])
def test_bls_to_a_decoupled_model_is_refused_naming_it(tmp_path: Path, method: str) -> None:
    path = _write(
        tmp_path,
        f"""
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def execute(self, requests):
                call = pb_utils.InferenceRequest(
                    model_name="other",
                    requested_output_names=["Y"],
                    inputs=[pb_utils.Tensor("X", requests[0].inputs()[0].as_numpy())],
                )
                decoupled = len(requests) > 0  # not visible at load
                return [call.{method}(decoupled=decoupled)]
        """,
    )
    with pytest.raises(pb_utils.TritonModelException) as info:
        _backend(path).execute(_inputs(), [{}])
    assert str(info.value).startswith(
        f"pb_utils.InferenceRequest.{method}(decoupled=True) is not provided by fnserve"
    )


def test_bls_outside_execute_fails_naming_where_it_works(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """
        import numpy as np
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def initialize(self, args):
                x = pb_utils.Tensor("X", np.zeros((1, 4), np.float32))
                pb_utils.InferenceRequest(model_name="other", inputs=[x]).exec()

            def execute(self, requests):
                return []
        """,
    )
    with pytest.raises(RepositoryError) as info:
        _backend(path)
    assert (
        "TritonModelException: pb_utils.InferenceRequest.exec: BLS is only supported during "
        "the 'execute' function"
    ) in str(info.value)


async def test_an_async_execute_is_awaited(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            async def execute(self, requests):
                x = pb_utils.get_input_tensor_by_name(requests[0], "INPUT0").as_numpy()
                outputs = [pb_utils.Tensor("OUTPUT0", x), pb_utils.Tensor("OUTPUT1", -x)]
                return [pb_utils.InferenceResponse(outputs)]
        """,
    )
    backend = _backend(path)
    assert backend.is_async is True
    inputs = _inputs()
    out = await backend.aexecute(inputs, [{}])
    np.testing.assert_array_equal(out["OUTPUT1"], -inputs["INPUT0"])


async def test_concurrent_requests_through_the_runtime(add_sub: Path) -> None:
    config = _config(dynamic_batching=DynamicBatching(max_queue_delay_microseconds=2000))
    runtime = Runtime([ModelFileSpec(config, add_sub)])
    await runtime.start()
    try:
        pairs = [
            (np.full((1 + i % 3, 4), i, np.float32), np.full((1 + i % 3, 4), 1, np.float32))
            for i in range(10)
        ]
        responses = await asyncio.gather(
            *(
                runtime.infer(InferRequest("add_sub", (_input("INPUT0", a), _input("INPUT1", b))))
                for a, b in pairs
            )
        )
    finally:
        await runtime.aclose()
    for (a, b), response in zip(pairs, responses, strict=True):
        got = {o.name: o.data for o in response.outputs}
        np.testing.assert_array_equal(got["OUTPUT0"], a + b)
        np.testing.assert_array_equal(got["OUTPUT1"], a - b)


# pb_utils itself


def test_an_execution_environment_is_ignored_with_a_warning(
    add_sub: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = _config(parameters={"EXECUTION_ENV_PATH": "$$TRITON_MODEL_DIRECTORY/env.tar.gz"})
    with caplog.at_level(logging.WARNING):
        backend = _backend(add_sub, config)
    assert backend.model is not None
    assert "parameter EXECUTION_ENV_PATH is ignored" in caplog.text
