"""What the command-line clients (`fnserve deploy`, `fnserve jobs`) share: which server they
call and with which credentials, and the TLS context their certificate flags make."""

from __future__ import annotations

import ssl
from dataclasses import dataclass


class TLSFilesError(ValueError):
    """A TLS file cannot be read or holds no PEM certificate or key."""


def tls_context(
    cacert: str | None = "", cert: str | None = "", key: str | None = ""
) -> ssl.SSLContext:
    """TLS settings: `cacert` verifies the server (default: the system's CAs); `cert` and `key`
    are this client's certificate for mutual TLS.

    Raises:
        TLSFilesError: a file cannot be read or holds no PEM certificate or key.
    """
    try:
        context = ssl.create_default_context(cafile=cacert or None)
        if cert:
            context.load_cert_chain(cert, key or None)
    except (OSError, ssl.SSLError) as exc:
        raise TLSFilesError(f"cannot use the TLS files: {exc}") from exc
    return context


@dataclass(frozen=True)
class ServerTarget:
    """Which server to call, and how.

    Args:
        server: its HTTP(S) URL.
        token: the bearer token ("": none).
        cacert, cert, key: PEM files: the CA that signed the server's certificate, and this
            client's certificate and key (mutual TLS); "": not used.
    """

    server: str
    token: str = ""
    cacert: str = ""
    cert: str = ""
    key: str = ""

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context the certificate flags ask for (None: none given, defaults apply).

        Raises:
            TLSFilesError: see `tls_context`.
        """
        if not (self.cacert or self.cert or self.key):
            return None
        return tls_context(self.cacert, self.cert, self.key)
