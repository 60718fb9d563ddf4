"""Turn an `InferRequest` into a validated `PendingRequest` for one model's scheduler.

Everything a request can get wrong against the model's declaration is caught here, before it
is queued, with Triton's wording where it has one: unknown or missing inputs, datatypes, shapes,
batch size, unknown outputs and the request parameters Triton reserves.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fnserve.config.model_config import ModelConfig, Tensor
from fnserve.config.tensor_plan import InputsAccepted
from fnserve.errors import InvalidInputError, UnsupportedError
from fnserve.limits import quote
from fnserve.types import Array, InferRequest, ParamValue

# Request parameters Triton interprets itself; none of them reaches the model.
_SCHEDULING_KEYS = frozenset(
    {"priority", "timeout", "sequence_id", "sequence_start", "sequence_end"}
)


@dataclass(eq=False, slots=True)
class PendingRequest:
    """A validated request waiting in (or taken from) a model's queue."""

    inputs: dict[str, Array]
    rows: int
    shape_key: tuple[tuple[str, tuple[int, ...]], ...]
    future: asyncio.Future[dict[str, Array]]
    priority: int = 0
    timeout_us: int = 0
    parameters: dict[str, ParamValue] = field(default_factory=dict)
    enqueued_ns: int = 0
    level: int = 0
    timer: asyncio.TimerHandle | None = None
    call_chain: tuple[str, ...] = ()  # the models it was called from (business logic)
    background: bool = False  # a durable job's request: runs below every online request
    request_id: str = ""  # the client's id (for backends that see requests one by one)
    requested: tuple[str, ...] | None = None  # the outputs the client asked for; None: all

    @property
    def alive(self) -> bool:
        """False once answered or cancelled (its client went away)."""
        return not self.future.done()


def prepare(config: ModelConfig, request: InferRequest, background: bool = False) -> PendingRequest:
    """Validate `request` against `config` and wrap it for the scheduler.

    Args:
        config: the model's configuration.
        request: the request as decoded.
        background: queue it in the background lane (durable jobs), below every priority
            level; its `priority` and `timeout` parameters are then ignored.

    Raises:
        InvalidInputError: the request does not fit the model's declaration.
    """
    inputs, rows, shape_key = checked(config, request)
    if request.parameters:
        priority, timeout_us, custom = _split_parameters(config.name, request.parameters)
    else:  # most requests, and every ensemble step
        priority, timeout_us, custom = 0, 0, {}
    return PendingRequest(
        inputs,
        rows,
        shape_key,
        asyncio.get_running_loop().create_future(),
        priority,
        timeout_us,
        custom,
        time.perf_counter_ns(),
        call_chain=request.call_chain,
        background=background,
        request_id=request.id,
        requested=request.outputs,
    )


def checked(config: ModelConfig, request: InferRequest) -> InputsAccepted:
    """The request's inputs by name, its batch rows and the key that says which requests may
    merge, after checking its inputs and the outputs it asks for (not its parameters).

    Raises:
        InvalidInputError: the request does not fit the model's declaration.
    """
    accepted = config.plan.accept_inputs(request.inputs)  # the common case, fast
    if accepted is None:
        accepted = check_inputs(config, request)
    if request.outputs is not None:
        _validate_outputs(config, request.outputs)
    return accepted


def check_inputs(config: ModelConfig, request: InferRequest) -> InputsAccepted:
    """The request's inputs by name, its batch rows and the key that says which requests may
    merge, checked in detail (what `TensorPlan.accept_inputs` leaves to it).

    Raises:
        InvalidInputError: the inputs do not fit the model's declaration.
    """
    inputs = _validate_inputs(config, request)
    rows = _batch_rows(config, inputs)
    # Requests merge only when every non-batch dimension matches.
    shape_key = tuple((n, a.shape[1:]) for n, a in inputs.items()) if config.batching else ()
    return inputs, rows, shape_key


def _validate_inputs(config: ModelConfig, request: InferRequest) -> dict[str, Array]:
    inputs: dict[str, Array] = {}
    for tensor in request.inputs:
        spec = config.input(tensor.name)
        if spec is None:
            expected = ", ".join(t.name for t in config.inputs)
            raise InvalidInputError(
                f"unexpected inference input '{tensor.name}' for model '{config.name}', "
                f"expected one of: {expected}"
            )
        if tensor.name in inputs:
            raise InvalidInputError(f"input '{tensor.name}' is given more than once")
        if tensor.datatype != spec.datatype:
            raise InvalidInputError(
                f"input '{tensor.name}': expected datatype {spec.datatype}, got "
                f"{quote(tensor.datatype)}"
            )
        _check_dims(config, spec, tensor.data.shape)
        inputs[tensor.name] = tensor.data
    missing = [t.name for t in config.inputs if not t.optional and t.name not in inputs]
    if missing:
        raise InvalidInputError(
            f"model '{config.name}' expects input(s) {', '.join(missing)} that the request lacks"
        )
    return inputs


def _check_dims(config: ModelConfig, spec: Tensor, shape: tuple[int, ...]) -> None:
    if not config.matches_dims(spec, shape):
        raise InvalidInputError(
            f"input '{spec.name}': expected shape {config.full_shape(spec)}, got {list(shape)}"
        )


def _batch_rows(config: ModelConfig, inputs: Mapping[str, Array]) -> int:
    if not config.batching:
        return 1
    sizes = {a.shape[0] for a in inputs.values()}
    if len(sizes) > 1:
        raise InvalidInputError(
            f"inputs of model '{config.name}' disagree on the batch size: {sorted(sizes)}"
        )
    rows: int = sizes.pop()
    if rows > config.max_batch_size:
        raise InvalidInputError(
            f"inference request batch-size must be <= {config.max_batch_size} for "
            f"'{config.name}', got {rows}"
        )
    return rows


def _validate_outputs(config: ModelConfig, outputs: tuple[str, ...]) -> None:
    known = config.output_datatypes
    for name in outputs:
        if name not in known:
            raise InvalidInputError(
                f"unexpected inference output '{name}' for model '{config.name}', "
                f"expected one of: {', '.join(sorted(known))}"
            )


def _split_parameters(
    model: str, parameters: Mapping[str, ParamValue]
) -> tuple[int, int, dict[str, ParamValue]]:
    priority = _uint_parameter(parameters, "priority")
    timeout_us = _uint_parameter(parameters, "timeout")
    sequence_id = parameters.get("sequence_id", 0)
    if (
        sequence_id not in (0, "")
        or parameters.get("sequence_start")
        or parameters.get("sequence_end")
    ):
        raise UnsupportedError(
            f"model '{model}' is not a sequence model, so the request must not set sequence_id, "
            f"sequence_start or sequence_end"
        )
    custom: dict[str, ParamValue] = {}
    for key, value in parameters.items():
        if key.startswith("triton_"):
            raise InvalidInputError(
                f"parameter keys starting with 'triton_' are reserved, got {quote(key)}"
            )
        if key not in _SCHEDULING_KEYS:
            custom[key] = value
    return priority, timeout_us, custom


def _uint_parameter(parameters: Mapping[str, ParamValue], key: str) -> int:
    value: Any = parameters.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInputError(
            f"parameter '{key}' must be an unsigned integer, got {quote(value)}"
        )
    return int(value)
