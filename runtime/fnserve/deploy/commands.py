"""The bodies of `fnserve deploy`, `deployments`, `rollback` and `undeploy`: call the server,
print the answer; a refusal prints the server's reason and exits with status 1."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import click

from fnserve.deploy.archive import pack
from fnserve.deploy.client import DeployClient, DeployClientError
from fnserve.deploy.console import Spinner, deployment_lines, example_calls, report_lines
from fnserve.errors import InvalidInputError

T = TypeVar("T")


@contextmanager
def _failing() -> Iterator[None]:
    try:
        yield
    except (DeployClientError, InvalidInputError) as exc:
        raise click.ClickException(exc.message) from exc


def _call(what: str, call: Callable[[], T]) -> T:
    with _failing(), Spinner(what):
        return call()


def deploy(path: Path, name: str, server: str, token: str) -> None:
    """Pack `path`, deploy it as `name`, print the report and example calls."""
    client = DeployClient(server, token)
    with _failing():
        archive = pack(path)
    what = f"deploying '{name}' ({len(archive)} bytes) to {client.server}"
    report = _call(what, lambda: client.deploy(name, archive))
    click.echo("\n".join([*report_lines(report), *example_calls(report, client.server)]))


def deployments(server: str, token: str) -> None:
    """Print the server's deployments."""
    client = DeployClient(server, token)
    with _failing():
        found = client.deployments()
    click.echo("\n".join(deployment_lines(found)))


def rollback(name: str, version: int, server: str, token: str) -> None:
    """Roll `name` back and print what serves."""
    client = DeployClient(server, token)
    target = f"version {version}" if version else "the previous version"
    report = _call(f"rolling '{name}' back to {target}", lambda: client.rollback(name, version))
    click.echo("\n".join(report_lines(report)))


def undeploy(name: str, server: str, token: str) -> None:
    """Undeploy `name`."""
    client = DeployClient(server, token)
    _call(f"undeploying '{name}'", lambda: client.undeploy(name))
    click.echo(f"deployment '{name}' undeployed")
