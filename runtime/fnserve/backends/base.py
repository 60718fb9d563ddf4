"""The backend seam: what the scheduler needs from anything that can run a model."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from fnserve.types import Array, ParamValue

Outputs = Mapping[str, Array]


class Backend(Protocol):
    """One loaded model instance.

    `execute` runs a batch synchronously (called on the instance's own thread); async backends
    set `is_async` and implement `aexecute` instead.
    """

    is_async: bool

    def execute(
        self, inputs: Mapping[str, Array], parameters: Sequence[Mapping[str, ParamValue]]
    ) -> Any: ...

    async def aexecute(
        self, inputs: Mapping[str, Array], parameters: Sequence[Mapping[str, ParamValue]]
    ) -> Any: ...

    def unload(self) -> None: ...
