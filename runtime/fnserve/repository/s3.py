"""`ObjectStore` on Amazon S3 and S3-compatible servers, through boto3 (`fnserve[s3]`).

Credentials and region come from boto3's default chain: environment variables, the shared
config and credentials files (`AWS_PROFILE`), then a container or instance role. The endpoint
is AWS unless `--s3-endpoint-url` or the standard `AWS_ENDPOINT_URL_S3` / `AWS_ENDPOINT_URL`
settings name another (MinIO, Ceph, a loopback test server). Every boto3 error is translated
once, here, into a `RepositoryError` that says what to check.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from fnserve.errors import RepositoryError
from fnserve.repository.objectstore import RemoteObject

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

INSTALL = "pip install 'fnserve[s3]'"
_CHUNK_BYTES = 1 << 20
_DENIED = {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken",
           "InvalidToken", "403", "Forbidden"}  # fmt: skip
_CREDENTIALS = (
    "AWS credentials (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or an "
    "instance or task role)"
)


class S3Store:
    """One bucket, read through a boto3 client (thread-safe: downloads run side by side).

    Args:
        bucket: the bucket's name.
        endpoint_url: an S3-compatible server ("": the default chain's endpoint).

    Raises:
        RepositoryError: boto3 is not installed (naming the pip line), or the client cannot
            be configured (e.g. an invalid endpoint URL).
    """

    def __init__(self, bucket: str, endpoint_url: str = "") -> None:
        try:
            import boto3
            from botocore.config import Config
        except ImportError as exc:
            raise RepositoryError(
                f"serving a model repository from S3 needs boto3: {INSTALL}"
            ) from exc
        self.bucket = bucket
        config = Config(
            connect_timeout=5,
            read_timeout=60,
            retries={"max_attempts": 3, "mode": "standard"},
            max_pool_connections=16,
        )
        with self._translated("configuring the S3 client"):
            self._client: S3Client = boto3.session.Session().client(
                "s3", endpoint_url=endpoint_url or None, config=config
            )

    @property
    def endpoint_url(self) -> str:
        return str(self._client.meta.endpoint_url)

    def list_objects(self, prefix: str) -> list[RemoteObject]:
        found: list[RemoteObject] = []
        with self._translated("listing"):
            pages = self._client.get_paginator("list_objects_v2")
            for page in pages.paginate(Bucket=self.bucket, Prefix=prefix):
                found += [
                    RemoteObject(item["Key"], item["ETag"], item["Size"])
                    for item in page.get("Contents", ())
                ]
        return found

    def download(self, key: str, target: Path) -> RemoteObject:
        with self._translated(f"downloading '{key}'"):
            answer = self._client.get_object(Bucket=self.bucket, Key=key)
            body, size = answer["Body"], 0
            with contextlib.closing(body), target.open("wb") as out:
                for chunk in body.iter_chunks(_CHUNK_BYTES):
                    out.write(chunk)
                    size += len(chunk)
        return RemoteObject(key, answer["ETag"], size)

    @contextlib.contextmanager
    def _translated(self, doing: str) -> Iterator[None]:
        """boto3's errors as one `RepositoryError` each, saying what to check."""
        from botocore.exceptions import (
            BotoCoreError,
            ClientError,
            ConnectionError,
            NoCredentialsError,
            PartialCredentialsError,
        )

        where = f"bucket '{self.bucket}'"
        try:
            yield
        except ClientError as exc:
            raise RepositoryError(f"{doing} {where}: {_client_error(exc, self.bucket)}") from exc
        except (NoCredentialsError, PartialCredentialsError) as exc:
            raise RepositoryError(f"{doing} {where}: no usable {_CREDENTIALS} found") from exc
        except ConnectionError as exc:
            endpoint = getattr(self, "_client", None)
            url = endpoint.meta.endpoint_url if endpoint is not None else "the S3 endpoint"
            raise RepositoryError(
                f"{doing} {where}: cannot reach {url} ({exc}); check --s3-endpoint-url, "
                f"AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL and the network"
            ) from exc
        except BotoCoreError as exc:
            raise RepositoryError(f"{doing} {where}: {exc}") from exc


def _client_error(exc: Exception, bucket: str) -> str:
    response = getattr(exc, "response", {})
    error = response.get("Error", {})
    code = str(error.get("Code", ""))
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    if code == "NoSuchBucket" or (code == "404" and status == 404):
        return f"the bucket '{bucket}' does not exist"
    if code in _DENIED or status == 403:
        return f"access denied ({code}): check the {_CREDENTIALS} and that they may read it"
    return f"{code or status}: {error.get('Message', exc)}"
