"""A real S3-compatible server on 127.0.0.1 for the object store tests: moto's server mode,
started as a subprocess.

It checks signatures: the server starts open, an IAM user with an access key is created,
then every request must be signed with that key (a wrong secret is refused with 403, as
AWS refuses it). Its request log (werkzeug's, one line per request, in the order the
answers went out) shows what a client wrote, and in which order.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

REGION = "us-east-1"
_LISTENING = re.compile(rb"Running on http://127\.0\.0\.1:(\d+)")
_REQUEST = re.compile(r'"([A-Z]+) (/[^ ?"]*)(\?[^ "]*)? HTTP/[0-9.]+" (\d{3})')
_COLOURS = re.compile(r"\x1b\[[0-9;]*m")  # werkzeug colours some lines (a 206, a 404)
_ALLOW_ALL = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}],
}


class S3Server:
    """moto's S3 server; :meth:`env` is what a client needs to reach it."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.endpoint = ""
        self.access_key = self.secret_key = ""
        self._process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> S3Server:
        with open(self.log, "wb") as out:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", "0"],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        deadline = time.monotonic() + timeout
        while not (match := _LISTENING.search(self.log.read_bytes())):
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"moto did not start:\n{self.log.read_text()}")
            time.sleep(0.05)
        self.endpoint = f"http://127.0.0.1:{int(match[1])}"
        self._enable_authentication()
        return self

    def _enable_authentication(self) -> None:
        iam = self._client("iam", "bootstrap", "bootstrap")
        user = f"publisher-{uuid.uuid4().hex[:8]}"
        iam.create_user(UserName=user)
        iam.put_user_policy(UserName=user, PolicyName="all", PolicyDocument=json.dumps(_ALLOW_ALL))
        key = iam.create_access_key(UserName=user)["AccessKey"]
        self.access_key, self.secret_key = key["AccessKeyId"], key["SecretAccessKey"]
        request = urllib.request.Request(
            f"{self.endpoint}/moto-api/reset-auth",
            data=b"0",  # no more unauthenticated requests from now on
            headers={"Content-Type": "text/plain"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert answer.status == 200

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()

    def env(self, home: Path) -> dict[str, str]:
        """The AWS settings of a client of this server (and none from ``~/.aws``)."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_SHARED_CREDENTIALS_FILE": str(home / "no-aws-credentials"),
            "AWS_CONFIG_FILE": str(home / "no-aws-config"),
        }

    def s3(self) -> Any:
        """A boto3 S3 client signed with the server's key."""
        return self._client("s3", self.access_key, self.secret_key)

    def new_bucket(self) -> str:
        name = f"kernels-{uuid.uuid4().hex[:12]}"
        self.s3().create_bucket(Bucket=name)
        return name

    def requests(self) -> list[tuple[str, str, int]]:
        """``(method, path, status)`` of every request answered so far, in order."""
        text = _COLOURS.sub("", self.log.read_text(errors="replace"))
        return [(m[1], urllib.request.unquote(m[2]), int(m[4])) for m in _REQUEST.finditer(text)]

    def _client(self, service: str, key: str, secret: str) -> Any:
        import boto3

        return boto3.client(
            service,
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=key,
            aws_secret_access_key=secret,
        )
