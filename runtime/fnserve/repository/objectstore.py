"""Model repositories in object storage: their URLs, and the seam every store implements.

`fnserve serve s3://bucket/prefix` serves a repository kept in a bucket (Triton accepts
`s3://` repositories too). The mirror (`mirror.py`) copies it into a local cache through an
`ObjectStore`, which only has to list the objects under a prefix and download one; `s3.py`
implements it with boto3 (the optional `fnserve[s3]` extra).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple, Protocol

from fnserve.errors import RepositoryError

SCHEMES = ("s3",)


class RemoteObject(NamedTuple):
    """One object of a listing.

    Args:
        key: its full key in the bucket.
        etag: changes whenever its content does (the cache's test of freshness).
        size: its length in bytes.
    """

    key: str
    etag: str
    size: int


class RemoteUrl(NamedTuple):
    """A repository URL, `s3://bucket/prefix`, split up (the prefix without slashes around)."""

    scheme: str
    bucket: str
    prefix: str

    @classmethod
    def parse(cls, url: str) -> RemoteUrl:
        """Split `url`.

        Raises:
            RepositoryError: not `SCHEME://bucket[/prefix]` with a scheme fnserve reads.
        """
        scheme, sep, rest = url.partition("://")
        if not sep or scheme.lower() not in SCHEMES:
            raise RepositoryError(
                f"model repository URL '{url}' is not supported; expected s3://bucket/prefix"
            )
        bucket, _, prefix = rest.partition("/")
        if not bucket:
            raise RepositoryError(f"model repository URL '{url}' names no bucket")
        return cls(scheme.lower(), bucket, prefix.strip("/"))

    def __str__(self) -> str:
        return f"{self.scheme}://{self.bucket}/{self.prefix}".rstrip("/")


def is_remote(path: str | Path) -> bool:
    """Whether a model path given to `fnserve serve` is a URL (`s3://...`), not a file."""
    return isinstance(path, str) and "://" in path


class ObjectStore(Protocol):
    """Read access to one bucket. Methods block (network I/O): call them from a thread.

    Both raise `RepositoryError` with what failed and what to check (bucket, credentials,
    endpoint), never a client library's own exception.
    """

    def list_objects(self, prefix: str) -> list[RemoteObject]:
        """Every object whose key starts with `prefix` (all pages)."""
        ...

    def download(self, key: str, target: Path) -> RemoteObject:
        """Write the object's current content to `target`; what was written (its ETag may
        be newer than the listing's, when it changed in between)."""
        ...


def open_store(url: RemoteUrl, endpoint_url: str = "") -> ObjectStore:
    """The store for `url`'s scheme.

    Args:
        url: the repository.
        endpoint_url: an S3-compatible server to use instead of AWS ("": the standard
            `AWS_ENDPOINT_URL_S3` / `AWS_ENDPOINT_URL` settings, else AWS itself).

    Raises:
        RepositoryError: the scheme's client library is not installed.
    """
    from fnserve.repository.s3 import S3Store  # boto3 loads only when a URL is served

    return S3Store(url.bucket, endpoint_url)
