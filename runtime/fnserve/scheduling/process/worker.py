"""A worker process's main loop: import the model, build one instance, run batches until told.

Started by `ProcessInstance` as `python -m fnserve.scheduling.process.worker <fd>`, where `fd` is
its end of the control socket. It builds the same `PythonBackend` and `BatchRunner` as an
in-thread instance, so a model's errors, output checks and `InstanceContext` are identical;
it only adds the transport. It exits on a "close" message, when the control socket reaches
EOF, or when its parent process dies (a watchdog thread notices the new parent pid).
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from fnserve.errors import FnserveError, RepositoryError
from fnserve.model import InstanceContext, ModelDefinition
from fnserve.scheduling.oom import is_out_of_memory
from fnserve.scheduling.process.channel import pack, recv_message
from fnserve.scheduling.process.shm import SharedBuffer

log = logging.getLogger("fnserve.worker")
_WATCH_PARENT_S = 0.5


def main(argv: list[str]) -> int:
    """Serve one instance over the control socket whose fd is `argv[0]`."""
    # Signals to the whole process group (a terminal's Ctrl-C, `kill -- -PGID`) are the server's
    # to handle: it finishes the requests in flight, then closes or kills its workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sock = socket.socket(fileno=int(argv[0]))
    _watch_parent(os.getppid())
    setup = recv_message(sock)
    _configure(setup)
    try:
        worker = _Worker(setup)
    except Exception as exc:
        # The same text an in-thread instance's failure gives; the server adds the context.
        log.debug("building the instance failed", exc_info=exc)
        sock.sendall(pack(("error", "RepositoryError", str(exc))))
        return 1
    sock.sendall(pack(("ready", os.getpid())))
    try:
        worker.serve(sock)
    finally:
        worker.close()
    return 0


class _Worker:
    """The instance: its runner, its loop (for async models), its two buffers."""

    def __init__(self, setup: dict[str, Any]) -> None:
        from fnserve.backends.python import PythonBackend
        from fnserve.scheduling.runner import BatchRunner

        definition = _find_definition(setup)
        backend = PythonBackend(definition, setup["context"])
        self.runner = BatchRunner(setup["config"], backend, setup["debug_errors"])
        self.loop = asyncio.new_event_loop() if self.runner.is_async else None
        self.inputs = SharedBuffer(setup["in_fd"], owner=False)
        self.outputs = SharedBuffer(setup["out_fd"], owner=False)

    def serve(self, sock: socket.socket) -> None:
        while True:
            try:
                message = recv_message(sock)
            except EOFError:
                return
            if message[0] == "close":
                return
            sock.sendall(pack(self._run(*message[1:])))

    def _run(
        self, size: int, refs: list[Any], rows: int, parameters: list[dict[str, Any]]
    ) -> tuple[Any, ...]:
        t0 = time.perf_counter_ns()
        try:
            inputs = self.inputs.read(size, refs, copy=False)
            t1 = time.perf_counter_ns()
            if self.loop is not None:
                result = self.loop.run_until_complete(self.runner.acall(inputs, parameters))
            else:
                result = self.runner.call(inputs, parameters)
            t2 = time.perf_counter_ns()
            outputs = self.runner.check_outputs(result, rows)
            out_size, out_refs = self.outputs.write({k: (v,) for k, v in outputs.items()})
        except FnserveError as exc:
            return ("error", type(exc).__name__, exc.message)
        except Exception as exc:  # a bug in the transport, or no memory left for the outputs
            if is_out_of_memory(exc):
                error = self.runner.model_error(exc, rows, len(parameters))
                return ("error", type(error).__name__, error.message)
            log.exception("worker for model '%s' failed", self.runner.config.name)
            return ("error", "ModelExecutionError", f"{type(exc).__name__}: {exc}")
        times = (t1 - t0, t2 - t1, time.perf_counter_ns() - t2)
        return ("ok", out_size, out_refs, times)

    def close(self) -> None:
        try:
            self.runner.backend.unload()
        finally:
            if self.loop is not None:
                self.loop.close()


def _find_definition(setup: dict[str, Any]) -> ModelDefinition[Any, Any]:
    """Import the model's module the way the server did, and pick the same definition."""
    sys.path[:] = setup["sys_path"]
    module_name, file = setup["module"], setup["file"]
    # Files fnserve discovered (and a script run as __main__) are imported by path, as the
    # server did; anything else is an ordinary module, found on the server's sys.path.
    if file and (module_name.startswith("fnserve_user.") or module_name == "__main__"):
        from fnserve.user_modules import definitions_in, import_file

        candidates = definitions_in(import_file(Path(file)))
    else:
        module = importlib.import_module(module_name)
        candidates = [v for v in vars(module).values() if isinstance(v, ModelDefinition)]
    config = setup["config"]
    for candidate in candidates:
        same = candidate.config.name == config.name and candidate.config.version == config.version
        if same and isinstance(candidate, ModelDefinition):
            return candidate
    raise RepositoryError(
        f"model '{config.name}' version {config.version} is not a module-level name of "
        f"'{file or module_name}', so a worker process cannot import it; define "
        f"process-isolated models at the top level of their file"
    )


def _watch_parent(parent: int) -> None:
    """Exit at once when the server dies without closing us (SIGKILL, crash)."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(_WATCH_PARENT_S)
        os._exit(3)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _configure(setup: dict[str, Any]) -> None:
    from fnserve.logs import configure

    configure(setup["log_level"], setup["log_format"])
    context: InstanceContext = setup["context"]
    name = f"{context.model_name}-{context.instance_index}"
    try:
        import setproctitle  # type: ignore[import-not-found]

        setproctitle.setproctitle(f"fnserve worker {name}")
    except ImportError:
        pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
