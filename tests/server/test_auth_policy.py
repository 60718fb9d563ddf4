"""The access policy without a server: roles, Triton's restriction syntax, token files, the
public-address refusal, every HTTP route and gRPC method in a group, and constant-time compares."""

from __future__ import annotations

import hmac
import logging
import re
from pathlib import Path

import pytest
from starlette.routing import Route

from fnserve.config.server import ServerConfig
from fnserve.errors import (
    PermissionDeniedError,
    RestrictedApiError,
    StartupError,
    UnauthenticatedError,
)
from fnserve.protocol import grpc_service_pb2, jobs_pb2
from fnserve.runtime import Runtime
from fnserve.server import auth
from fnserve.server.access import access_policies, read_token_file
from fnserve.server.auth import AccessPolicy, Role, Token, TokenSet, bearer, is_loopback
from fnserve.server.grpc.auth import GROUP_OF_METHOD
from fnserve.server.http.auth import api_group
from fnserve.server.http.routes import http_app

TOKENS = TokenSet([Token("ops", Role.ADMIN, b"adm"), Token("web", Role.API, b"api")])


def _headers(**values: str) -> auth.HeaderLookup:
    encoded = {k.replace("_", "-"): v.encode() for k, v in values.items()}
    return encoded.get


def _policy(tokens: TokenSet = TOKENS, host: str = "127.0.0.1", **rules: str) -> AccessPolicy:
    restrictions = auth.parse_restrictions([f"{g}:{kv}" for g, kv in rules.items()], "x")
    return AccessPolicy(tokens, restrictions, "restricted: {header}", host)


class TestRoles:
    def test_admin_outranks_api(self) -> None:
        policy = _policy()
        policy.check("model-repository", _headers(authorization="Bearer adm"))
        policy.check("inference", _headers(authorization="Bearer adm"))
        policy.check("inference", _headers(authorization="bearer api"))
        with pytest.raises(PermissionDeniedError, match="token 'web' has the api role"):
            policy.check("model-repository", _headers(authorization="Bearer api"))

    @pytest.mark.parametrize("value", [None, "", "Bearer", "Basic adm", "Bearer nope", "adm"])
    def test_missing_or_unknown_token_is_unauthenticated(self, value: str | None) -> None:
        headers = _headers() if value is None else _headers(authorization=value)
        with pytest.raises(UnauthenticatedError) as raised:
            _policy().check("inference", headers)
        assert "nope" not in str(raised.value)

    def test_health_stays_open_and_api_groups_open_without_api_tokens(self) -> None:
        _policy().check("health", _headers())
        admin_only = TokenSet([Token("ops", Role.ADMIN, b"adm")])
        _policy(admin_only).check("inference", _headers())
        with pytest.raises(UnauthenticatedError):
            _policy(admin_only).check("model-repository", _headers())

    def test_no_tokens_on_loopback_checks_nothing(self) -> None:
        policy = _policy(TokenSet([]))
        assert not policy.active
        policy.check("model-repository", _headers())


class TestPublicAddress:
    @pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "example.org"])
    def test_control_refused_without_an_admin_token(self, host: str) -> None:
        policy = _policy(TokenSet([]), host)
        assert policy.active
        assert policy.refused_groups() == ["model-repository", "trace", "logging"]
        with pytest.raises(PermissionDeniedError, match=f"listens on {re.escape(host)} without"):
            policy.check("model-repository", _headers())
        policy.check("inference", _headers())

    def test_a_triton_restriction_opens_its_group(self) -> None:
        policy = _policy(TokenSet([]), "0.0.0.0", **{"model-repository": "k=v"})
        assert policy.refused_groups() == ["trace", "logging"]
        policy.check("model-repository", _headers(k="v"))

    def test_an_admin_token_opens_control(self) -> None:
        assert _policy(host="0.0.0.0").refused_groups() == []

    @pytest.mark.parametrize(
        ("host", "loopback"), [("127.0.0.1", True), ("127.5.0.1", True), ("::1", True),
                               ("localhost", True), ("0.0.0.0", False), ("", False)],
    )  # fmt: skip
    def test_is_loopback(self, host: str, loopback: bool) -> None:
        assert is_loopback(host) is loopback

    def test_startup_logs_the_refusal(self, caplog: pytest.LogCaptureFixture) -> None:
        with caplog.at_level(logging.WARNING):
            access_policies(ServerConfig(host="0.0.0.0"))
        assert "model-repository, trace, logging API(s) are disabled" in caplog.text
        assert "--admin-token" in caplog.text


