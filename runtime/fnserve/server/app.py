"""Run the HTTP, gRPC and metrics frontends of one Runtime together, and stop them gracefully.

Sockets are bound here (port 0 picks a free port) before anything serves, so callers learn
the real ports at once. With `--watch` or poll mode, the model paths are watched before the
server reports itself ready. Shutdown: refuse new requests, let in-flight ones finish within
`shutdown_timeout_s`, stop the frontends, then unload the models.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import resource
import socket
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, NamedTuple

from fnserve.config.server import ServerConfig
from fnserve.errors import StartupError, UnavailableError
from fnserve.jobs.service import JobService
from fnserve.jobs.settings import JobSettings
from fnserve.jobs.store import open_store
from fnserve.repository.mirror import RepositoryMirror
from fnserve.repository.mirror_poll import MirrorPoller
from fnserve.repository.watch import RepositoryWatcher
from fnserve.runtime import Runtime
from fnserve.server.access import access_policies
from fnserve.server.grpc.auth import guard_grpc
from fnserve.server.grpc.server import GrpcServer
from fnserve.server.grpc.service import grpc_services
from fnserve.server.http.auth import guard_http
from fnserve.server.http.routes import http_app
from fnserve.server.http.transport import serve_http
from fnserve.server.metrics import metrics_app
from fnserve.server.tls import server_contexts

log = logging.getLogger(__name__)
_JOBS_SHUTDOWN_S = 10.0  # each jobs shutdown step (store calls) at most this long


class BoundPorts(NamedTuple):
    """Where the frontends listen."""

    host: str
    http: int
    grpc: int
    metrics: int
    tls: str = ""  # "", "TLS" or "mutual TLS" (the HTTP and gRPC ports; metrics stay plain)


def bind(host: str, port: int, what: str = "") -> socket.socket:
    """A listening TCP socket (SO_REUSEADDR, so restarts do not wait for TIME_WAIT).

    Raises:
        StartupError: the address is taken or cannot be used; names `what` (e.g. "HTTP").
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio disables Nagle only on sockets it knows are TCP, and a
    # Nagle delay costs 40 ms per request against clients that send headers and body apart.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        flag = f" (choose another with --{what.lower()}-port, or 0 for a free one)" if what else ""
        raise StartupError(
            f"cannot listen on {host}:{port}{' for ' + what if what else ''}: "
            f"{(exc.strerror or str(exc)).lower()}{flag}"
        ) from exc
    sock.listen(2048)
    sock.setblocking(False)
    return sock


# File descriptors kept back for models, logs and the listening sockets themselves.
_RESERVED_FDS = 256
_PORTS = 3


