"""A real S3-compatible HTTP server on loopback (moto in server mode) for the S3 tests.

```python
with LoopbackS3() as s3:
    s3.upload("models", "repo", local_folder)
    ServerProcess.start("s3://models/repo", env=s3.env())
```
"""

from __future__ import annotations

import os
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

import boto3
import httpx
from moto.server import ThreadedMotoServer

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

ACCESS_KEY = "AKIAFNSERVETESTKEY01"
SECRET_KEY = "fnserve-test-secret"


class LoopbackS3:
    """moto's S3 on 127.0.0.1 and a free port, and a boto3 client of it."""

    def __init__(self) -> None:
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)

    def __enter__(self) -> LoopbackS3:
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"
        self.client: S3Client = boto3.session.Session().client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name="us-east-1",
        )
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._server.stop()

    def env(self, **overrides: str) -> dict[str, str]:
        """An environment for `fnserve serve` that finds this server through the standard
        AWS variables (and no profile, config file or instance role of the machine)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env |= {
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL_S3": self.endpoint,
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
            "AWS_EC2_METADATA_DISABLED": "true",
        }
        return {k: v for k, v in (env | overrides).items() if v}  # "" removes a variable

    def bucket(self, name: str) -> str:
        self.client.create_bucket(Bucket=name)
        return name

    def upload(self, bucket: str, prefix: str, folder: Path) -> list[str]:
        """Put every file under `folder` at `prefix/<its relative path>`; the keys."""
        keys = []
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            key = f"{prefix}/{path.relative_to(folder).as_posix()}".lstrip("/")
            self.client.upload_file(str(path), bucket, key)
            keys.append(key)
        return keys

    def put(self, bucket: str, key: str, body: str | bytes) -> None:
        data = body.encode() if isinstance(body, str) else body
        self.client.put_object(Bucket=bucket, Key=key, Body=data)

    def enforce_auth(self, enforced: bool) -> None:
        """Check every request's credentials against moto's IAM (off by default: moto then
        accepts any key)."""
        count = "0" if enforced else "inf"
        httpx.post(f"{self.endpoint}/moto-api/reset-auth", content=count).raise_for_status()