class TestTritonRestrictions:
    def test_header_must_match(self) -> None:
        policy = _policy(TokenSet([]), **{"inference,statistics": "Infer-Key=a=b:c"})
        policy.check("inference", _headers(infer_key="a=b:c"))
        policy.check("metadata", _headers())
        for headers in (_headers(), _headers(infer_key="a=b")):
            with pytest.raises(RestrictedApiError, match="restricted: infer-key"):
                policy.check("statistics", headers)

    @pytest.mark.parametrize(
        ("arg", "message"),
        [
            ("model-repository", "expects APIS:KEY=VALUE"),
            ("model-repository:key", "expects APIS:KEY=VALUE"),
            (":k=v", "expects APIS:KEY=VALUE"),
            ("models:k=v", "unknown API 'models'; known: health, metadata"),
        ],
    )
    def test_malformed_arguments(self, arg: str, message: str) -> None:
        with pytest.raises(ValueError, match=re.escape(message)):
            auth.parse_restrictions([arg], "http-restricted-api")

    def test_a_group_in_two_arguments(self) -> None:
        with pytest.raises(ValueError, match="more than one group"):
            auth.parse_restrictions(["health:a=1", "metadata,health:b=2"], "x")

    def test_grpc_keys_get_tritons_prefix(self) -> None:
        config = ServerConfig(grpc_restricted_protocol=("health:Key=v",))
        policy = access_policies(config).grpc
        policy.check("health", _headers(triton_grpc_protocol_key="v"))
        with pytest.raises(RestrictedApiError, match="'triton-grpc-protocol-key'"):
            policy.check("health", _headers(key="v"))


class TestTokenFile:
    def test_reads_named_tokens(self, tmp_path: Path) -> None:
        path = tmp_path / "tokens"
        path.write_text("# comment\n\n  ci admin s3cret#1\napp api tok2\n")
        path.chmod(0o600)
        assert [(t.name, t.role) for t in read_token_file(path)] == [
            ("ci", Role.ADMIN),
            ("app", Role.API),
        ]

    @pytest.mark.parametrize(
        ("text", "message"),
        [
            ("ci admin\n", "line 1: expected 'NAME ROLE TOKEN', got 2 field(s)"),
            ("ci root s3cret\n", "line 1: role must be 'admin' or 'api', got 'root'"),
            ("a api s3cret\na admin other\n", "line 2: token name 'a' is used twice"),
            ("a api s3crét\n", "line 1: the token must be 1 to 4096 visible ASCII"),
        ],
    )
    def test_mistakes_name_the_line_not_the_secret(
        self, tmp_path: Path, text: str, message: str
    ) -> None:
        path = tmp_path / "tokens"
        path.write_text(text)
        with pytest.raises(StartupError) as raised:
            access_policies(ServerConfig(token_file=str(path)))
        assert message in str(raised.value)
        assert "s3cr" not in str(raised.value)

    def test_readable_by_others_warns(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        path = tmp_path / "tokens"
        path.write_text("ci admin s3cret\n")
        path.chmod(0o644)
        with caplog.at_level(logging.WARNING):
            read_token_file(path)
        assert "may be read by other users (mode 644); chmod 600 it" in caplog.text

    def test_a_missing_file_is_a_startup_error(self, tmp_path: Path) -> None:
        with pytest.raises(StartupError, match="cannot read --token-file"):
            access_policies(ServerConfig(token_file=str(tmp_path / "none")))

    def test_bad_flag_token_is_a_startup_error_without_the_token(self) -> None:
        with pytest.raises(StartupError, match="--api-token must be") as raised:
            access_policies(ServerConfig(api_token="has space"))
        assert "has space" not in str(raised.value)


def test_secrets_stay_out_of_the_config_repr() -> None:
    config = ServerConfig(
        admin_token="A-secret", api_token="B-secret", http_restricted_api=("health:k=C-secret",)
    )
    assert "secret" not in repr(config)


def test_tokens_are_compared_in_constant_time_against_every_token(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[bytes, bytes]] = []
    compare = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return compare(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    assert TOKENS.match(b"adm") == Token("ops", Role.ADMIN, b"adm")  # the first one matches
    assert calls == [(b"adm", b"adm"), (b"adm", b"api")]  # and the second is compared anyway
    calls.clear()
    _policy(TokenSet([]), health="k=v").check("health", _headers(k="v"))
    assert calls == [(b"v", b"v")]


@pytest.mark.parametrize(
    ("value", "token"),
    [(b"Bearer abc", b"abc"), (b"bearer  abc ", b"abc"), (b"Basic abc", None), (None, None)],
)
def test_bearer(value: bytes | None, token: bytes | None) -> None:
    assert bearer(value) == token


def test_every_http_route_has_an_api_group() -> None:
    app = http_app(Runtime([]), ServerConfig())
    samples = {"{model_name}": "m", "{version:int}": "3", "{repository}": "r", "{region}": "x"}
    for route in app.routes:
        assert isinstance(route, Route)
        path = route.path
        for param, sample in samples.items():
            path = path.replace(param, sample)
        assert api_group(path) is not None, route.path
    assert api_group("/v2/models/m/versions/3/infer") == "inference"
    assert api_group("/v2/models/stats") == "statistics"
    assert api_group("/v2/models/m/ready") == "health"
    assert api_group("/v2/repository/models/m/load") == "model-repository"
    assert api_group("/v2/models/m/versions/x") is None
    assert api_group("/metrics") is None


def test_every_grpc_method_has_an_api_group() -> None:
    service = grpc_service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    methods = {f"/inference.GRPCInferenceService/{m.name}" for m in service.methods}
    assert methods <= set(GROUP_OF_METHOD)
    assert GROUP_OF_METHOD["/inference.GRPCInferenceService/ModelStreamInfer"] == "inference"


def test_every_jobs_rpc_needs_the_inference_role() -> None:
    service = jobs_pb2.DESCRIPTOR.services_by_name["Jobs"]
    groups = {GROUP_OF_METHOD.get(f"/fnserve.jobs.v1.Jobs/{m.name}") for m in service.methods}
    assert groups == {"inference"}
