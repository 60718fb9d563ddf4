"""The protobuf replies of the gRPC frontend, built straight from the core's typed records."""

from __future__ import annotations

from google.protobuf import json_format

from fnserve.config.model_config import ModelConfig
from fnserve.protocol import grpc_service_pb2 as pb
from fnserve.server.vocabulary import index_state
from fnserve.stats import Duration, ModelStats
from fnserve.types import IndexEntry, ModelMetadata, ServerMetadata, TensorMetadata


def server_metadata(record: ServerMetadata) -> pb.ServerMetadataResponse:
    return pb.ServerMetadataResponse(
        name=record.name, version=record.version, extensions=record.extensions
    )


def model_metadata(record: ModelMetadata) -> pb.ModelMetadataResponse:
    return pb.ModelMetadataResponse(
        name=record.name,
        versions=record.versions,
        platform=record.platform,
        inputs=[_tensor(t) for t in record.inputs],
        outputs=[_tensor(t) for t in record.outputs],
    )


def _tensor(tensor: TensorMetadata) -> pb.ModelMetadataResponse.TensorMetadata:
    return pb.ModelMetadataResponse.TensorMetadata(
        name=tensor.name, datatype=tensor.datatype, shape=tensor.shape
    )


def model_config(config: ModelConfig) -> pb.ModelConfigResponse:
    # The config's Triton JSON form is its one serialization (HTTP serves it as is); the proto
    # is read from it, so the two can never disagree.
    reply = pb.ModelConfigResponse()
    json_format.ParseDict(config.to_json(), reply.config)
    return reply


def statistics(records: list[ModelStats]) -> pb.ModelStatisticsResponse:
    return pb.ModelStatisticsResponse(model_stats=[_model_statistics(s) for s in records])


def _model_statistics(s: ModelStats) -> pb.ModelStatistics:
    return pb.ModelStatistics(
        name=s.name,
        version=s.version,
        last_inference=s.last_inference_ms,
        inference_count=s.inference_count,
        execution_count=s.execution_count,
        inference_stats=pb.InferStatistics(
            success=_duration(s.success),
            fail=_duration(s.fail),
            queue=_duration(s.queue),
            compute_input=_duration(s.compute_input),
            compute_infer=_duration(s.compute_infer),
            compute_output=_duration(s.compute_output),
            cache_hit=_duration(Duration()),
            cache_miss=_duration(Duration()),
        ),
        batch_stats=[
            pb.InferBatchStatistics(
                batch_size=size,
                compute_input=_duration(b.compute_input),
                compute_infer=_duration(b.compute_infer),
                compute_output=_duration(b.compute_output),
            )
            for size, b in sorted(s.batches.items())
        ],
    )


def _duration(d: Duration) -> pb.StatisticDuration:
    return pb.StatisticDuration(count=d.count, ns=d.ns)


def repository_index(entries: list[IndexEntry]) -> pb.RepositoryIndexResponse:
    rows = []
    for entry in entries:
        state, reason = index_state(entry)
        rows.append(
            pb.RepositoryIndexResponse.ModelIndex(
                name=entry.name, version=entry.version, state=state, reason=reason
            )
        )
    return pb.RepositoryIndexResponse(models=rows)
