"""The `fnserve` command line: parses options and hands over to the server (no logic here)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from fnserve import __version__
from fnserve.client.cli import jobs_group, server_options
from fnserve.config.server import ServerConfig
from fnserve.config.sizes import parse_size
from fnserve.errors import FnserveError
from fnserve.limits import DEFAULT_LIMITS
from fnserve.logs import configure
from fnserve.repository.objectstore import is_remote
from fnserve.server.startup import build_runtime, run_until_signalled


class ByteSize(click.ParamType):  # type: ignore[type-arg,unused-ignore]
    """A size in bytes: 8GiB, 512MB, 1048576."""

    name = "size"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        try:
            return parse_size(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class ModelPath(click.ParamType):  # type: ignore[type-arg,unused-ignore]
    """An existing file or folder (a Path), or a repository URL such as s3://bucket/prefix
    (kept as a str)."""

    name = "path"
    _local = click.Path(exists=True, path_type=Path)

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> Path | str:
        if isinstance(value, str) and is_remote(value):
            return value
        local: Path = self._local.convert(value, param, ctx)
        return local


@click.group()
@click.version_option(__version__, prog_name="fnserve")
def main() -> None:
    """fnserve: serve Python inference functions over KServe v2 / Triton HTTP and gRPC."""


@main.command("serve")
@click.argument("paths", nargs=-1, type=ModelPath())
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option(
    "--http-port", default=8000, show_default=True, help="HTTP port (0: pick a free one)."
)
@click.option(
    "--grpc-port", default=8001, show_default=True, help="gRPC port (0: pick a free one)."
)
@click.option("--metrics-port", default=8002, show_default=True, help="Metrics port (0: free one).")
@click.option(
    "--tls-cert", default="", metavar="PEM", help="Certificate chain: HTTP and gRPC speak TLS."
)
@click.option("--tls-key", default="", metavar="PEM", help="The private key of --tls-cert.")
@click.option(
    "--tls-client-ca",
    default="",
    metavar="PEM",
    help="CA of the client certificates: clients must present one (mutual TLS).",
)
@click.option(
    "--max-body-bytes",
    default=64 * 1024 * 1024,
    show_default=True,
    help="Largest HTTP request body, after decompression.",
)
@click.option(
    "--grpc-max-message-bytes",
    default=256 * 1024 * 1024,
    show_default=True,
    type=click.IntRange(1, 2**31 - 1),
    help="Largest gRPC message received or sent (RESOURCE_EXHAUSTED past it).",
)
@click.option(
    "--max-connections",
    default=2048,
    show_default=True,
    type=click.IntRange(min=1),
    help="Open connections per port; one more is refused at once (HTTP 503 / gRPC GOAWAY).",
)
@click.option(
    "--header-timeout",
    "header_timeout_s",
    default=10.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds a connection has to send a complete request head (HTTP 408 past it).",
)
@click.option(
    "--keep-alive-timeout",
    "keep_alive_timeout_s",
    default=75.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds an idle connection is kept open.",
)
@click.option(
    "--max-header-bytes",
    default=64 * 1024,
    show_default=True,
    type=click.IntRange(min=1),
    help="Largest HTTP request head / HTTP/2 header list (431 past it).",
)
@click.option(
    "--max-headers",
    default=100,
    show_default=True,
    type=click.IntRange(min=1),
    help="Most header fields in one HTTP/1.1 request (431 past it).",
)
@click.option(
    "--max-url-bytes",
    default=8 * 1024,
    show_default=True,
    type=click.IntRange(min=1),
    help="Longest HTTP request target (414 past it).",
)
@click.option(
    "--h2-max-concurrent-streams",
    default=128,
    show_default=True,
    type=click.IntRange(min=1),
    help="Streams one HTTP/2 or gRPC connection may have open at once.",
)
@click.option(
    "--h2-window-bytes",
    default=4 * 1024 * 1024,
    show_default=True,
    type=click.IntRange(1, 2**31 - 1),
    help="gRPC HTTP/2 flow-control window, per stream and per connection.",
)
@click.option(
    "--stream-max-inflight",
    default=64,
    show_default=True,
    type=click.IntRange(min=1),
    help="Requests of one ModelStreamInfer stream running at once (backpressure past it).",
)
@click.option(
    "--shutdown-timeout",
    "shutdown_timeout_s",
    default=30.0,
    show_default=True,
    help="Seconds in-flight requests may take to finish on SIGINT/SIGTERM (and on an unload); "
    "past it they fail with 503 / UNAVAILABLE and the process exits.",
)
@click.option(
    "--execution-timeout",
    "execution_timeout_s",
    default=0.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Default longest model execution in seconds (0: no limit); past it 504 / "
    "DEADLINE_EXCEEDED and the instance is replaced. A model's execution_timeout_s wins.",
)
@click.option(
    "--max-queue-size",
    default=1024,
    show_default=True,
    type=click.IntRange(min=0),
    help="Requests one model may hold queued when its queue policy sets no max_queue_size "
    "(0: unbounded); past it 503 / UNAVAILABLE.",
)
@click.option(
    "--idle-timeout",
    "idle_timeout_s",
    default=0.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Scale a model to zero after this many seconds without a request (0: never); the "
    "next request cold-starts it. A model's idle_timeout_s wins.",
)
@click.option(
    "--cold-start-timeout",
    "cold_start_timeout_s",
    default=60.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds requests wait for a scaled-to-zero model to load and warm up (then 503).",
)
@click.option(
    "--inline-max-us",
    "inline_us",
    default=0.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Run a sync CPU model's batches on the event loop's thread once they all take at "
    "most this many microseconds (saves two thread hand-offs per call; a batch that hangs "
    "then stops the server). 0: off. A model's parameter inline_max_us wins.",
)
@click.option(
    "--memory-budget",
    "memory_budget_bytes",
    default="0",
    show_default=True,
    type=ByteSize(),
    help="Host memory the loaded models may hold together (e.g. 8GiB; 0: no budget); past it "
    "the least recently used idle models scale to zero, or the load fails with 503.",
)
@click.option(
    "--gpu-memory-budget",
    "gpu_memory_budget_bytes",
    default="0",
    show_default=True,
    type=ByteSize(),
    help="The same for each GPU (needs nvidia-ml-py to measure; 0: no budget).",
)
@click.option(
    "--debug-errors",
    is_flag=True,
    help="Send model exception messages to clients whole; by default host paths are scrubbed.",
)
@click.option(
    "--max-name-length",
    default=DEFAULT_LIMITS.max_name_length,
    show_default=True,
    help="Longest model name, version or tensor name a request may give.",
)
@click.option(
    "--max-bytes-elements",
    default=DEFAULT_LIMITS.max_bytes_elements,
    show_default=True,
    help="Most BYTES elements in one inference request, all inputs together.",
)
@click.option(
    "--max-gzip-members",
    default=DEFAULT_LIMITS.max_gzip_members,
    show_default=True,
    help="Most members in one gzip-encoded HTTP request body.",
)
@click.option(
    "--strict",
    is_flag=True,
    help="Refuse to start when any file fails to import (default: serve the others and list "
    "its models as UNAVAILABLE with the reason).",
)
@click.option(
    "--allow-empty",
    is_flag=True,
    help="Start even when PATHS hold no @model (with a warning); default: an error.",
)
@click.option(
    "--model-control-mode",
    default=None,
    type=click.Choice(["none", "explicit", "poll"]),
    help="none: load every model at start; explicit: load only the --load-model ones; poll: "
    "load every model and reload those whose files change, looking every "
    "--repository-poll-secs. As in Triton, none and poll refuse the repository load/unload "
    "API; without this option models load as in none and that API stays open.",
)
@click.option(
    "--repository-poll-secs",
    default=15.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="With --model-control-mode poll: seconds between two looks at the served files.",
)
@click.option(
    "--watch",
    is_flag=True,
    help="Reload the models whose files change (Python files, config.pbtxt, model files, "
    "version folders) as soon as the OS reports the change; the old version serves until "
    "the new one is ready, and keeps serving if the change is broken.",
)
@click.option(
    "--load-model",
    "load_models",
    multiple=True,
    metavar="NAME",
    help="With --model-control-mode explicit: a model to load at start (repeatable; '*' for all).",
)
@click.option(
    "--admin-token",
    default="",
    envvar="FNSERVE_ADMIN_TOKEN",
    show_envvar=True,
    help="Bearer token the control APIs (repository load/unload) require: 'Authorization: "
    "Bearer TOKEN' (HTTP) or 'authorization' metadata (gRPC). Without one, a server bound to "
    "a non-loopback address refuses them.",
)
@click.option(
    "--api-token",
    default="",
    envvar="FNSERVE_API_TOKEN",
    show_envvar=True,
    help="Bearer token inference, metadata, config and statistics then require (an admin "
    "token works too); health stays open.",
)
@click.option(
    "--token-file",
    default="",
    metavar="FILE",
    help="File of named tokens, one 'NAME ROLE TOKEN' a line (ROLE: admin or api).",
)
@click.option(
    "--http-restricted-api",
    multiple=True,
    metavar="APIS:KEY=VALUE",
    help="Triton's: the comma-separated API groups need header KEY: VALUE (repeatable).",
)
@click.option(
    "--grpc-restricted-protocol",
    multiple=True,
    metavar="APIS:KEY=VALUE",
    help="Triton's: the groups need metadata triton-grpc-protocol-KEY: VALUE (repeatable).",
)
@click.option(
    "--state-dir",
    default=".fnserve-state",
    show_default=True,
    metavar="DIR",
    help="Where deployments (fnserve deploy) and the default job store (jobs.db) are kept; a "
    "restart serves them again.",
)
@click.option(
    "--deploy-max-bytes",
    default="64MiB",
    show_default=True,
    type=ByteSize(),
    help="Largest deployment archive (413 past it); its files may unpack to 8 times that.",
)
@click.option(
    "--deploy-validate-timeout",
    "deploy_validate_timeout_s",
    default=60.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds a deployment's import may take in the child process that checks it.",
)
@click.option(
    "--jobs/--no-jobs",
    "jobs",
    default=True,
    show_default=True,
    help="Serve durable jobs (POST /v2/models/NAME/jobs, /v2/jobs) from a job store.",
)
@click.option(
    "--jobs-db",
    default="",
    metavar="PATH|URL",
    help="The job store: a SQLite file, or postgresql://... to share one queue between "
    "servers (default: jobs.db in --state-dir).",
)
@click.option(
    "--jobs-workers",
    default=0,
    show_default=True,
    type=click.IntRange(min=0),
    help="Jobs of one model this server runs at once (0: the model's max batch size).",
)
@click.option(
    "--jobs-online-workers",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="Jobs of one model in flight while online requests are recent: few, so a backlog "
    "barely moves online latency (raise it for models that cost the GPU, not the CPU).",
)
@click.option(
    "--jobs-online-rate",
    default=20.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Jobs started per second, at most, while online requests are recent (0: no pace); "
    "jobs still progress under any online load.",
)
@click.option(
    "--jobs-lease",
    "jobs_lease_s",
    default=30.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds a claimed job stays this server's without renewal (renewed every third); "
    "a job whose server died is retried after it.",
)
@click.option(
    "--jobs-max-attempts",
    default=3,
    show_default=True,
    type=click.IntRange(min=1),
    help="Attempts before a job fails with its last error (invalid input fails at once).",
)
@click.option(
    "--jobs-max-backlog",
    default=100_000,
    show_default=True,
    type=click.IntRange(min=1),
    help="Queued jobs one model may hold; one more is refused with 429 / RESOURCE_EXHAUSTED.",
)
@click.option(
    "--jobs-result-ttl",
    "jobs_result_ttl_s",
    default=7 * 24 * 3600.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds finished jobs and their results are kept.",
)
@click.option(
    "--jobs-max-result-bytes",
    default="64MiB",
    show_default=True,
    type=ByteSize(),
    help="Largest stored job result; a larger one fails its job and nothing is stored.",
)
@click.option(
    "--jobs-max-wait",
    "jobs_max_wait_s",
    default=60.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Longest long-poll (GET /v2/jobs/ID?wait=SECONDS) a client may ask for.",
)
@click.option(
    "--model-cache",
    default="",
    metavar="DIR",
    help="Where s3:// model repositories are copied to [default: STATE_DIR/model-cache]; "
    "unchanged objects are not downloaded again.",
)
@click.option(
    "--s3-endpoint-url",
    default="",
    metavar="URL",
    help="An S3-compatible server for s3:// repositories [default: AWS_ENDPOINT_URL_S3 or "
    "AWS_ENDPOINT_URL, else AWS]; credentials come from the standard AWS chain.",
)
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
)
@click.option(
    "--log-format", default="text", show_default=True, type=click.Choice(["text", "json"])
)
def serve_command(paths: tuple[Path | str, ...], **options: Any) -> None:
    """Serve the @model functions and Triton model directories found in PATHS (Python files,
    folders, or s3://bucket/prefix repositories, copied to --model-cache), and the
    deployments kept in --state-dir."""
    options["model_control_mode"] = options["model_control_mode"] or ""  # "": not given
    try:  # a setting mistake (--load-model without explicit mode, ...): one line, no traceback
        config = ServerConfig.from_mapping(options)
    except FnserveError as exc:
        raise click.ClickException(exc.message) from exc
    configure(config.log_level, config.log_format)
    try:
        runtime, mirrors = build_runtime(paths, config)
    except FnserveError as exc:  # one line, no traceback: what failed, where, what to do
        raise click.ClickException(exc.message) from exc
    try:
        run_until_signalled(runtime, config, mirrors)
    except FnserveError as exc:  # a port is taken: one line, no traceback
        raise click.ClickException(exc.message) from exc


@main.command("bench")
@click.argument("model")
@click.option(
    "--url",
    default=None,
    help="Server host:port [default: 127.0.0.1:8000 for HTTP, 127.0.0.1:8001 for gRPC].",
)
@click.option("--protocol", default="http", show_default=True, type=click.Choice(["http", "grpc"]))
@click.option("--model-version", default="", help="Model version [default: latest].")
@click.option(
    "--concurrency", default=None, help="Requests in flight per step: 1,8,64 [default: 1]."
)
@click.option("--concurrency-range", default=None, help="Steps as start:end[:step] (end included).")
@click.option(
    "--duration", "duration_s", default=10.0, show_default=True, help="Measured seconds per step."
)
@click.option(
    "--warmup",
    "warmup_s",
    default=1.0,
    show_default=True,
    help="Seconds per step before the measurement window opens.",
)
@click.option(
    "--input-data",
    default="random",
    show_default=True,
    help="random, zero, or a perf_analyzer --input-data JSON file.",
)
@click.option("--shape", multiple=True, help="Input shape without batch dimension: NAME:d1,d2.")
@click.option("-b", "--batch-size", default=1, show_default=True, help="Rows per request.")
@click.option(
    "--binary/--json",
    default=True,
    show_default=True,
    help="HTTP tensors as binary data (tritonclient's way) or as JSON.",
)
@click.option(
    "--workers",
    default=0,
    show_default=True,
    help="Locust worker processes under a master (0: one process).",
)
@click.option("--csv", type=click.Path(dir_okay=False, path_type=Path), help="Write a CSV table.")
@click.option(
    "--plot",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write a chart: latency percentiles against throughput (PNG).",
)
@click.option("--ui", is_flag=True, help="Open Locust's web UI instead of the headless sweep.")
def bench_command(**options: Any) -> None:
    """Load MODEL with Locust and print a perf_analyzer-style report (needs fnserve[loadtest])."""
    from fnserve.bench.command import run  # lazy: the loadtest extra is optional
    from fnserve.bench.options import BenchError, BenchOptions

    try:
        sys.exit(run(BenchOptions.from_cli(**options)))
    except BenchError as exc:
        raise click.ClickException(str(exc)) from exc


_deploy_target = server_options("admin")


@main.command("deploy")
@click.argument("path", type=click.Path(exists=True, path_type=Path))
@click.option("--name", default="", help="Deployment name [default: PATH's name, no suffix].")
@_deploy_target
def deploy_command(path: Path, name: str, **target: str) -> None:
    """Deploy PATH (a Python file, a folder of them, or a Triton model directory) to a
    running server: it is checked, loaded, warmed up and swapped in; a failure leaves the
    previous version serving."""
    from fnserve.deploy import commands

    commands.deploy(path, name or path.stem, commands.Target(**target))


@main.command("deployments")
@_deploy_target
def deployments_command(**target: str) -> None:
    """List the server's deployments: versions, when, content hash, which one serves."""
    from fnserve.deploy import commands

    commands.deployments(commands.Target(**target))


@main.command("rollback")
@click.argument("name")
@click.option("--to", "version", default=0, type=click.IntRange(min=0), help="Version number "
              "[default: the one deployed before the current one].")  # fmt: skip
@_deploy_target
def rollback_command(name: str, version: int, **target: str) -> None:
    """Serve an earlier version of deployment NAME again."""
    from fnserve.deploy import commands

    commands.rollback(name, version, commands.Target(**target))


@main.command("undeploy")
@click.argument("name")
@_deploy_target
def undeploy_command(name: str, **target: str) -> None:
    """Stop serving deployment NAME and delete its versions from the server."""
    from fnserve.deploy import commands

    commands.undeploy(name, commands.Target(**target))


# `fnserve jobs ...`: the group and its options live beside the client they drive.
main.add_command(jobs_group)
