"""The server's TLS contexts, built once at start from `--tls-cert`, `--tls-key`, `--tls-client-ca`.

Both ports get the same certificate and policy (TLS 1.2 or later; with a client CA, every client
must present a certificate it signed: mutual TLS). They differ only in the ALPN protocols
offered: the HTTP port offers `h2` and `http/1.1` (the client's choice picks Hypercorn or
uvicorn), the gRPC port only `h2`. A file that cannot be read or does not hold what its flag
promises is a `StartupError` naming the flag, before any port is bound.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import NamedTuple

from fnserve.config.server import ServerConfig
from fnserve.errors import StartupError

HTTP_ALPN = ("h2", "http/1.1")
GRPC_ALPN = ("h2",)


class TlsContexts(NamedTuple):
    """One server context per port kind; `mode` is "TLS" or "mutual TLS"."""

    http: ssl.SSLContext
    grpc: ssl.SSLContext
    mode: str


def server_contexts(config: ServerConfig) -> TlsContexts | None:
    """The HTTP and gRPC contexts `config` asks for, or None when TLS is off.

    Raises:
        StartupError: a flag is missing its partner, or names a file that is unreadable, not
            PEM of the right kind, or (the key) does not match the certificate.
    """
    cert, key, client_ca = config.tls_cert, config.tls_key, config.tls_client_ca
    if not (cert or key or client_ca):
        return None
    if not (cert and key):
        raise StartupError("TLS needs both --tls-cert and --tls-key (PEM files)")
    _read_pem("--tls-cert", cert, "CERTIFICATE-----")
    _read_pem("--tls-key", key, "PRIVATE KEY-----")
    if client_ca:
        _read_pem("--tls-client-ca", client_ca, "CERTIFICATE-----")
    mode = "mutual TLS" if client_ca else "TLS"
    return TlsContexts(
        _context(cert, key, client_ca, HTTP_ALPN), _context(cert, key, client_ca, GRPC_ALPN), mode
    )


def _read_pem(flag: str, path: str, marker: str) -> None:
    try:
        text = Path(path).read_text(encoding="ascii", errors="replace")
    except OSError as exc:
        reason = (exc.strerror or str(exc)).lower()
        raise StartupError(f"cannot read {flag} '{path}': {reason}") from exc
    if marker not in text:
        kind = "private key" if "KEY" in marker else "certificate"
        raise StartupError(f"{flag} '{path}' holds no PEM {kind} ('-----BEGIN ...{marker}')")


def _context(cert: str, key: str, client_ca: str, alpn: tuple[str, ...]) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except ssl.SSLError as exc:
        if "KEY_VALUES_MISMATCH" in str(exc):
            raise StartupError(f"--tls-key '{key}' does not match --tls-cert '{cert}'") from exc
        raise StartupError(
            f"cannot load --tls-cert '{cert}' with --tls-key '{key}': {exc.reason or exc}"
        ) from exc
    if client_ca:
        try:
            context.load_verify_locations(cafile=client_ca)
        except ssl.SSLError as exc:
            raise StartupError(f"cannot load --tls-client-ca '{client_ca}': {exc}") from exc
        context.verify_mode = ssl.CERT_REQUIRED
    context.set_alpn_protocols(list(alpn))
    return context
