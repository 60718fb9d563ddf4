"""Fixtures of the jobs tests: a real PostgreSQL server for the session, a fresh database each."""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import Iterator

import pytest

from tests.jobs.postgres import PostgresServer, PostgresUnavailableError


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """The URL of a throwaway PostgreSQL server (superuser `postgres`, database `postgres`).

    Outside CI a machine without PostgreSQL skips these tests, saying why; under CI=true they
    fail instead, since the project's set-up installs PostgreSQL there.
    """
    try:
        server = PostgresServer.start()
    except PostgresUnavailableError as exc:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            raise
        pytest.skip(f"no PostgreSQL server for the jobs tests: {exc}")
    with server:
        yield server.url


@pytest.fixture
def postgres_database(postgres_url: str) -> Iterator[str]:
    """The URL of a new, empty database on the session's server (dropped afterwards)."""
    name = f"test_{secrets.token_hex(6)}"
    asyncio.run(_admin(postgres_url, f"CREATE DATABASE {name}"))
    try:
        yield postgres_url.rsplit("/", 1)[0] + f"/{name}"
    finally:
        asyncio.run(_admin(postgres_url, f"DROP DATABASE {name} WITH (FORCE)"))


async def _admin(url: str, statement: str) -> None:
    import asyncpg

    db = await asyncpg.connect(url)
    try:
        await db.execute(statement)
    finally:
        await db.close()
