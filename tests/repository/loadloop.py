"""Clients that keep calling one model while a test changes its files, and waiting helpers.

`LoadLoop` runs three client threads (tritonclient over HTTP and over gRPC, httpx with JSON
tensors), each sending its next request as soon as the last one answered, and records the
first output value of every answer and every failure:

```python
with LoadLoop(server, "plus", np.ones(1, np.float32)) as load:
    file.write_text(...)
    wait_until(lambda: load.latest() == 11.0, "the edited code answers")
assert load.failures == []
```
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import TracebackType

import httpx
import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.serverproc import ServerProcess

DEADLINE_S = 30.0  # what a reload may take on a loaded, shared machine


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = DEADLINE_S) -> float:
    """Wait for `condition` (checked every 20 ms); the seconds it took.

    Raises:
        AssertionError: still false after `timeout_s`, naming `what`.
    """
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout_s:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting until {what}")
        time.sleep(0.02)
    return time.monotonic() - start


class LoadLoop:
    """Three clients calling `model` with `x` in a loop until the block ends.

    Args:
        server: the server to call.
        model: the model's name (its latest version is called).
        x: the input "X" (FP32); the answer's "Y" is recorded by its first element.
    """

    def __init__(self, server: ServerProcess, model: str, x: np.ndarray) -> None:
        self.server = server
        self.model = model
        self.x = x.astype(np.float32)
        self.seen: list[float] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._guard, args=(target,), daemon=True)
            for target in (self._http, self._grpc, self._json)
        ]

    def latest(self) -> float | None:
        """The last answer received (any client)."""
        return self.seen[-1] if self.seen else None

    def _guard(self, call: Callable[[], float]) -> None:
        while not self._stop.is_set():
            try:
                self.seen.append(call())
            except Exception as exc:
                self.failures.append(f"{call.__name__}: {exc!r}")

    def _http(self) -> float:
        x = httpclient.InferInput("X", list(self.x.shape), "FP32")
        x.set_data_from_numpy(self.x)
        return float(self._http_client.infer(self.model, [x]).as_numpy("Y").ravel()[0])

    def _grpc(self) -> float:
        x = grpcclient.InferInput("X", list(self.x.shape), "FP32")
        x.set_data_from_numpy(self.x)
        return float(self._grpc_client.infer(self.model, [x]).as_numpy("Y").ravel()[0])

    def _json(self) -> float:
        tensor = {"name": "X", "datatype": "FP32", "shape": list(self.x.shape),
                  "data": self.x.ravel().tolist()}  # fmt: skip
        url = f"{self.server.http}/v2/models/{self.model}/infer"
        answer = self._httpx.post(url, json={"inputs": [tensor]})
        answer.raise_for_status()
        return float(answer.json()["outputs"][0]["data"][0])

    def __enter__(self) -> LoadLoop:
        self._http_client = httpclient.InferenceServerClient(
            self.server.http.removeprefix("http://")
        )
        self._grpc_client = grpcclient.InferenceServerClient(self.server.grpc)
        self._httpx = httpx.Client(timeout=30)
        for thread in self._threads:
            thread.start()
        wait_until(lambda: len(self.seen) >= 3 or bool(self.failures), "the clients answer")
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)
        self._httpx.close()
        self._grpc_client.close()
        self._http_client.close()
