"""`fnserve serve` from start to exit: find the models, build the runtime, serve until a signal.

The command line (`cli.py`) only parses options into a `ServerConfig` and calls these; what a
start can get wrong (a bad file under --strict, no model at all, an unknown --load-model) is
a `StartupError` with one line saying what and where.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from fnserve import __version__
from fnserve.config.server import ServerConfig
from fnserve.deploy.store import DeploymentStore
from fnserve.errors import StartupError
from fnserve.repository.mirror import RepositoryMirror, open_mirrors
from fnserve.repository.objectstore import RemoteUrl
from fnserve.repository.source import ModelSource
from fnserve.runtime import Runtime
from fnserve.server.app import BoundPorts, serve
from fnserve.types import ModelState

log = logging.getLogger("fnserve")


def build_runtime(
    paths: tuple[Path | str, ...], config: ServerConfig
) -> tuple[Runtime, list[RepositoryMirror]]:
    """The runtime for PATHS (local files and folders, or repository URLs, copied locally)
    and the deployments in the state directory, with the mirrors of those URLs.

    Raises:
        FnserveError: a repository cannot be copied, --strict and a file fails to import,
            nothing to serve without --allow-empty, or --load-model names an unknown model.
    """
    mirrors = open_mirrors(
        [p for p in paths if isinstance(p, str)], config.model_cache_dir(), config.s3_endpoint_url
    )
    deployed = tuple(DeploymentStore(config.state_dir).serving_folders())
    # A poller syncs the remote repositories in poll mode and with --watch; otherwise each
    # repository load syncs them.
    synced_on_scan = mirrors if config.watch_settings() is None else []
    source = ModelSource((*_local(paths, mirrors), *deployed), synced_on_scan)
    shown = tuple(map(str, paths or deployed))  # URLs as given, not their copies
    runtime = _runtime(source, shown, config.strict, config.allow_empty)
    _check_startup_models(runtime, config)
    return runtime, mirrors


def _local(paths: tuple[Path | str, ...], mirrors: list[RepositoryMirror]) -> tuple[Path, ...]:
    """PATHS with each repository URL replaced by its local copy, in order."""
    copies = {str(m.url): m.path for m in mirrors}
    return tuple(p if isinstance(p, Path) else copies[str(RemoteUrl.parse(p))] for p in paths)


def _runtime(
    source: ModelSource, shown: tuple[str, ...], strict: bool, allow_empty: bool
) -> Runtime:
    """Import the model files and the deployments, and build the runtime, applying --strict
    and --allow-empty (`shown`: the paths an error names)."""
    found = source.scan()
    if found.failures and strict:
        raise StartupError(f"{found.failures[0].reason} (--strict: any bad file is fatal)")
    for failure in found.failures:
        log.error("%s; its models are not served", failure.reason)
    if not found.definitions:
        message = _nothing_found(shown, found.files, found.ignored)
        if not allow_empty:
            raise StartupError(f"{message}; --allow-empty serves anyway")
        log.warning("%s; serving no model (--allow-empty)", message)
        _say(f"WARNING: {message}; serving no model (--allow-empty)")
    return Runtime(found.definitions, source=source, failures=found.failures)


def _check_startup_models(runtime: Runtime, config: ServerConfig) -> None:
    names = config.startup_models()
    unknown = [n for n in names or () if not runtime.registry.known(n)]
    if unknown:
        known = ", ".join(runtime.registry.names()) or "none"
        raise StartupError(f"--load-model names unknown model(s) {unknown}; known: {known}")


def _nothing_found(paths: tuple[str, ...], files: list[Path], ignored: list[Path]) -> str:
    where = ", ".join(f"'{p}'" for p in paths)
    message = (
        f"no model found in {where} (no @model, no Triton model directory): {len(files)} "
        f"Python file(s) looked at"
    )
    if ignored:
        names = ", ".join(p.name for p in ignored[:5]) + (", ..." if len(ignored) > 5 else "")
        message += (
            f", other files ignored ({names}: @model functions and Triton model directories "
            f"(<name>/config.pbtxt, <name>/<version>/model.onnx) are served)"
        )
    return message


def run_until_signalled(
    runtime: Runtime, config: ServerConfig, mirrors: list[RepositoryMirror]
) -> None:
    """Serve until SIGINT or SIGTERM, on uvloop when it is installed, then exit past any
    thread that outlived the server.

    Raises:
        FnserveError: a port is taken.
    """
    _run_loop(_serve(runtime, config, mirrors))
    _exit_past_stuck_threads()


async def _serve(runtime: Runtime, config: ServerConfig, mirrors: list[RepositoryMirror]) -> None:
    shutdown = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, shutdown.set)
    await serve(runtime, config, shutdown, functools.partial(_summary, runtime), mirrors)
    _say("fnserve stopped")


def _summary(runtime: Runtime, ports: BoundPorts) -> None:
    lines = [f"fnserve {__version__} serving {len(runtime.repository_index())} model version(s):"]
    timings = {(s.name, s.version): s for s in runtime.version_stats()}
    for entry in runtime.repository_index():
        reason = f" ({entry.reason})" if entry.reason else ""
        stats = timings.get((entry.name, entry.version))
        if entry.state is ModelState.READY and stats is not None:
            reason = f" (load {stats.load_ns / 1e9:.3f} s, warmup {stats.warmup_ns / 1e9:.3f} s)"
        lines.append(f"  {entry.name} v{entry.version}: {entry.state.value}{reason}")
    http, tls = ("https", f", {ports.tls}") if ports.tls else ("http", "")
    lines += [
        f"  HTTP     {http}://{ports.host}:{ports.http}  (KServe v2 REST, HTTP/1.1 and "
        f"{'h2' if tls else 'h2c'}{tls})",
        f"  gRPC     {ports.host}:{ports.grpc}  (inference.GRPCInferenceService{tls})",
        f"  metrics  http://{ports.host}:{ports.metrics}/metrics",
    ]
    _say("\n".join(lines))
    sys.stderr.flush()


def _say(text: str) -> None:
    """A line for the operator on stderr (beside the log, which may be JSON)."""
    sys.stderr.write(text + "\n")


def _run_loop(coro: Coroutine[Any, Any, None]) -> None:
    try:
        import uvloop
    except ImportError:  # uvloop is optional (not on Windows): plain asyncio then
        asyncio.run(coro)
        return
    uvloop.run(coro)


def _exit_past_stuck_threads() -> None:
    """Exit now if any thread outlived the server.

    Models run on daemon threads, but Python still joins a thread that is not a daemon, and
    every ThreadPoolExecutor worker (a model's own, daemon or not), at exit: one stuck there
    would keep the process alive forever after a clean shutdown.
    """
    main_thread = threading.main_thread()
    deadline = time.monotonic() + 0.5  # threads that are just finishing get a moment
    for thread in threading.enumerate():
        if thread is not main_thread:
            thread.join(max(deadline - time.monotonic(), 0))
    stuck = [t.name for t in threading.enumerate() if t is not main_thread]
    if not stuck:
        return
    _say(f"fnserve: not waiting for thread(s) still running: {', '.join(stuck)}")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
