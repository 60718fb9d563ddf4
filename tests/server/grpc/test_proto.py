"""Our .proto files against the ones tritonclient was built from: same wire, field by field."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf.descriptor import Descriptor, FileDescriptor
from tritonclient.grpc import model_config_pb2 as triton_config, service_pb2 as triton_service

from fnserve.protocol import grpc_service_pb2, jobs_pb2, model_config_pb2
from fnserve.server.grpc.service import grpc_services


def _fields(message: Descriptor, prefix: str = "") -> dict[str, Any]:
    name = prefix + message.name
    found: dict[str, Any] = {}
    for field in message.fields:
        kind = field.message_type or field.enum_type
        found[f"{name}.{field.name}"] = (
            field.number,
            field.type,
            field.is_repeated,
            kind.full_name if kind else None,
            field.containing_oneof.name if field.containing_oneof else None,
        )
    for enum in message.enum_types:
        found[f"{name}.{enum.name}"] = [(v.name, v.number) for v in enum.values]
    for nested in message.nested_types:
        found.update(_fields(nested, name + "."))
    return found


def _wire(file: FileDescriptor) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for message in file.message_types_by_name.values():
        found.update(_fields(message))
    for enum in file.enum_types_by_name.values():
        found[enum.name] = [(v.name, v.number) for v in enum.values]
    for service in file.services_by_name.values():
        for method in service.methods:
            found[method.full_name] = (
                method.input_type.full_name,
                method.output_type.full_name,
                method.client_streaming,
                method.server_streaming,
            )
    return found


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [(grpc_service_pb2, triton_service), (model_config_pb2, triton_config)],
    ids=["grpc_service", "model_config"],
)
def test_messages_fields_and_rpcs_match_tritonclient(ours: Any, theirs: Any) -> None:
    expected = _wire(theirs.DESCRIPTOR)
    actual = _wire(ours.DESCRIPTOR)
    assert actual.keys() == expected.keys()
    assert {k: v for k, v in actual.items() if v != expected[k]} == {}


def test_every_rpc_and_the_health_check_are_routed() -> None:
    inference, health, _ = grpc_services(runtime=None)  # type: ignore[arg-type]
    service = grpc_service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    expected = {f"/inference.GRPCInferenceService/{m.name}" for m in service.methods}
    assert set(inference.__mapping__()) == expected
    assert set(health.__mapping__()) == {
        "/grpc.health.v1.Health/Check",
        "/grpc.health.v1.Health/Watch",
    }


def test_the_jobs_service_routes_every_rpc() -> None:
    jobs = grpc_services(runtime=None)[-1]  # type: ignore[arg-type]
    descriptor = jobs_pb2.DESCRIPTOR.services_by_name["Jobs"]
    assert set(jobs.__mapping__()) == {
        f"/fnserve.jobs.v1.Jobs/{m.name}" for m in descriptor.methods
    }
