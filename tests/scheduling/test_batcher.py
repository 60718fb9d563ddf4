"""The batch policy alone: no event loop timing, a fake clock (integers)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from fnserve import DynamicBatching, Tensor
from fnserve.config.model_config import ModelConfig
from fnserve.scheduling.batcher import BatchPolicy
from fnserve.scheduling.request import PendingRequest


def _config(max_batch_size: int = 8, **batching: Any) -> ModelConfig:
    return ModelConfig(
        name="m",
        inputs=[Tensor("X", "FP32", [-1])],
        outputs=[Tensor("Y", "FP32", [-1])],
        max_batch_size=max_batch_size,
        dynamic_batching=DynamicBatching(**batching),
    )


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def _entry(loop: asyncio.AbstractEventLoop, rows: int, cols: int = 4, t: int = 0) -> PendingRequest:
    x = np.zeros((rows, cols), np.float32)
    return PendingRequest(
        inputs={"X": x},
        rows=rows,
        shape_key=(("X", x.shape[1:]),),
        future=loop.create_future(),
        enqueued_ns=t,
    )


class TestBatchPolicy:
    def test_batch_never_exceeds_max_batch_size(self, loop: asyncio.AbstractEventLoop) -> None:
        policy = BatchPolicy(_config(8))
        entries = [_entry(loop, 3) for _ in range(4)]
        decision = policy.next_batch(entries, now_ns=0)
        assert [e.rows for e in decision.batch] == [3, 3]

    def test_full_batch_dispatches_at_once(self, loop: asyncio.AbstractEventLoop) -> None:
        policy = BatchPolicy(_config(4, max_queue_delay_microseconds=10_000))
        decision = policy.next_batch([_entry(loop, 2), _entry(loop, 2)], now_ns=0)
        assert len(decision.batch) == 2

    def test_waits_for_more_until_queue_delay(self, loop: asyncio.AbstractEventLoop) -> None:
        policy = BatchPolicy(_config(8, max_queue_delay_microseconds=100))
        entries = [_entry(loop, 1, t=1_000)]
        waiting = policy.next_batch(entries, now_ns=1_000)
        assert waiting.batch == []
        assert waiting.wait_until_ns == 101_000
        assert policy.next_batch(entries, now_ns=101_000).batch == entries

    def test_zero_delay_dispatches_what_is_there(self, loop: asyncio.AbstractEventLoop) -> None:
        policy = BatchPolicy(_config(8))
        entries = [_entry(loop, 1)]
        assert policy.next_batch(entries, now_ns=0).batch == entries

    def test_preferred_size_dispatches_largest_preferred_prefix(
        self, loop: asyncio.AbstractEventLoop
    ) -> None:
        policy = BatchPolicy(
            _config(8, preferred_batch_size=[2, 4], max_queue_delay_microseconds=10**9)
        )
        entries = [_entry(loop, 1) for _ in range(5)]
        assert len(policy.next_batch(entries, now_ns=0).batch) == 4

    def test_a_full_queue_still_takes_the_largest_preferred_size(
        self, loop: asyncio.AbstractEventLoop
    ) -> None:
        # 64 waiting and preferred sizes 8 and 16: Triton sends 16, not the full 64.
        policy = BatchPolicy(_config(64, preferred_batch_size=[8, 16]))
        entries = [_entry(loop, 1) for _ in range(64)]
        assert len(policy.next_batch(entries, now_ns=0).batch) == 16
        blocked = [*[_entry(loop, 1) for _ in range(9)], _entry(loop, 1, cols=5)]
        assert len(policy.next_batch(blocked, now_ns=0).batch) == 8

    def test_different_shapes_are_not_merged(self, loop: asyncio.AbstractEventLoop) -> None:
        policy = BatchPolicy(_config(8))
        entries = [_entry(loop, 1, cols=4), _entry(loop, 1, cols=5), _entry(loop, 1, cols=4)]
        assert policy.next_batch(entries, now_ns=0).batch == entries[:1]

    def test_without_dynamic_batching_one_request_per_batch(
        self, loop: asyncio.AbstractEventLoop
    ) -> None:
        config = ModelConfig(
            name="m",
            inputs=[Tensor("X", "FP32", [-1])],
            outputs=[Tensor("Y", "FP32", [-1])],
            max_batch_size=8,
        )
        entries = [_entry(loop, 2), _entry(loop, 2)]
        assert BatchPolicy(config).next_batch(entries, now_ns=0).batch == entries[:1]

    def test_empty_queue_gives_nothing(self) -> None:
        decision = BatchPolicy(_config(8)).next_batch([], now_ns=0)
        assert decision.batch == []
        assert decision.wait_until_ns is None
