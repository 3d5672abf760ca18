"""deployments.autoscale: the Retriever scales on the questions its replicas hold (no Ray started)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ray.serve._private.common import DeploymentID, ReplicaID
from ray.serve.config import AutoscalingConfig, AutoscalingContext

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]


def retriever_autoscaling(path: Path) -> AutoscalingConfig:
    serve_config = yaml.safe_load(path.read_text())
    app = next(a for a in serve_config["applications"] if a["name"] == "ragline")
    return AutoscalingConfig(**next(d for d in app["deployments"] if d["name"] == "Retriever")["autoscaling_config"])


def context(config: AutoscalingConfig, questions: list[float]) -> AutoscalingContext:
    dep = DeploymentID(name="Retriever", app_name="ragline")
    replicas = [ReplicaID(unique_id=f"r{i}", deployment_id=dep) for i in range(len(questions))]
    return AutoscalingContext(
        deployment_id=dep, deployment_name="Retriever", app_name="ragline", current_num_replicas=len(replicas),
        target_num_replicas=len(replicas), running_replicas=replicas,
        total_num_requests=2.0,  # Serve's count: the Ingress's calls in flight, whatever they carry
        total_queued_requests=0.0, aggregated_metrics={"questions": dict(zip(replicas, questions, strict=True))},
        raw_metrics={}, capacity_adjusted_min_replicas=config.min_replicas,
        capacity_adjusted_max_replicas=config.max_replicas, policy_state={}, last_scale_up_time=None,
        last_scale_down_time=None, current_time=None, config=config)


@pytest.mark.parametrize("path", ["deployments/serve_cpu.yaml", "deployments/serve_gpu.yaml"])
def test_the_serve_configs_scale_the_retriever_on_questions_in_flight(path: str) -> None:
    config = retriever_autoscaling(ROOT / path)
    policy = config.policy.get_policy()  # as the controller gets it: imported and pickled when the config is built
    target = config.get_target_ongoing_requests()
    # two replicas holding 3 and 1 target's worth of questions ask for 4 replicas, where Serve's count of calls
    # (two in flight) would ask for none more
    desired, _ = policy(context(config, [3 * target, target]))
    assert desired == pytest.approx(4)
    assert policy(context(config, [0.0, 0.0]))[0] == 0  # idle: down to min_replicas (Serve applies the bounds)
