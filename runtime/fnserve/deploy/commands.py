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
from fnserve.remote import ServerTarget, TLSFilesError

T = TypeVar("T")


class Target(ServerTarget):
    """The server `fnserve deploy` talks to (the token is an admin token)."""

    def client(self) -> DeployClient:
        with _failing():
            context = self.ssl_context()
        return DeployClient(self.server, self.token, context=context)


@contextmanager
def _failing() -> Iterator[None]:
    try:
        yield
    except (DeployClientError, InvalidInputError) as exc:
        raise click.ClickException(exc.message) from exc
    except TLSFilesError as exc:
        raise click.ClickException(str(exc)) from exc


def _call(what: str, call: Callable[[], T]) -> T:
    with _failing(), Spinner(what):
        return call()


def deploy(path: Path, name: str, target: Target) -> None:
    """Pack `path`, deploy it as `name`, print the report and example calls."""
    client = target.client()
    with _failing():
        archive = pack(path)
    what = f"deploying '{name}' ({len(archive)} bytes) to {client.server}"
    report = _call(what, lambda: client.deploy(name, archive))
    click.echo("\n".join([*report_lines(report), *example_calls(report, client.server)]))


def deployments(target: Target) -> None:
    """Print the server's deployments."""
    client = target.client()
    with _failing():
        found = client.deployments()
    click.echo("\n".join(deployment_lines(found)))


def rollback(name: str, version: int, target: Target) -> None:
    """Roll `name` back and print what serves."""
    client = target.client()
    to = f"version {version}" if version else "the previous version"
    report = _call(f"rolling '{name}' back to {to}", lambda: client.rollback(name, version))
    click.echo("\n".join(report_lines(report)))


def undeploy(name: str, target: Target) -> None:
    """Undeploy `name`."""
    client = target.client()
    _call(f"undeploying '{name}'", lambda: client.undeploy(name))
    click.echo(f"deployment '{name}' undeployed")
