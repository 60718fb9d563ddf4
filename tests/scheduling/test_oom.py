"""Out of memory, piece by piece: recognising it, the split policy, the cap, the pool's reruns."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pytest

from fnserve import DynamicBatching, Tensor
from fnserve.config.model_config import ModelConfig
from fnserve.errors import InstanceBrokenError, OutOfMemoryError, UnavailableError
from fnserve.scheduling.batcher import BatchPolicy
from fnserve.scheduling.instance import Outcome
from fnserve.scheduling.oom import BatchCap, halves, is_out_of_memory
from fnserve.scheduling.pool import InstancePool
from fnserve.scheduling.request import PendingRequest
from fnserve.scheduling.runner import ExecutionTimes
from fnserve.stats import ModelStats


def _raised(exc: BaseException, cause: BaseException | None = None) -> BaseException:
    """`exc` as it is after `raise exc from cause` (None: raised while handling nothing)."""
    try:
        raise exc from cause
    except BaseException as caught:
        return caught


def _while_handling(first: BaseException, then: BaseException, quiet: bool = False) -> Exception:
    """`then` as it is when raised inside `except` for `first` (`from None` if `quiet`)."""
    try:
        try:
            raise first
        except BaseException:
            if quiet:
                raise then from None
            raise then  # noqa: B904 -- the implicit chain is what this builds
    except Exception as caught:
        return caught
    raise AssertionError("unreachable")


class TestIsOutOfMemory:
    def test_memory_error_and_numpys(self) -> None:
        assert is_out_of_memory(MemoryError())
        with pytest.raises(MemoryError) as caught:
            np.empty((8, 1 << 50), np.uint8)
        assert is_out_of_memory(caught.value)

    def test_torch_out_of_memory_by_class(self) -> None:
        torch = pytest.importorskip("torch")
        assert is_out_of_memory(torch.cuda.OutOfMemoryError("CUDA out of memory."))
        assert is_out_of_memory(torch.OutOfMemoryError("anything"))

    @pytest.mark.parametrize(
        "message",
        [
            "CUDA out of memory. Tried to allocate 20.00 MiB",  # torch before 1.13
            "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
            "cuDNN error: CUDNN_STATUS_ALLOC_FAILED",
            "[TRT] Error Code 2: OutOfMemory (Requested size was 1073741824 bytes.)",
            "Requested amount of GPU memory (1073741824 bytes) could not be allocated.",
            "CUDA failure 2: out of memory ; GPU=0 ; expr=cudaMalloc((void**)&p, size);",
            "cudaErrorMemoryAllocation",
            "std::bad_alloc",
        ],
    )
    def test_runtime_errors_by_message(self, message: str) -> None:
        assert is_out_of_memory(RuntimeError(message))

    @pytest.mark.parametrize(
        ("name", "message"),
        [
            ("Fail", "Failed to allocate memory for requested buffer of size 16777216"),
            ("RuntimeException", "bad_alloc"),
            ("Fail", "BFCArena: Available memory of 3145728 is smaller than requested bytes"),
        ],
    )
    def test_onnxruntime_classes_by_message(self, name: str, message: str) -> None:
        state = pytest.importorskip("onnxruntime.capi.onnxruntime_pybind11_state")
        assert is_out_of_memory(getattr(state, name)(message))
        assert not is_out_of_memory(getattr(state, name)("shape mismatch in node Add"))

    def test_a_real_onnxruntime_allocation_failure(self) -> None:
        """An arena capped at 8 MiB (an env allocator only this session uses) refuses 16 MiB."""
        ort = pytest.importorskip("onnxruntime")
        helper = pytest.importorskip("onnx.helper")
        from onnx import TensorProto

        x = helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 1024])
        y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 1024])
        graph = helper.make_graph([helper.make_node("Relu", ["X"], ["Y"])], "g", [x], [y])
        onnx_model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        arena = ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR
        info = ort.OrtMemoryInfo("Cpu", arena, 0, ort.OrtMemType.DEFAULT)
        with contextlib.suppress(Exception):  # refused the second time in one process
            ort.create_and_register_allocator(info, ort.OrtArenaCfg(8 << 20, -1, -1, -1))
        options = ort.SessionOptions()
        options.add_session_config_entry("session.use_env_allocators", "1")
        options.log_severity_level = 4
        session = ort.InferenceSession(onnx_model.SerializeToString(), options)
        state = pytest.importorskip("onnxruntime.capi.onnxruntime_pybind11_state")
        with pytest.raises(state.Fail, match="smaller than requested bytes") as caught:
            session.run(None, {"X": np.ones((4096, 1024), np.float32)})
        assert is_out_of_memory(caught.value)

    def test_through_the_cause_or_context_chain(self) -> None:
        assert is_out_of_memory(_raised(ValueError("wrapped"), MemoryError()))
        assert is_out_of_memory(_while_handling(MemoryError(), KeyError("lazy wrapper")))
        # `from None`: whoever raised it said the out-of-memory is unrelated
        assert not is_out_of_memory(_while_handling(MemoryError(), KeyError("x"), quiet=True))

    @pytest.mark.parametrize(
        "exc",
        [
            RuntimeError("index out of range"),
            ValueError("out of memory"),  # a user's own ValueError is not read by its message
            KeyError("bad_alloc"),
            Exception(),
        ],
    )
    def test_other_errors_are_not(self, exc: BaseException) -> None:
        assert not is_out_of_memory(exc)


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def _entry(loop: asyncio.AbstractEventLoop, rows: int, value: float = 0.0) -> PendingRequest:
    x = np.full((rows, 1), value, np.float32)
    return PendingRequest(
        inputs={"X": x}, rows=rows, shape_key=(("X", (1,)),), future=loop.create_future()
    )


class TestHalves:
    @pytest.mark.parametrize(
        ("rows", "first"),
        [
            ([1] * 8, 4),
            ([1, 1], 1),
            ([1, 1, 1], 1),  # 1 | 2 and 2 | 1 are as good: the first cut
            ([1, 1, 6], 2),  # the big request alone
            ([6, 1, 1], 1),
            ([1, 6, 1], 1),
            ([3, 3, 2], 1),
            ([0, 0, 0, 5], 1),
        ],
    )
    def test_cuts_between_requests_keeping_order(
        self, loop: asyncio.AbstractEventLoop, rows: list[int], first: int
    ) -> None:
        batch = [_entry(loop, n) for n in rows]
        left, right = halves(batch)
        assert (left, right) == (batch[:first], batch[first:])


class TestBatchCap:
    def test_halves_the_failing_size_and_never_raises_it(self) -> None:
        cap = BatchCap("m", cooldown_s=30)
        assert cap.limit(0) is None
        cap.lower(8, now_ns=0)
        assert cap.limit(1) == 4
        cap.lower(6, now_ns=2)
        assert cap.limit(3) == 3
        cap.lower(40, now_ns=4)  # a single big request ran alone: no higher cap
        assert cap.limit(5) == 3
        cap.lower(1, now_ns=6)
        assert cap.limit(7) == 1

    def test_lifted_after_the_cooldown_from_the_last_out_of_memory(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        caplog.set_level(logging.INFO, "fnserve.scheduling.oom")
        cap = BatchCap("m", cooldown_s=30)
        cap.lower(8, now_ns=0)
        cap.lower(8, now_ns=20 * 10**9)  # restarts the cool-down
        assert cap.limit(49 * 10**9) == 4
        assert cap.limit(50 * 10**9) is None
        assert cap.limit(51 * 10**9) is None
        assert [r.getMessage() for r in caplog.records] == [
            "model 'm': batches hold at most 4 rows until 30 s pass without running out of memory",
            "model 'm': batch cap lifted, batches grow to max_batch_size again",
        ]

    def test_the_policy_forms_batches_under_the_cap(self, loop: asyncio.AbstractEventLoop) -> None:
        config = ModelConfig(
            name="m",
            inputs=[Tensor("X", "FP32", [1])],
            outputs=[Tensor("Y", "FP32", [1])],
            max_batch_size=8,
            dynamic_batching=DynamicBatching(max_queue_delay_microseconds=1000),
        )
        policy = BatchPolicy(config)
        ones = [_entry(loop, 1) for _ in range(8)]
        assert len(policy.next_batch(ones, now_ns=0, cap_rows=3).batch) == 3
        assert len(policy.next_batch(ones, now_ns=0, cap_rows=None).batch) == 8
        assert len(policy.next_batch(ones, now_ns=0, cap_rows=20).batch) == 8
        big = [_entry(loop, 6), *ones]
        assert [e.rows for e in policy.next_batch(big, now_ns=0, cap_rows=3).batch] == [6]


class FakeInstance:
    """Doubles X; runs out of memory above `limit_rows`; `hold` keeps each run until told."""

    def __init__(self, index: int = 0, limit_rows: int = 4, hold: bool = False) -> None:
        self.index = index
        self.limit_rows = limit_rows
        self.hold = hold
        self.runs: list[list[float]] = []  # the first value of each request, per run
        self.held: list[tuple[asyncio.Future[Outcome], Sequence[PendingRequest]]] = []

    def runs_inline(self) -> bool:
        return False

    def start(self, batch: Sequence[PendingRequest]) -> asyncio.Future[Outcome]:
        self.runs.append([float(e.inputs["X"][0, 0]) for e in batch])
        future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        if self.hold:
            self.held.append((future, batch))
        else:
            self.finish(future, batch)
        return future

    def finish(self, future: asyncio.Future[Outcome], batch: Sequence[PendingRequest]) -> None:
        rows = sum(e.rows for e in batch)
        if rows > self.limit_rows:
            future.set_exception(OutOfMemoryError(f"out of memory on {rows} rows"))
        else:
            results = [{"Y": e.inputs["X"] * 2} for e in batch]
            future.set_result((results, ExecutionTimes(1, 1, 1)))

    def release_next(self) -> None:
        self.finish(*self.held.pop(0))

    def close(self) -> None:
        pass

    def abandon(self) -> None:
        pass


def _pool(*instances: Any, preserve_ordering: bool = False) -> InstancePool:
    pool = InstancePool(
        "m", list(instances), ModelStats("m", "1"), preserve_ordering, lambda i: FakeInstance(i)
    )
    pool.batch_cap = BatchCap("m")
    return pool


def _batch(*rows: int, first: float = 0.0) -> list[PendingRequest]:
    loop = asyncio.get_running_loop()
    return [_entry(loop, n, first + i) for i, n in enumerate(rows)]


async def _answers(batch: list[PendingRequest]) -> list[Any]:
    done = await asyncio.gather(*(e.future for e in batch), return_exceptions=True)
    return [d if isinstance(d, BaseException) else d["Y"][:, 0].tolist() for d in done]


class TestPoolSplits:
    async def test_halves_run_one_after_the_other_on_the_instance(self) -> None:
        instance = FakeInstance(limit_rows=2)
        pool = _pool(instance)
        batch = _batch(*[1] * 8)
        pool.launch(await pool.acquire(), batch)
        assert await _answers(batch) == [[2.0 * i] for i in range(8)]
        assert instance.runs == [
            [0, 1, 2, 3, 4, 5, 6, 7],
            [0, 1, 2, 3],
            [0, 1],
            [2, 3],
            [4, 5, 6, 7],
            [4, 5],
            [6, 7],
        ]
        await pool.drain()
        assert pool.stats.oom_splits == 3
        assert {rows: b.compute_infer.count for rows, b in pool.stats.batches.items()} == {2: 4}
        assert pool.batch_cap is not None
        assert pool.batch_cap.rows == 2
        assert await pool.acquire() is instance  # back in rotation once every piece ran

    async def test_a_request_too_big_alone_fails_by_itself(self) -> None:
        pool = _pool(FakeInstance(limit_rows=4))
        batch = _batch(1, 6, 1)
        pool.launch(await pool.acquire(), batch)
        first, big, last = await _answers(batch)
        assert (first, last) == ([0.0], [4.0])
        assert isinstance(big, OutOfMemoryError)
        assert pool.stats.oom_splits == 2  # 1 | 6 1, then 6 | 1

    async def test_a_single_request_is_never_split(self) -> None:
        instance = FakeInstance(limit_rows=4)
        pool = _pool(instance)
        batch = _batch(5)
        pool.launch(await pool.acquire(), batch)
        (answer,) = await _answers(batch)
        assert isinstance(answer, OutOfMemoryError)
        assert (instance.runs, pool.stats.oom_splits) == ([[0.0]], 0)

    async def test_requests_given_up_on_are_not_rerun(self) -> None:
        instance = FakeInstance(limit_rows=2, hold=True)
        pool = _pool(instance)
        batch = _batch(1, 1, 1, 1)
        pool.launch(await pool.acquire(), batch)
        instance.release_next()  # 4 rows: out of memory, rerun as 2 + 2
        await asyncio.sleep(0)
        batch[2].future.cancel()
        batch[3].future.cancel()
        instance.release_next()  # the first half
        await asyncio.gather(batch[0].future, batch[1].future)
        await pool.drain()
        assert instance.runs == [[0, 1, 2, 3], [0, 1]]
        assert await pool.acquire() is instance

    async def test_preserve_ordering_delivers_the_pieces_in_the_batchs_turn(self) -> None:
        slow, fast = FakeInstance(0, limit_rows=2, hold=True), FakeInstance(1)
        pool = _pool(slow, fast, preserve_ordering=True)
        order: list[float] = []
        first, second = _batch(1, 1, 1, 1), _batch(1, first=10.0)
        for entry in (*first, *second):
            entry.future.add_done_callback(lambda f: order.append(f.result()["Y"][0, 0] / 2))
        pool.launch(await pool.acquire(), first)  # slow: the first instance in the queue
        pool.launch(await pool.acquire(), second)
        while slow.held:  # 4 rows (out of memory), then 2 + 2
            slow.release_next()
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        await pool.drain()
        await asyncio.sleep(0)
        assert order == [0.0, 1.0, 2.0, 3.0, 10.0]

    async def test_an_instance_lost_during_the_reruns_fails_the_rest(self) -> None:
        instance = FakeInstance(limit_rows=2, hold=True)
        pool = _pool(instance)
        batch = _batch(1, 1, 1, 1)
        pool.launch(await pool.acquire(), batch)
        instance.release_next()  # out of memory: rerun as 2 + 2
        await asyncio.sleep(0)
        future, _ = instance.held.pop(0)
        future.set_exception(InstanceBrokenError("worker process died"))
        answers = await _answers(batch)
        assert all(isinstance(a, InstanceBrokenError) for a in answers)
        assert len(instance.runs) == 2  # the second half never ran on the dead instance
        await pool.drain()
        pool.abort(UnavailableError("unloaded"))  # stops the rebuild

    async def test_abort_during_the_reruns_answers_everyone_once(self) -> None:
        slow, fast = FakeInstance(0, limit_rows=2, hold=True), FakeInstance(1)
        pool = _pool(slow, fast, preserve_ordering=True)
        batch = _batch(1, 1, 1, 1)
        pool.launch(await pool.acquire(), batch)
        slow.release_next()  # out of memory
        await asyncio.sleep(0)
        slow.release_next()  # the first half: done, held for its turn (ordering)
        await asyncio.sleep(0)
        pool.abort(UnavailableError("the server is shutting down"))
        answers = await _answers(batch)
        assert answers[:2] == [[0.0], [2.0]]
        assert all(isinstance(a, UnavailableError) for a in answers[2:])
