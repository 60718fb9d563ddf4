"""The bodies of `fnserve jobs submit|get|wait|result|ls|cancel`: call the server through
`JobsClient`, print JSON (tables for `ls`); a refusal prints the server's reason and exits 1.

Exit status of `wait`: 0 when the job succeeded, 1 when it failed or was cancelled, 124 (as
`timeout(1)`) when --timeout passed first.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import click
import numpy as np

from fnserve.client.errors import JobsError, WaitTimeoutError
from fnserve.client.jobs import JobsClient
from fnserve.client.listing import listing_lines
from fnserve.client.wire import Body, Job
from fnserve.errors import InvalidInputError
from fnserve.jobs.model import JobState
from fnserve.remote import ServerTarget, TLSFilesError
from fnserve.tensors import datatype_of, numpy_dtype, to_json

TIMED_OUT = 124


class Target(ServerTarget):
    """The server `fnserve jobs` talks to (the token is an API token)."""

    def client(self) -> JobsClient:
        with failing():
            context = self.ssl_context()
        return JobsClient(self.server, self.token or None, verify=context or True)


@contextmanager
def failing() -> Iterator[None]:
    """Print the server's refusal (or a bad argument) as one line and exit 1."""
    try:
        yield
    except (JobsError, InvalidInputError, TLSFilesError) as exc:
        raise click.ClickException(str(exc)) from exc


def _print_job(job: Job) -> None:
    click.echo(json.dumps(job.to_json(), indent=2))


@dataclass(frozen=True)
class Submission:
    """What to submit: either `--input` values or a raw `--body`, and the job's options."""

    inputs: tuple[str, ...] = ()
    body: Path | None = None
    outputs: tuple[str, ...] = ()
    version: str = ""
    idempotency_key: str | None = None
    callback_url: str | None = None
    binary: bool = True


def submit(model: str, what: Submission, target: Target, quiet: bool = False) -> None:
    """Submit one job and print it (`quiet`: its id only)."""
    if bool(what.inputs) == (what.body is not None):
        raise click.UsageError("give either --input NAME=VALUE (one or more) or --body FILE")
    with target.client() as client, failing():
        if what.body is not None:
            body = Body(what.body.read_bytes(), {"Content-Type": "application/json"})
            job = client.submit_body(
                model, body, what.version, what.idempotency_key, what.callback_url
            )
        else:
            inputs = parse_inputs(client, model, what.version, what.inputs)
            job = client.submit(
                model,
                inputs,
                list(what.outputs) or None,
                what.version,
                what.idempotency_key,
                what.callback_url,
                what.binary,
            )
    if quiet:
        click.echo(job.id)
    else:
        _print_job(job)


def parse_inputs(
    client: JobsClient, model: str, version: str, specs: Sequence[str]
) -> dict[str, np.ndarray]:
    """`NAME[:DATATYPE]=VALUE` arguments as arrays. VALUE is a `.npy` file or a JSON literal;
    a literal without DATATYPE takes the datatype the model declares for NAME.

    Raises:
        click.BadParameter: a malformed argument, or a value that does not fit its datatype.
    """
    parsed = [_split(spec) for spec in specs]
    declared: dict[str, str] = {}
    if any(dt is None and not _is_file(v) for _, dt, v in parsed):
        metadata = client.model_metadata(model, version)
        declared = {t["name"]: t["datatype"] for t in metadata.get("inputs", [])}
    inputs = {}
    for name, datatype, value in parsed:
        if _is_file(value):
            array = np.load(value, allow_pickle=False)
            inputs[name] = array if datatype is None else _cast(name, array, datatype)
            continue
        try:
            literal = json.loads(value)
        except ValueError:
            raise click.BadParameter(
                f"{name}: {value!r} is neither a .npy file nor a JSON value", param_hint="--input"
            ) from None
        inputs[name] = _cast(name, np.asarray(literal), datatype or declared.get(name))
    return inputs


def _split(spec: str) -> tuple[str, str | None, str]:
    target, sep, value = spec.partition("=")
    name, _, datatype = target.partition(":")
    if not sep or not name:
        raise click.BadParameter(f"expected NAME=VALUE, got {spec!r}", param_hint="--input")
    return name, datatype.upper() or None, value


def _is_file(value: str) -> bool:
    return value.endswith(".npy") and Path(value).is_file()


def _cast(name: str, array: np.ndarray, datatype: str | None) -> np.ndarray:
    if datatype is None or datatype == datatype_of(array):
        return array
    if datatype == "BYTES":
        out = np.empty(array.shape, dtype=np.object_)
        out.ravel()[:] = [str(v).encode() for v in array.ravel()]
        return out
    try:
        return array.astype(numpy_dtype(datatype), casting="same_kind" if array.size else "unsafe")
    except (TypeError, InvalidInputError) as exc:
        message = f"{name}: cannot make {datatype}: {exc}"
        raise click.BadParameter(message, param_hint="--input") from None


def get(job_id: str, wait_s: float, target: Target) -> None:
    """Print one job (after up to `wait_s` seconds of long polling)."""
    with target.client() as client, failing():
        _print_job(client.get(job_id, wait_s))


def wait(job_id: str, timeout_s: float | None, target: Target) -> None:
    """Wait for a job to end and print it; exit 1 unless it succeeded, 124 on timeout."""
    with target.client() as client, failing():
        try:
            job = client.wait(job_id, timeout_s)
        except WaitTimeoutError as exc:
            _print_job(exc.job)
            click.echo(f"Error: {exc}", err=True)
            raise SystemExit(TIMED_OUT) from None
    _print_job(job)
    if job.state is not JobState.SUCCEEDED:
        raise click.ClickException(f"job {job.id} {job.state.value}: {job.error or 'no result'}")


def result(job_id: str, save: Path | None, target: Target) -> None:
    """Print a succeeded job's outputs as JSON, or save them as NAME.npy files in `save`."""
    with target.client() as client, failing():
        outputs = client.result(job_id)
    if save is not None:
        save.mkdir(parents=True, exist_ok=True)
        for name, array in outputs.items():
            np.save(save / f"{name}.npy", array, allow_pickle=False)
            click.echo(str(save / f"{name}.npy"))
        return
    doc = {}
    for name, array in outputs.items():
        datatype = datatype_of(array)
        # FP16 has no JSON form on the wire; printed, its values are exact as floats.
        shown = array.astype(np.float32) if datatype == "FP16" else array
        with failing():
            data = to_json(name, datatype_of(shown), shown)
        doc[name] = {"datatype": datatype, "shape": list(array.shape), "data": data}
    click.echo(json.dumps(doc))


def cancel(job_id: str, target: Target) -> None:
    """Cancel a job and print it."""
    with target.client() as client, failing():
        _print_job(client.cancel(job_id))


def ls(model: str | None, state: str | None, limit: int, as_json: bool, target: Target) -> None:
    """Print per-model statistics and the newest `limit` jobs."""
    with target.client() as client, failing():
        click.echo("\n".join(listing_lines(client, model, state, limit, as_json)))