def fit_connections_to_fds(config: ServerConfig) -> ServerConfig:
    """Raise the soft fd limit to the hard one, and cap connections so all ports fit in it.

    A client holding connections up to one port's cap must never take the fds another port
    (or a model opening a file) needs: that took all three ports down before.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or hard > soft):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):  # e.g. a container that forbids it: keep the soft one
            pass
    if soft == resource.RLIM_INFINITY:
        return config
    fits = max((soft - _RESERVED_FDS) // _PORTS, 1)
    if config.max_connections <= fits:
        return config
    log.warning(
        "max connections per port lowered from %d to %d to fit the open-file limit of %d",
        config.max_connections, fits, soft,
    )  # fmt: skip
    return dataclasses.replace(config, max_connections=fits)


def _bind_all(config: ServerConfig) -> list[socket.socket]:
    """The HTTP, gRPC and metrics sockets; none is left open when one cannot be bound."""
    socks: list[socket.socket] = []
    try:
        for what, port in (
            ("HTTP", config.http_port),
            ("gRPC", config.grpc_port),
            ("metrics", config.metrics_port),
        ):
            socks.append(bind(config.host, port, what))
    except StartupError:
        for sock in socks:
            sock.close()
        raise
    return socks


async def serve(
    runtime: Runtime,
    config: ServerConfig,
    shutdown: asyncio.Event,
    on_ready: Callable[[BoundPorts], None] | None = None,
    mirrors: Sequence[RepositoryMirror] = (),
) -> None:
    """Serve until `shutdown` is set, then drain and return.

    Args:
        runtime: the models to serve (started here, closed on the way out).
        config: ports, limits and timeouts.
        shutdown: set it to stop the server.
        on_ready: called once every frontend listens, with the bound ports.
        mirrors: the local copies of remote repositories among the runtime's model paths
            (already synced): polled instead of watched, in poll mode and with `--watch`.
    """
    access = access_policies(config)  # before binding: a bad token file binds nothing
    tls = server_contexts(config)  # bad TLS files fail before anything binds or loads
    http_sock, grpc_sock, metrics_sock = _bind_all(config)
    ports = BoundPorts(
        config.host,
        http_sock.getsockname()[1],
        grpc_sock.getsockname()[1],
        metrics_sock.getsockname()[1],
        tls.mode if tls else "",
    )
    runtime.registry.budget.host_bytes = config.memory_budget_bytes
    runtime.registry.budget.gpu_bytes = config.gpu_memory_budget_bytes
    # The job store first: a bad --jobs-db fails before any model loads. The worker finds
    # the models as they become ready.
    try:
        jobs = await _start_jobs(runtime, config)
    except StartupError:
        for sock in (http_sock, grpc_sock, metrics_sock):
            sock.close()
        raise
    await runtime.start(config.model_defaults(), config.startup_models())
    config = fit_connections_to_fds(config)
    grpc_server = GrpcServer(grpc_services(runtime, config, jobs), config)
    guard_grpc(grpc_server, access.grpc)
    await grpc_server.serve_on(grpc_sock, tls.grpc if tls else None)
    frontends_stop = asyncio.Event()
    http_task = asyncio.create_task(
        serve_http(
            guard_http(http_app(runtime, config, jobs), access.http),
            http_sock,
            config,
            frontends_stop,
            tls.http if tls else None,
        )
    )
    metrics_task = asyncio.create_task(
        serve_http(metrics_app(runtime, jobs), metrics_sock, config, frontends_stop)
    )
    watchers: list[RepositoryWatcher | MirrorPoller] = []
    try:
        watchers = await _watch(runtime, config, mirrors)
        if on_ready is not None:
            on_ready(ports)
        await shutdown.wait()
    finally:
        for watcher in watchers:
            await watcher.aclose()
        if jobs is not None:  # jobs it runs go back to the queue before online ones drain
            await _bounded(jobs.stop_worker(), "stopping the job worker")
        await _shut_down(runtime, config)
        grpc_server.close()
        frontends_stop.set()
        await asyncio.gather(
            grpc_server.wait_closed(), http_task, metrics_task, return_exceptions=True
        )
        if jobs is not None:
            await _bounded(jobs.aclose(), "closing the job store")
        # Nothing runs any more (or it was abandoned): only the instances' release is left.
        await runtime.aclose(drain_timeout_s=0)


async def _bounded(step: Coroutine[Any, Any, None], what: str) -> None:
    """A shutdown step that must not hold the exit: a job store that stopped answering."""
    try:
        await asyncio.wait_for(step, _JOBS_SHUTDOWN_S)
    except TimeoutError:
        log.warning("shutdown: %s took over %.0f s; going on", what, _JOBS_SHUTDOWN_S)


async def _start_jobs(runtime: Runtime, config: ServerConfig) -> JobService | None:
    """Open the job store (`--jobs-db`, else `jobs.db` in `--state-dir`) and start the worker;
    None with `--no-jobs`."""
    if not config.jobs:
        return None
    location = config.jobs_store_location()
    settings = JobSettings(
        workers=config.jobs_workers,
        online_workers=config.jobs_online_workers,
        online_rate=config.jobs_online_rate,
        lease_s=config.jobs_lease_s,
        max_attempts=config.jobs_max_attempts,
        max_backlog=config.jobs_max_backlog,
        result_ttl_s=config.jobs_result_ttl_s,
        max_result_bytes=config.jobs_max_result_bytes,
        max_wait_s=config.jobs_max_wait_s,
    )
    service = JobService(runtime, open_store(location), settings)
    try:
        await service.start()
    except Exception as exc:
        raise StartupError(f"cannot open the job store: {exc}") from exc
    return service


async def _watch(
    runtime: Runtime, config: ServerConfig, mirrors: Sequence[RepositoryMirror]
) -> list[RepositoryWatcher | MirrorPoller]:
    """Watch the model paths when asked to (`--watch`, poll mode): changes reload models.
    Local paths are watched; the copies of remote repositories are synced by polling them
    (a bucket sends no events, and a sync must not be seen half done)."""
    settings = config.watch_settings()
    if settings is None:
        return []
    watchers: list[RepositoryWatcher | MirrorPoller] = []
    copies = {m.path for m in mirrors}
    local = [p for p in runtime.model_paths if p.resolve() not in copies]
    if local:
        watcher = RepositoryWatcher(local, runtime.reload_changed, settings)
        await watcher.start()
        watchers.append(watcher)
    if mirrors:
        poller = MirrorPoller(mirrors, runtime.reload_changed, settings.poll_interval_s)
        poller.start()
        watchers.append(poller)
    return watchers


async def _shut_down(runtime: Runtime, config: ServerConfig) -> None:
    """Refuse new requests, let in-flight ones finish until the deadline, fail the rest.

    The late ones get a clean 503 / UNAVAILABLE through their own handlers (no cancelled
    handler, no 500); instances stuck in them are abandoned so the process can exit.
    """
    runtime.stop_accepting()
    if await runtime.wait_idle(config.shutdown_timeout_s):
        return
    log.warning(
        "shutdown: requests still running after %.1f s; failing them", config.shutdown_timeout_s
    )
    runtime.abort(UnavailableError("the server is shutting down"))
    # Let the handlers write their 503 replies before the frontends close connections.
    await runtime.wait_idle(1.0)
