"""A real S3-protocol server on loopback for the s3:// storage tests: moto's standalone server (werkzeug, in a
process of its own), one bucket, and the environment that points every S3 client at it.

How a client finds it: pyarrow 26's `FileSystem.from_uri("s3://bucket/...")` (what `Storage`, the ingest inputs
and Ray Train's `storage_path` use) honours `AWS_ENDPOINT_URL` and `AWS_ENDPOINT_URL_S3` (the AWS SDK's own
variables; the `_S3` one wins when both are set), read each time a filesystem is made from a URI, so setting them
in `os.environ` takes effect for later `from_uri` calls of this process. Two ways that do NOT work or are worse:
`pyarrow.fs.S3FileSystem()` built directly ignores both variables (pass `endpoint_override=` and `scheme=` then);
the URI query form `s3://bucket/root?endpoint_override=127.0.0.1:PORT&scheme=http` works for `from_uri` itself,
but Ragline builds child URIs by appending paths to a root URI (`f"{uri}/eval/..."`), which a query breaks.

Child processes inherit the environment as it is when they start: a subprocess, or a Ray cluster started by
`ray.init` after `S3Server.env` is in `os.environ` (raylet and workers inherit the driver's environment at
start), reaches the server; a Ray cluster already running does not — give its jobs
`runtime_env={"env_vars": server.env}` instead. The server is a child of the test process, stopped when the test
session ends.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

BUCKET = "ragline-test"
REGION = "us-east-1"

# Variables that would send a client elsewhere than the test server, or make it look for other credentials:
# cleared while the server's environment is in force.
_CLEARED = ("AWS_ENDPOINT_URL_S3", "AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN",
            "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
            "AWS_CONTAINER_CREDENTIALS_FULL_URI")


@dataclass(frozen=True)
class S3Server:
    endpoint: str  # http://127.0.0.1:PORT
    bucket: str
    env: dict[str, str]  # set these (os.environ, a subprocess's env, a Ray runtime_env) to reach the server

    def uri(self, *parts: str) -> str:
        """s3://bucket/part/part..."""
        return "/".join([f"s3://{self.bucket}", *(p.strip("/") for p in parts if p.strip("/"))])

    def fresh_uri(self, name: str = "root") -> str:
        """A prefix nobody has written to yet: one test's storage root."""
        return self.uri(f"{name}-{uuid.uuid4().hex[:12]}")

    def client(self) -> Any:
        """A boto3 S3 client of the server, to set a test up or look at what a test left behind."""
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name=REGION,
                            aws_access_key_id=self.env["AWS_ACCESS_KEY_ID"],
                            aws_secret_access_key=self.env["AWS_SECRET_ACCESS_KEY"])

    def keys(self, prefix: str = "") -> list[str]:
        """Every object key under `prefix` (directory markers included: S3 keys ending in "/")."""
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
        return sorted(obj["Key"] for page in pages for obj in page.get("Contents", []))


def server_env(endpoint: str) -> dict[str, str]:
    return {
        "AWS_ACCESS_KEY_ID": "ragline-test",
        "AWS_SECRET_ACCESS_KEY": "ragline-test",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_REGION": REGION,
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_EC2_METADATA_DISABLED": "true",  # never wait on the instance metadata service for credentials/region
    }


@contextlib.contextmanager
def s3_server(bucket: str = BUCKET) -> Iterator[S3Server]:
    """Start moto's server on 127.0.0.1 (a free port) in a process of its own, create `bucket`; stop the server
    after. A process, as a real store would be: in a thread of the test process, its request handling (the served
    graph's replicas poll the catalog and key file several times a second) took the test's own GIL."""
    for _ in range(3):  # the port is free when chosen, and could be taken before the server binds it
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            if _listening(port, proc):
                endpoint = f"http://127.0.0.1:{port}"
                s3 = S3Server(endpoint=endpoint, bucket=bucket, env=server_env(endpoint))
                s3.client().create_bucket(Bucket=bucket)
                yield s3
                return
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    raise RuntimeError("moto's S3 server did not start")


def _listening(port: int, proc: subprocess.Popen, timeout_s: float = 60) -> bool:
    """Whether the server listens on `port` within `timeout_s` (False: it exited, e.g. its port was taken)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return True
        except OSError:
            time.sleep(0.1)
    return False


@contextlib.contextmanager
def s3_environ(s3: S3Server) -> Iterator[None]:
    """`s3.env` in os.environ (and the variables in _CLEARED removed) for the block; restored after."""
    saved = {k: os.environ.get(k) for k in (*s3.env, *_CLEARED)}
    for k in _CLEARED:
        os.environ.pop(k, None)
    os.environ.update(s3.env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
