"""A model instance that runs in its own worker process (`isolation="process"`).

The server side of the worker: it starts `python -m fnserve.scheduling.process.worker` (fork +
exec through `subprocess`, never a bare fork of the threaded server), hands it the model's
module, config and `InstanceContext`, then for each batch writes the inputs into shared memory,
sends a small header over a socket, and awaits the reply on the event loop (no thread hop, the
loop never blocks). A worker that dies (segfault, abort, exit) makes `run` raise
`InstanceBrokenError` naming the signal or exit code; the pool then builds a new instance.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import fnserve
from fnserve import errors
from fnserve.config.model_config import ModelConfig
from fnserve.errors import InstanceBrokenError, RepositoryError
from fnserve.model import InstanceContext, ModelDefinition
from fnserve.scheduling.process.channel import pack, recv_message, unpack_length
from fnserve.scheduling.process.shm import SharedBuffer, create_memory_file
from fnserve.scheduling.request import PendingRequest
from fnserve.scheduling.runner import ExecutionTimes, Results, split_outputs
from fnserve.scheduling.threads import run_in_daemon_thread
from fnserve.types import Array

log = logging.getLogger(__name__)
_CLOSE_GRACE_S = 5.0  # a worker asked to close has this long to unload before it is killed
_DEATH_GRACE_S = 1.0  # a worker that closed its socket is exiting; this long to read its status
# Copies into or out of shared memory above this size run on a thread, off the event loop.
_OFFLOAD_BYTES = 4 << 20
_LIVE: weakref.WeakSet[ProcessInstance] = weakref.WeakSet()


class ProcessInstance:
    """One model instance in a worker process.

    Args:
        definition: the `@model` definition (its module is imported again in the worker).
        context: which instance this is; the worker's backend receives it unchanged.
        config: the model's config, used by the worker for the output checks.
        debug_errors: keep host paths in the model's error messages (as `BatchRunner`).

    Raises:
        RepositoryError: the worker could not start or could not build the instance.
    """

    def __init__(
        self,
        definition: ModelDefinition[Any, Any],
        context: InstanceContext,
        config: ModelConfig,
        debug_errors: bool = False,
    ) -> None:
        self.index = context.instance_index
        self.label = f"model '{config.name}' instance {self.index}"
        self._inputs = SharedBuffer(create_memory_file(), owner=True)
        self._outputs = SharedBuffer(create_memory_file(), owner=True)
        self._sock, child = socket.socketpair()
        try:
            self._proc = _spawn(child, self._inputs.fd, self._outputs.fd)
        finally:
            child.close()
        self.pid = self._proc.pid
        self._dead = self._abandoned = False
        self._streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        _LIVE.add(self)
        try:
            setup = _setup(definition, context, config, self._inputs, self._outputs)
            self._handshake({**setup, "debug_errors": debug_errors})
        except BaseException:
            self.abandon()  # no worker, socket or buffer outlives a failed start
            raise

    def _handshake(self, setup: dict[str, Any]) -> None:
        try:
            self._sock.sendall(pack(setup))
            reply = recv_message(self._sock)
        except (EOFError, OSError):
            code = self._reap(_CLOSE_GRACE_S)
            raise RepositoryError(f"{self.label}: worker process {_describe(code)}") from None
        if reply[0] != "ready":
            raise RepositoryError(reply[2])
        self._sock.setblocking(False)
        log.info("%s runs in worker process %d", self.label, self.pid)

    def runs_inline(self) -> bool:
        return False  # it runs in its worker process

    def start(
        self, batch: Sequence[PendingRequest]
    ) -> asyncio.Future[tuple[Results, ExecutionTimes]]:
        """Begin one batch in the worker (the pool's `Instance.start`)."""
        future = asyncio.ensure_future(self.run(batch))
        return cast("asyncio.Future[tuple[Results, ExecutionTimes]]", future)  # every one a dict

    async def run(
        self, batch: Sequence[PendingRequest]
    ) -> tuple[list[dict[str, Array]], ExecutionTimes]:
        """Run one batch in the worker; the inputs go through shared memory."""
        if self._dead:
            raise InstanceBrokenError(f"{self.label}: worker process is gone")
        reader, writer = self._streams or await self._connect()
        t0 = time.perf_counter_ns()
        tensors = {n: [e.inputs[n] for e in batch] for n in batch[0].inputs}
        if sum(a.nbytes for e in batch for a in e.inputs.values()) > _OFFLOAD_BYTES:
            size, refs = await asyncio.to_thread(self._inputs.write, tensors)
        else:
            size, refs = self._inputs.write(tensors)
        rows = sum(e.rows for e in batch)
        writer.write(pack(("run", size, refs, rows, [e.parameters for e in batch])))
        t1 = time.perf_counter_ns()
        try:
            await writer.drain()
            body = await reader.readexactly(unpack_length(await reader.readexactly(4)))
        except (asyncio.IncompleteReadError, ConnectionError):
            raise await self._died() from None
        except BaseException:  # cancelled mid-exchange: the channel is out of step for good
            self.abandon()
            raise
        reply = pickle.loads(body)
        if reply[0] == "error":
            raise getattr(errors, reply[1], errors.ModelExecutionError)(reply[2])
        _, out_size, out_refs, (input_ns, infer_ns, output_ns) = reply
        t2 = time.perf_counter_ns()
        if sum(ref.nbytes for ref in out_refs) > _OFFLOAD_BYTES:
            outputs = await asyncio.to_thread(self._outputs.read, out_size, out_refs, copy=True)
        else:
            outputs = self._outputs.read(out_size, out_refs, copy=True)
        results = split_outputs(batch, outputs)
        times = ExecutionTimes(
            input_ns + t1 - t0, infer_ns, output_ns + time.perf_counter_ns() - t2
        )
        return results, times

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        self._loop = asyncio.get_running_loop()
        self._streams = await asyncio.open_connection(sock=self._sock)
        return self._streams

    async def _died(self) -> InstanceBrokenError:
        self._dead = True
        code = await run_in_daemon_thread(self._reap, _DEATH_GRACE_S)
        self._close_channel()
        return InstanceBrokenError(f"{self.label}: worker process {_describe(code)}")

    def close(self) -> None:
        """Ask the worker to finish (it unloads the model), then kill it after a grace period."""
        if not self._dead:
            self._dead = True
            try:
                self._sock.shutdown(socket.SHUT_WR)  # EOF tells the worker to unload and exit
            except OSError:
                pass
            self._reap(_CLOSE_GRACE_S)
        self._close_channel()
        self._inputs.close()
        self._outputs.close()
        _LIVE.discard(self)

    def abandon(self) -> None:
        """Kill the worker now (stuck or broken); it is reaped on a thread, never here."""
        if self._abandoned:
            return
        self._abandoned = self._dead = True
        _kill(self._proc)
        threading.Thread(target=self._proc.wait, name=f"reap-{self.pid}", daemon=True).start()
        self._close_channel()
        _LIVE.discard(self)

    def _reap(self, grace_s: float) -> int | None:
        try:
            return self._proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            _kill(self._proc)
            return self._proc.wait()

    def _close_channel(self) -> None:
        """Close the socket on the loop that owns its transport, or directly if none does."""
        streams, loop = self._streams, self._loop
        if streams is None or loop is None:
            self._sock.close()
            return
        try:
            loop.call_soon_threadsafe(streams[1].close)
        except RuntimeError:  # the loop is closed: nobody watches the socket any more
            self._sock.close()


def _spawn(child: socket.socket, *fds: int) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    package_root = str(Path(fnserve.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "fnserve.scheduling.process.worker", str(child.fileno())]
    try:
        return subprocess.Popen(command, pass_fds=(child.fileno(), *fds), env=env)
    except OSError as exc:
        raise RepositoryError(f"cannot start a worker process: {exc}") from exc


def _setup(
    definition: ModelDefinition[Any, Any],
    context: InstanceContext,
    config: ModelConfig,
    inputs: SharedBuffer,
    outputs: SharedBuffer,
) -> dict[str, Any]:
    module = sys.modules.get(definition.__module__)
    root = logging.getLogger()
    json_logs = any(type(h.formatter).__name__ == "JsonFormatter" for h in root.handlers)
    return {
        "sys_path": list(sys.path),
        "module": definition.__module__,
        "file": getattr(module, "__file__", None),
        "config": config,
        "context": InstanceContext(**{**vars(context), "parameters": dict(context.parameters)}),
        "in_fd": inputs.fd,
        "out_fd": outputs.fd,
        "log_level": logging.getLevelName(root.getEffectiveLevel()),
        "log_format": "json" if json_logs else "text",
    }


def _describe(code: int | None) -> str:
    if code is None:
        return "closed its control channel"
    if code < 0:
        try:
            return f"died from signal {signal.Signals(-code).name}"
        except ValueError:
            return f"died from signal {-code}"
    return f"exited with code {code}"


def _kill(proc: subprocess.Popen[bytes]) -> None:
    try:
        proc.kill()
    except OSError:  # already gone
        pass


@atexit.register
def _kill_leftovers() -> None:
    """No orphan workers when the server exits without unloading (a failed shutdown)."""
    for instance in list(_LIVE):
        _kill(instance._proc)
        try:
            instance._proc.wait(1.0)  # reaped here: threads may not start at this point
        except subprocess.TimeoutExpired:
            pass
