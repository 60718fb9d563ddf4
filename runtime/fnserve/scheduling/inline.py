"""Inline execution: a synchronous model whose batches take microseconds runs them on the event
loop's thread instead of handing each one to its instance thread.

Handing a batch to a thread and its outcome back costs two thread wake-ups, about 40-80 us on
a loaded core: more than a tokenizer or a pooling step computes. For such a model that
hand-off is most of a pipeline step's cost. `InlinePolicy` watches how long a model's batches
take and lets the next one run inline only after a streak of short ones; one long inline batch
sends the model back to its thread until a new streak. Blocking the loop for less than the
limit costs other requests less than the hand-off it saves.

Off unless asked for: per model with the parameter `inline_max_us` (say 200), or for every
model with `fnserve serve --inline-max-us`. It is a promise that the model's batches are short
and never block: a batch that hangs inline stops the whole server, not only its model. Never
inline: async models (they already run on the loop), GPU and process instances, and
models with an execution timeout (nothing could interrupt a batch on the loop's thread). A
model that calls another model synchronously (`fnserve.infer_blocking`, BLS `exec()`) cannot
run on the loop's thread, which must serve that call: its first such call raises
`NeedsOwnThread`, which the instance catches to rerun the batch on its thread (so the model's
code before that call runs twice, once) and the model stays on its thread from then on.
"""

from __future__ import annotations

from fnserve.calls import INLINE_RUN, NeedsOwnThread
from fnserve.config.model_config import ModelConfig
from fnserve.errors import ModelConfigError

PARAMETER = "inline_max_us"

__all__ = ["INLINE_RUN", "PARAMETER", "InlinePolicy", "NeedsOwnThread", "inline_limit_ns"]


class InlinePolicy:
    """Whether one model's next batch may run on the event loop's thread.

    Args:
        limit_ns: a batch counts as short when it takes at most this long (0: never inline).
        streak: short batches in a row (on the thread) before the model runs inline.
    """

    def __init__(self, limit_ns: int, streak: int = 8) -> None:
        self.limit_ns = limit_ns
        self._streak = streak
        self._short = 0  # short batches in a row
        self._never = limit_ns <= 0

    def allows(self) -> bool:
        return not self._never and self._short >= self._streak

    def observe(self, elapsed_ns: int) -> None:
        """Record how long a batch took (wherever it ran)."""
        if elapsed_ns <= self.limit_ns:
            self._short += 1
        else:
            self._short = 0

    def disable(self) -> None:
        """This model may never run inline again (it calls other models synchronously)."""
        self._never = True


def inline_limit_ns(config: ModelConfig, default_us: float, timeout_s: float) -> int:
    """The model's inline limit in ns: its parameter `inline_max_us`, else the server's
    `--inline-max-us`; 0 (never inline) when it has an execution timeout.

    Raises:
        ModelConfigError: the parameter is not a number >= 0.
    """
    raw = config.parameters.get(PARAMETER, default_us)
    try:
        limit_us = float(raw)
    except ValueError:
        limit_us = -1.0
    if not limit_us >= 0:
        raise ModelConfigError(
            f"model '{config.name}': parameter {PARAMETER} must be a number of microseconds "
            f">= 0, got {raw!r}"
        )
    if timeout_s:  # a batch on the loop's thread cannot be interrupted
        return 0
    return int(limit_us * 1000)
