"""The unit tier's guard works: Ray cannot be started from here."""

import pytest
import ray
from ray.cluster_utils import Cluster


def test_starting_ray_fails_a_unit_test() -> None:
    # the guard fails the test that calls ray.init, naming the tier to move it to
    with pytest.raises(pytest.fail.Exception, match="tests/integration"):
        ray.init(address="local")
    with pytest.raises(pytest.fail.Exception, match="tests/integration"):
        Cluster(initialize_head=True)
    assert not ray.is_initialized()
