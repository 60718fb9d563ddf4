"""`fnserve jobs submit|get|wait|result|ls|cancel`: the click group (`fnserve.cli` adds it to
`fnserve`); the command bodies are in `commands.py`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from fnserve.client import commands

_SERVER = click.option(
    "--server",
    default="http://127.0.0.1:8000",
    show_default=True,
    envvar="FNSERVE_SERVER",
    show_envvar=True,
    help="The server's HTTP URL.",
)
_CACERT = click.option("--cacert", default="", metavar="PEM", help="CA of an https server.")
_CERT = click.option("--cert", default="", metavar="PEM", help="Client certificate (mutual TLS).")
_KEY = click.option("--key", default="", metavar="PEM", help="The private key of --cert.")


def server_options(role: str) -> Callable[[Any], Any]:
    """The options naming the server a client command calls: --server, --token (the `role`
    token, "admin" or "api", also from FNSERVE_<ROLE>_TOKEN) and the TLS files (shared by
    `fnserve deploy` and `fnserve jobs`)."""
    token = click.option(
        "--token",
        default="",
        envvar=f"FNSERVE_{role.upper()}_TOKEN",
        show_envvar=True,
        help=f"The server's {'API' if role == 'api' else role} token (sent as "
        f"'Authorization: Bearer TOKEN').",
    )

    def decorate(command: Any) -> Any:
        for option in (_KEY, _CERT, _CACERT, token, _SERVER):
            command = option(command)
        return command

    return decorate


_jobs_target = server_options("api")


@click.group("jobs")
def jobs_group() -> None:
    """Durable jobs: submit inference requests now, collect their stored results later."""


@jobs_group.command("submit")
@click.argument("model")
@click.option("--input", "inputs", multiple=True, metavar="NAME[:DATATYPE]=VALUE",
              help="An input: VALUE is a .npy file or a JSON literal (repeatable).")  # fmt: skip
@click.option("--body", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A ready /infer JSON body instead of --input.")  # fmt: skip
@click.option("--output", "outputs", multiple=True, help="An output to keep [default: all].")
@click.option("--model-version", "version", default="", help="Model version [default: latest].")
@click.option("--idempotency-key", default=None, help="Submitting the same key again returns "
              "the same job.")  # fmt: skip
@click.option("--callback-url", default=None, help="POSTed the job's JSON when it ends.")
@click.option("--binary/--json", default=False, show_default=True, help="Tensors as binary data "
              "(FP16, BF16, large tensors) or JSON (a result any client reads).")  # fmt: skip
@click.option("-q", "--quiet", is_flag=True, help="Print only the job's id.")
@_jobs_target
def jobs_submit_command(model: str, quiet: bool, **options: Any) -> None:
    """Submit a job for MODEL and print it (its id, its state)."""
    target = {k: options.pop(k) for k in ("server", "token", "cacert", "cert", "key")}
    commands.submit(model, commands.Submission(**options), commands.Target(**target), quiet)


@jobs_group.command("get")
@click.argument("job_id")
@click.option("--wait", "wait_s", default=0.0, type=click.FloatRange(min=0),
              help="Seconds to wait for the job to end first.")  # fmt: skip
@_jobs_target
def jobs_get_command(job_id: str, wait_s: float, **target: str) -> None:
    """Print job JOB_ID."""
    commands.get(job_id, wait_s, commands.Target(**target))


@jobs_group.command("wait")
@click.argument("job_id")
@click.option("--timeout", "timeout_s", default=None, type=click.FloatRange(min=0),
              help="Give up after this many seconds (exit 124) [default: never].")  # fmt: skip
@_jobs_target
def jobs_wait_command(job_id: str, timeout_s: float | None, **target: str) -> None:
    """Wait until job JOB_ID ends and print it; exit status 1 unless it succeeded."""
    commands.wait(job_id, timeout_s, commands.Target(**target))


@jobs_group.command("result")
@click.argument("job_id")
@click.option("--save", type=click.Path(file_okay=False, path_type=Path),
              help="Write each output to DIR/NAME.npy instead of printing JSON.")  # fmt: skip
@_jobs_target
def jobs_result_command(job_id: str, save: Path | None, **target: str) -> None:
    """Print the outputs of succeeded job JOB_ID as JSON."""
    commands.result(job_id, save, commands.Target(**target))


@jobs_group.command("ls")
@click.option("--model", default=None, help="Only this model's jobs.")
@click.option("--state", default=None, type=click.Choice(["queued", "running", "succeeded",
              "failed", "cancelled"]), help="Only jobs in this state.")  # fmt: skip
@click.option("--limit", default=20, show_default=True, type=click.IntRange(min=0),
              help="Jobs to list, newest first.")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@_jobs_target
def jobs_ls_command(
    model: str | None, state: str | None, limit: int, as_json: bool, **target: str
) -> None:
    """Print per-model job statistics and the newest jobs."""
    commands.ls(model, state, limit, as_json, commands.Target(**target))


@jobs_group.command("cancel")
@click.argument("job_id")
@_jobs_target
def jobs_cancel_command(job_id: str, **target: str) -> None:
    """Cancel job JOB_ID (queued or running) and print it."""
    commands.cancel(job_id, commands.Target(**target))
