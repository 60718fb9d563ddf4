"""Everything a user sends, built once per load-generating process from the options."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from fnserve.bench import payloads
from fnserve.bench.data import (
    InputSpec,
    load_samples,
    make_requests,
    resolve_inputs,
    synthetic_sample as _synthetic,
)
from fnserve.bench.options import BenchError
from fnserve.bench.probe import ServerProbe, probe_for

if TYPE_CHECKING:
    from fnserve.bench.options import BenchOptions


@dataclass(frozen=True)
class Workload:
    """The model's inputs as resolved, and the encoded requests to send round-robin.

    `label` names the requests in Locust's statistics (the HTTP path, or the gRPC method).

    `http` holds ready POST bodies for HTTP runs, `grpc` serialized `ModelInferRequest`s for
    gRPC runs; the other list is empty.
    """

    specs: tuple[InputSpec, ...]
    max_batch_size: int
    path: str
    label: str
    http: tuple[payloads.HttpRequest, ...] = ()
    grpc: tuple[bytes, ...] = ()

    def describe(self) -> list[dict[str, object]]:
        """The inputs as the report lists them."""
        return [{"name": s.name, "datatype": s.datatype, "dims": list(s.dims)} for s in self.specs]


def build_workload(options: BenchOptions, probe: ServerProbe | None = None) -> Workload:
    """Look the model up on the server and encode its requests.

    Raises:
        BenchError: the server or model cannot be reached, or the data does not fit it.
    """
    probe = probe or probe_for(options)
    metadata = probe.metadata(options.model, options.model_version)
    max_batch_size = probe.max_batch_size(options.model, options.model_version)
    specs = resolve_inputs(metadata, max_batch_size, dict(options.shapes))
    if not specs:
        raise BenchError(f"model '{options.model}' declares no inputs")
    if options.input_data in ("random", "zero"):
        samples = [_synthetic(specs, zero=options.input_data == "zero")]
    else:
        samples = load_samples(options.input_data, specs)
    requests = make_requests(samples, specs, options.batch_size, batching=max_batch_size > 0)
    path = payloads.infer_path(options.model, options.model_version)
    if options.protocol == "grpc":
        grpc = tuple(payloads.grpc_infer(options.model, options.model_version, r) for r in requests)
        label = f"ModelInfer {options.model}" + (
            f" v{options.model_version}" if options.model_version else ""
        )
        return Workload(specs, max_batch_size, path, label, grpc=grpc)
    encode = payloads.http_binary if options.binary else payloads.http_json
    return Workload(specs, max_batch_size, path, path, http=tuple(encode(r) for r in requests))
