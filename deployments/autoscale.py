"""The Retriever's autoscaling policy: replicas for the questions in flight, not for the calls.

The Ingress sends its concurrent requests' searches to the Retriever in one call (`Retriever.retrieve_many`), so
Serve's own count of ongoing requests, which its default policy scales on, counts batches: under any load it stays
near the number of Ingress replicas. Each Retriever replica reports the questions it holds
(`record_autoscaling_stats`), and this policy scales on them as the default scales on requests:
`target_ongoing_requests` is read as questions per replica. Serve applies the config's bounds, delays and factors
around it. Set in the Serve YAML: `autoscaling_config: {..., policy: {policy_function:
deployments.autoscale:by_questions}}`.
"""

from __future__ import annotations

from typing import Any

from ray.serve.config import AutoscalingContext

METRIC = "questions"  # the key of Retriever.record_autoscaling_stats


def by_questions(ctx: AutoscalingContext) -> tuple[float, dict[str, Any]]:
    """(desired replicas, policy state): the questions in flight over all replicas (each replica's mean over the
    look-back window) divided by the questions one replica is to hold."""
    if ctx.current_num_replicas == 0:
        return ctx.target_num_replicas, {}
    assert ctx.config is not None, "Serve passes a deployment's policy its autoscaling config"
    questions = sum((ctx.aggregated_metrics or {}).get(METRIC, {}).values())
    return questions / ctx.config.get_target_ongoing_requests(), {}
