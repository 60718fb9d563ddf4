"""Who may call which API: bearer tokens with roles, Triton's restricted-API headers, and the
control APIs refused on a public address that has no admin token.

Every endpoint belongs to one of Triton's API groups (`health`, `metadata`, `inference`,
`shared-memory`, `model-config`, `model-repository`, `statistics`, `trace`, `logging`); each
frontend names the group of a request and calls `AccessPolicy.check`, which raises:

- `RestrictedApiError` when a Triton restriction (`--http-restricted-api` /
  `--grpc-restricted-protocol APIS:KEY=VALUE`) covers the group and the request lacks the header
  `KEY` (gRPC: `triton-grpc-protocol-KEY`) with that value;
- `UnauthenticatedError` when the group needs a bearer token and none, or an unknown one, came;
- `PermissionDeniedError` when the token's role is too low (roles: admin > api), or when the
  server listens on a non-loopback address without any admin token: the control groups are then
  refused, as nobody could be told apart from anybody.

The control groups (`model-repository`, which holds fnserve's deployment API too, `trace`,
`logging`) need the admin role once an admin
token exists; `health` stays open; every other group needs the api role once an api token
exists (an admin token is accepted wherever an api token is). Secrets are compared with
`hmac.compare_digest`, against every known token, so timing tells nothing about them.
"""

from __future__ import annotations

import enum
import hmac
import ipaddress
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from fnserve.errors import PermissionDeniedError, RestrictedApiError, UnauthenticatedError

log = logging.getLogger(__name__)

API_GROUPS = (
    "health",
    "metadata",
    "inference",
    "shared-memory",
    "model-config",
    "model-repository",
    "statistics",
    "trace",
    "logging",
)
# The groups that change what the server does: they need the admin role.
CONTROL_GROUPS = frozenset({"model-repository", "trace", "logging"})
# Probes must work without a token; only a Triton restriction closes them.
OPEN_GROUPS = frozenset({"health"})

HeaderLookup = Callable[[str], bytes | None]
"""Returns the value of a request header (lower-case name), or None when it is absent."""


class Role(enum.IntEnum):
    """What a token may do; a higher role may do everything a lower one may."""

    API = 1
    ADMIN = 2


@dataclass(frozen=True)
class Token:
    """A named bearer token (the name appears in logs and messages, the secret never)."""

    name: str
    role: Role
    secret: bytes = field(repr=False)


@dataclass(frozen=True)
class Restriction:
    """Triton's restricted-API rule for one group: this header must carry this value."""

    header: str
    value: bytes = field(repr=False)


def check_secret(secret: str, what: str) -> bytes:
    """A token's bytes, once it is 1-4096 visible ASCII characters (it travels in a header).

    Raises:
        ValueError: the token is empty, too long or has other characters (never quoted).
    """
    if not 0 < len(secret) <= 4096 or not all("!" <= c <= "~" for c in secret):
        raise ValueError(f"{what} must be 1 to 4096 visible ASCII characters (no spaces)")
    return secret.encode("ascii")


def parse_restrictions(
    args: Iterable[str], flag: str, header_prefix: str = ""
) -> dict[str, Restriction]:
    """Triton's `APIS:KEY=VALUE` arguments (APIS comma-separated) as a map group -> rule.

    Raises:
        ValueError: a malformed argument, an unknown group, or a group named twice.
    """
    rules: dict[str, Restriction] = {}
    for arg in args:
        groups, _, key_value = arg.partition(":")
        key, _, value = key_value.partition("=")
        if not groups.strip() or not key.strip() or not value:
            raise ValueError(f"--{flag} expects APIS:KEY=VALUE, e.g. model-repository:admin-key=…")
        rule = Restriction(header_prefix + key.strip().lower(), value.encode())
        for group in (g.strip() for g in groups.split(",")):
            if group not in API_GROUPS:
                raise ValueError(f"--{flag}: unknown API {group!r}; known: {', '.join(API_GROUPS)}")
            if group in rules:
                raise ValueError(f"--{flag}: API {group!r} is named in more than one group")
            rules[group] = rule
    return rules


