"""moto's S3-compatible server as the bucket of the Cloud Data tests (PyPI ``moto[server]``).

It runs as its own process (``python -m moto.server``) with moto's blanket CORS headers turned off
(``MOTO_DISABLE_GLOBAL_CORS``), so browsers see only what the bucket's own CORS rules allow, as on S3.
Credentials are not checked unless a test asks for it (:meth:`MotoServer.credentials_checked`), and
then only keys made with :meth:`MotoServer.new_key` are accepted. Presigned URLs work only while
credentials are not checked (moto checks only the Authorization header).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import boto3
import httpx
from botocore.config import Config

from tests.support import free_port, terminate, wait_until_serving

REGION = "us-east-1"
ALLOW_S3 = json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]})


class MotoServer:
    def __init__(self, log_dir: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_dir / f"moto-{self.port}.log"
        self.proc: subprocess.Popen | None = None
        self._users = 0

    def start(self, timeout: float = 30) -> MotoServer:
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            env={**os.environ, "MOTO_DISABLE_GLOBAL_CORS": "true"},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        wait_until_serving(self.proc, f"{self.url}/moto-api/data.json", "moto server", self.log_path, timeout)
        return self

    def stop(self) -> None:
        terminate(self.proc)

    def client(self, service: str = "s3", key_id: str = "test-key", secret: str = "test-secret"):
        """A boto3 client for setting the scene and looking at the result (not the appliance's code)."""
        return boto3.session.Session().client(
            service,
            endpoint_url=self.url,
            region_name=REGION,
            aws_access_key_id=key_id,
            aws_secret_access_key=secret,
            config=Config(signature_version="s3v4", s3={"addressing_style": "path"}),
        )

    def create_bucket(self, name: str) -> str:
        self.client().create_bucket(Bucket=name)
        return name

    def new_key(self) -> tuple[str, str]:
        """An IAM user's access key id and secret, allowed everything on S3."""
        self._users += 1
        iam = self.client("iam")
        user = f"cloud-data-{self._users}"
        iam.create_user(UserName=user)
        iam.put_user_policy(UserName=user, PolicyName="s3", PolicyDocument=ALLOW_S3)
        key = iam.create_access_key(UserName=user)["AccessKey"]
        return key["AccessKeyId"], key["SecretAccessKey"]

    @contextlib.contextmanager
    def credentials_checked(self):
        """Within the block, every request must be signed by a key from :meth:`new_key`."""
        httpx.post(f"{self.url}/moto-api/reset-auth", content=b"0").raise_for_status()
        try:
            yield
        finally:
            httpx.post(f"{self.url}/moto-api/reset-auth", content=b"inf").raise_for_status()
