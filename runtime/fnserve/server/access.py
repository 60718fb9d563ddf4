"""The access policies of the HTTP and gRPC frontends, built from the server settings.

Tokens come from `--admin-token` / `FNSERVE_ADMIN_TOKEN` (named "admin"), `--api-token` /
`FNSERVE_API_TOKEN` (named "api") and `--token-file`, a text file of named tokens:

```
# NAME   ROLE   TOKEN     (ROLE: admin or api; blank lines and lines starting with # skipped)
ci       admin  3f1c...
webapp   api    9ab2...
```

A token file other users may read is served, with a warning (chmod 600 it).
"""

from __future__ import annotations

import logging
import stat
from pathlib import Path
from typing import NamedTuple

from fnserve.config.server import ServerConfig
from fnserve.errors import StartupError
from fnserve.server.auth import (
    AccessPolicy,
    Role,
    Token,
    TokenSet,
    check_secret,
    parse_restrictions,
)

log = logging.getLogger(__name__)

# Triton's words (http_server.cc, grpc_handler.h), so clients matching on them keep working.
_HTTP_RESTRICTED = "This API is restricted, expecting header '{header}'"
_GRPC_RESTRICTED = "This protocol is restricted, expecting header '{header}'"
_GRPC_HEADER_PREFIX = "triton-grpc-protocol-"


class AccessPolicies(NamedTuple):
    """One policy per frontend (they share the tokens, not Triton's restrictions)."""

    http: AccessPolicy
    grpc: AccessPolicy


def access_policies(config: ServerConfig) -> AccessPolicies:
    """The HTTP and gRPC policies `config` asks for; logs the control APIs it refuses.

    Raises:
        StartupError: a malformed token, token file or restriction (tokens are never quoted).
    """
    try:
        tokens = TokenSet(_tokens(config))
        http_rules = parse_restrictions(config.http_restricted_api, "http-restricted-api")
        grpc_rules = parse_restrictions(
            config.grpc_restricted_protocol, "grpc-restricted-protocol", _GRPC_HEADER_PREFIX
        )
    except ValueError as exc:
        raise StartupError(str(exc)) from exc
    policies = AccessPolicies(
        AccessPolicy(tokens, http_rules, _HTTP_RESTRICTED, config.host),
        AccessPolicy(tokens, grpc_rules, _GRPC_RESTRICTED, config.host),
    )
    for name, policy in zip(("HTTP", "gRPC"), policies, strict=True):
        refused = policy.refused_groups()
        if refused:
            log.warning(
                "%s: the %s API(s) are disabled: the server listens on %s without an admin "
                "token; start it with --admin-token, FNSERVE_ADMIN_TOKEN or --token-file to "
                "enable them",
                name, ", ".join(refused), config.host,
            )  # fmt: skip
    return policies


def _tokens(config: ServerConfig) -> list[Token]:
    tokens = []
    if config.admin_token:
        tokens.append(Token("admin", Role.ADMIN, check_secret(config.admin_token, "--admin-token")))
    if config.api_token:
        tokens.append(Token("api", Role.API, check_secret(config.api_token, "--api-token")))
    if config.token_file:
        tokens += read_token_file(Path(config.token_file))
    return tokens


def read_token_file(path: Path) -> list[Token]:
    """The tokens of a token file (format in the module docstring).

    Raises:
        ValueError: the file cannot be read, a malformed line, an unknown role or a name used
            twice (secrets are never quoted).
    """
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read --token-file '{path}': {exc.__class__.__name__}") from exc
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning(
            "--token-file '%s' may be read by other users (mode %o); chmod 600 it",
            path, stat.S_IMODE(mode),
        )  # fmt: skip
    tokens: list[Token] = []
    for number, line in enumerate(text.splitlines(), 1):
        fields = [] if line.lstrip().startswith("#") else line.split()
        if not fields:
            continue
        where = f"--token-file '{path}' line {number}"
        if len(fields) != 3:
            raise ValueError(f"{where}: expected 'NAME ROLE TOKEN', got {len(fields)} field(s)")
        name, role, secret = fields
        if role not in ("admin", "api"):
            raise ValueError(f"{where}: role must be 'admin' or 'api', got {role!r}")
        if any(token.name == name for token in tokens):
            raise ValueError(f"{where}: token name {name!r} is used twice")
        tokens.append(Token(name, Role[role.upper()], check_secret(secret, f"{where}: the token")))
    return tokens
