"""The reply fast path and its fallback: grpclib event listeners still see every message."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
from grpclib.client import Channel
from grpclib.events import SendMessage, listen
from grpclib.server import Server

from fnserve.protocol import grpc_service_pb2 as pb
from fnserve.repository.discover import discover
from fnserve.runtime import Runtime
from fnserve.server.grpc.service import grpc_services
from fnserve.server.grpc.stubs.grpc_service_grpc import GRPCInferenceServiceStub
from tests.conftest import MODELS


def _request(request_id: str) -> pb.ModelInferRequest:
    data = np.arange(4, dtype=np.float32).reshape(1, 4)
    tensor = pb.ModelInferRequest.InferInputTensor(name="INPUT0", datatype="FP32", shape=[1, 4])
    return pb.ModelInferRequest(
        model_name="identity", id=request_id, inputs=[tensor], raw_input_contents=[data.tobytes()]
    )


@pytest.fixture
async def served(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Any, list[Any] | None]]:
    """A stub for a grpclib server on a free port, and what a SendMessage listener recorded
    (None when `plain`: no listener, so the fast path runs)."""
    runtime = Runtime(discover([MODELS]))
    await runtime.start()
    server = Server(grpc_services(runtime))
    sent: list[Any] = []
    if request.param == "listened":

        async def record(event: SendMessage) -> None:
            sent.append(event.message)

        listen(server, SendMessage, record)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    await server.start(sock=sock)
    channel = Channel("127.0.0.1", sock.getsockname()[1])
    try:
        yield GRPCInferenceServiceStub(channel), sent if request.param == "listened" else None
    finally:
        channel.close()
        server.close()
        await server.wait_closed()
        await runtime.aclose()


@pytest.mark.parametrize("served", ["plain", "listened"], indirect=True)
async def test_unary_reply_is_the_same_on_both_paths(
    served: tuple[Any, list[Any] | None],
) -> None:
    stub, sent = served
    reply = await stub.ModelInfer(_request("u1"))
    assert reply.id == "u1"
    assert np.frombuffer(reply.raw_output_contents[0], np.float32).tolist() == [0, 1, 2, 3]
    if sent is not None:
        assert sent == [reply]


@pytest.mark.parametrize("served", ["plain", "listened"], indirect=True)
async def test_stream_replies_are_the_same_on_both_paths(
    served: tuple[Any, list[Any] | None],
) -> None:
    stub, sent = served
    async with stub.ModelStreamInfer.open() as stream:
        await stream.send_message(_request("s1"))
        await stream.send_message(_request("s2"), end=True)
        replies = [reply async for reply in stream]
    assert [r.infer_response.id for r in replies] == ["s1", "s2"]
    assert all(r.infer_response.parameters["triton_final_response"].bool_param for r in replies)
    if sent is not None:
        assert sent == replies