def is_loopback(host: str) -> bool:
    """Whether `host` is reachable from this machine only (a name other than localhost: no)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bearer(value: bytes | None) -> bytes | None:
    """The token of an `Authorization: Bearer TOKEN` value; None for any other value."""
    if value is None:
        return None
    scheme, _, token = value.strip().partition(b" ")
    if scheme.lower() != b"bearer" or not token.strip():
        return None
    return token.strip()


class TokenSet:
    """The server's bearer tokens, matched in constant time."""

    def __init__(self, tokens: Iterable[Token]) -> None:
        self._tokens = tuple(tokens)
        self.roles = frozenset(token.role for token in self._tokens)

    def match(self, presented: bytes) -> Token | None:
        """The token whose secret is `presented`; every token is compared, with no early exit."""
        found = None
        for token in self._tokens:
            if hmac.compare_digest(presented, token.secret):
                found = token
        return found


class AccessPolicy:
    """One frontend's access rules.

    Args:
        tokens: the bearer tokens.
        restrictions: Triton's restricted groups, by group name.
        restricted_message: Triton's error message, `{header}` replaced by the header name.
        host: the bound address; without an admin token a public one closes the control groups.
    """

    def __init__(
        self,
        tokens: TokenSet,
        restrictions: Mapping[str, Restriction],
        restricted_message: str,
        host: str,
    ) -> None:
        self._tokens = tokens
        self._restrictions = dict(restrictions)
        self._restricted_message = restricted_message
        self._host = host
        self._closed = not is_loopback(host) and Role.ADMIN not in tokens.roles

    @property
    def active(self) -> bool:
        """Whether any request may be refused (if not, frontends skip the checks)."""
        return bool(self._tokens.roles or self._restrictions or self._closed)

    def refused_groups(self) -> list[str]:
        """The control groups this policy refuses whatever the request carries."""
        if not self._closed:
            return []
        return [g for g in API_GROUPS if g in CONTROL_GROUPS and g not in self._restrictions]

    def check(self, group: str, header: HeaderLookup, what: str = "") -> None:
        """Let a request for `group` through, or raise why not.

        Args:
            group: the request's API group.
            header: looks up a request header by its lower-case name.
            what: the request in a few words, logged with the token name for control groups.

        Raises:
            RestrictedApiError: a Triton restriction's header is missing or wrong.
            UnauthenticatedError: no bearer token, or an unknown one, where one is needed.
            PermissionDeniedError: the token's role is too low, or the group is refused.
        """
        rule = self._restrictions.get(group)
        if rule is not None:
            value = header(rule.header)
            if value is None or not hmac.compare_digest(value, rule.value):
                raise RestrictedApiError(self._restricted_message.format(header=rule.header))
        needed = self._needed(group, rule is not None)
        if needed is None:
            return
        token = self._authenticate(group, header)
        if token.role < needed:
            raise PermissionDeniedError(
                f"the {group} API needs a token with the {needed.name.lower()} role; "
                f"token '{token.name}' has the {token.role.name.lower()} role"
            )
        if group in CONTROL_GROUPS:
            log.info("%s: %s by token '%s'", group, what, token.name)

    def _needed(self, group: str, restricted: bool) -> Role | None:
        if group in OPEN_GROUPS:
            return None
        if group not in CONTROL_GROUPS:
            return Role.API if Role.API in self._tokens.roles else None
        if Role.ADMIN in self._tokens.roles:
            return Role.ADMIN
        if self._closed and not restricted:
            raise PermissionDeniedError(refusal(group, self._host))
        return None

    def _authenticate(self, group: str, header: HeaderLookup) -> Token:
        presented = bearer(header("authorization"))
        if presented is None:
            raise UnauthenticatedError(
                f"the {group} API requires a bearer token: send 'authorization: Bearer <token>'"
            )
        token = self._tokens.match(presented)
        if token is None:
            raise UnauthenticatedError("the bearer token is not valid on this server")
        return token


def refusal(group: str, host: str) -> str:
    """Why a control group is refused, and how to open it."""
    return (
        f"the {group} API is disabled: the server listens on {host} without an admin token; "
        f"start it with --admin-token (or FNSERVE_ADMIN_TOKEN, or an admin line in "
        f"--token-file) to enable it, or bind 127.0.0.1"
    )
