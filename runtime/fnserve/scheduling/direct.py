"""The direct lane: a request that finds its model idle and running inline runs at once, in the
caller's frame, as one call.

A model that runs inline (inline.py) answers a request that finds its queue empty before the
scheduler's loop would even see it (scheduler.py's at-once launch). That launch still builds
what a batch needs: a queue entry with a future, a batch record, a delivery. For a step taking
50-200 us those cost little when the CPU caches are warm, but a pipeline step runs right after
a large model (an encoder reading 90 MB of weights) has evicted them, and then every object
and every line of code the serving path touches comes from main memory: measured on the
MiniLM pooling step with 96 MB flushed before each call, 195 us of serving cost around 190 us
of work. The direct lane takes the request's checked tensors straight to the instance and the
model's outputs straight back, and keeps only what the statistics and the inline policy need;
with the other changes of that day (`TensorPlan` checks, a deque of idle instances) the same
test gives 110-125 us.

`DirectLane.try_run` runs the request or returns None, and then nothing happened: the caller
takes the normal way (a request the fast checks do not accept, one with parameters, a model
that is busy, batching, or not inline). Errors are the normal way's: the model's exception
translated by the runner, an out-of-memory logged and counted by the pool.
"""

from __future__ import annotations

from collections.abc import Iterable

from fnserve.config.model_config import ModelConfig
from fnserve.scheduling.inline import NeedsOwnThread
from fnserve.scheduling.pool import InstancePool
from fnserve.scheduling.scheduler import QueueScheduler
from fnserve.types import Array


class DirectLane:
    """Runs one request of an idle inline model at once (see the module doc).

    Args:
        config: the model's config (its `TensorPlan` checks the inputs).
        scheduler: says whether a request may run at once now, and gives the instance.
        pool: counts the execution and takes the instance back.
    """

    def __init__(self, config: ModelConfig, scheduler: QueueScheduler, pool: InstancePool) -> None:
        self._plan = config.plan
        self._scheduler = scheduler
        self._pool = pool

    def try_run(self, tensors: Iterable[tuple[str, str, Array]]) -> dict[str, Array] | None:
        """The outputs of running the request made of `tensors`, or None when it cannot run
        here now: then nothing ran, except for a model that turned out to call another one
        (its code up to that call, which reruns on its thread with the call chain, as
        inline.py says).

        Raises:
            FnserveError: the model failed (ModelExecutionError, OutOfMemoryError, ...).
        """
        accepted = self._plan.accept_inputs(tensors)
        if accepted is None:
            return None
        instance = self._scheduler.take_inline_turn()
        if instance is None:
            return None
        inputs, rows, _ = accepted
        try:
            outputs, times = instance.run_inline_one(inputs, rows)
        except NeedsOwnThread:  # it calls models synchronously: the normal way, on its thread
            self._pool.release(instance)
            return None
        except BaseException as exc:
            error = self._pool.direct_failed(instance, rows, exc)
            if error is exc:
                raise
            raise error from exc
        self._pool.direct_done(instance, rows, times)
        return outputs
