"""The unit tier is pure logic: starting Ray here fails the test (as in Ray Data's own unit tier), so a test that
needs a cluster is moved to tests/integration instead of slowing every quick loop down."""

from __future__ import annotations

import pytest
import ray
import ray._private.worker
import ray.cluster_utils


@pytest.fixture(autouse=True)
def _no_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        pytest.fail("the unit tier must not start or join Ray (ray.init was called): move this test to "
                    "tests/integration, which has a session-scoped local Ray", pytrace=False)

    for owner in (ray, ray._private.worker):
        monkeypatch.setattr(owner, "init", refuse)
    monkeypatch.setattr(ray.cluster_utils.Cluster, "__init__", refuse)
