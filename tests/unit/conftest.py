"""The unit tier is pure logic: starting Ray here fails the test (as in Ray Data's own unit tier), so a test that
needs a cluster is moved to tests/integration instead of slowing every quick loop down."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import ray
import ray._private.worker
import ray.cluster_utils

from tests.s3server import S3Server, s3_environ, s3_server


@pytest.fixture(autouse=True)
def _no_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        pytest.fail("the unit tier must not start or join Ray (ray.init was called): move this test to "
                    "tests/integration, which has a session-scoped local Ray", pytrace=False)

    for owner in (ray, ray._private.worker):
        monkeypatch.setattr(owner, "init", refuse)
    monkeypatch.setattr(ray.cluster_utils.Cluster, "__init__", refuse)


@pytest.fixture(scope="session")
def s3_bucket() -> Iterator[S3Server]:
    """moto's S3 server on loopback with one bucket, started once per session on first use; while it runs its
    AWS_* environment is in os.environ, so `Storage("s3://...")` and pyarrow reach it (tests/s3server.py). Tests
    share the bucket: each writes under its own prefix (`s3_bucket.fresh_uri()`)."""
    with s3_server() as s3, s3_environ(s3):
        yield s3
