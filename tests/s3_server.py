"""A real S3 endpoint for tests: moto's server in a subprocess, with request signing enforced.

Every request must be signed with the key of an IAM user allowed `s3:*`, so a reader that sends no
credentials, or the wrong ones, is refused (HTTP 403) - as it would be by AWS or MinIO - and one
that does not know the endpoint goes to AWS and fails. Nothing is mocked inside the process under
test: pyarrow, pyiceberg and Spark's Python workers all talk HTTP to it."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

from tests.standalone import free_port

REGION = "us-east-1"


@dataclass(frozen=True)
class S3Server:
    endpoint: str  # http://127.0.0.1:<port>
    access_key: str
    secret_key: str

    def client(self):  # noqa: ANN201 - a boto3 S3 client signed with the user's key
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
        )

    def s3a_settings(self) -> dict[str, str]:
        """The Hadoop S3A settings a Spark user would set for this endpoint."""
        return {
            "fs.s3a.endpoint": self.endpoint,
            "fs.s3a.path.style.access": "true",
            "fs.s3a.access.key": self.access_key,
            "fs.s3a.secret.key": self.secret_key,
            "fs.s3a.endpoint.region": REGION,
        }

    def pyiceberg_properties(self) -> dict[str, str]:
        return {
            "s3.endpoint": self.endpoint,
            "s3.access-key-id": self.access_key,
            "s3.secret-access-key": self.secret_key,
            "s3.region": REGION,
        }


@contextlib.contextmanager
def s3_server(buckets: tuple[str, ...] = ("lake",)) -> Iterator[S3Server]:
    """A running server with `buckets`, stopped on exit."""
    import boto3

    port = free_port()
    # The first three requests (create the user, its policy and its key) are let through unsigned.
    env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "3"}
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError("the moto S3 server did not start") from None
                time.sleep(0.1)
        endpoint = f"http://127.0.0.1:{port}"
        iam = boto3.client(
            "iam", endpoint_url=endpoint, region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x"
        )
        iam.create_user(UserName="deltaspark")
        policy = {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}],
        }
        iam.put_user_policy(UserName="deltaspark", PolicyName="s3", PolicyDocument=json.dumps(policy))
        key = iam.create_access_key(UserName="deltaspark")["AccessKey"]
        server = S3Server(endpoint, key["AccessKeyId"], key["SecretAccessKey"])
        client = server.client()
        for bucket in buckets:
            client.create_bucket(Bucket=bucket)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
