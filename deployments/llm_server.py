"""The LLM application's replica: Ray Serve LLM's `LLMServer` given Ragline's model spec (`RaglineLLMServer`),
and the vLLM engine it starts (`OneProcessEngine`). It imports vLLM, so only the replica imports it: the
application's builder (`deployments/llm.py`) names this class by import path.
"""

import asyncio
import logging
import os
import subprocess
import sys
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import psutil
from ray import serve
from ray.llm._internal.serve.engines.vllm.vllm_engine import VLLMEngine
from ray.serve.llm import LLMConfig, LLMServer
from ray.serve.llm.openai_api_models import ChatCompletionRequest
from vllm.utils.ompmultiprocessing import OMPProcessManager

from app import envs, hardware, serving
from app.config import GeneratorConfig
from app.errors import NotFound
from app.models import generator as generator_model
from app.models import trained
from app.storage import Storage
from deployments.batching import paced
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


class OneProcessEngine(VLLMEngine):
    """Ray Serve LLM's vLLM engine, with a lone worker inside vLLM's engine process (vLLM's "uni" executor;
    `serve.generator.vllm.one_process`). On CPU Ray Serve LLM picks vLLM's multiprocess executor whatever the world
    size; for one worker that is one more spawned Python importing vLLM and torch: 6-10 s of each cold start and model
    swap on 2 cores, and 0.45 GB (a SmolLM2 replica's processes hold 2.8 GB PSS, against 3.2). In Ray Serve LLM's own
    app the multiprocess executor generated 1.38x the tokens/s at 32 clients on 2 cores (benchmarks/ceiling_bench.py,
    side serve-llm-uni, while this worker ran one OpenMP thread); in Ragline's graph it did not. On GPU Ray Serve
    LLM's executor is Ray's: untouched."""

    def _start_async_llm_engine(self, vllm_engine_args, vllm_engine_config, placement_group):
        parallel = vllm_engine_config.parallel_config
        if parallel.distributed_executor_backend != "mp" or parallel.world_size != 1:
            return super()._start_async_llm_engine(vllm_engine_args, vllm_engine_config, placement_group)
        parallel.distributed_executor_backend = "uni"
        # The engine process, spawned here, inherits the replica's OMP_NUM_THREADS (serve.generator.vllm.threads).
        # vLLM's multiprocess executor gives its worker the OpenMP threads and binding VLLM_CPU_OMP_THREADS_BIND
        # names (cpu_bind); the lone worker here gets the same (nobind: none, the inherited threads).
        with OMPProcessManager(vllm_engine_config).configure_omp_envs(rank=0, local_rank=0):
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
        # The engine's threads are chosen here too, on its node: under cpu_bind nobind the engine process spawned
        # below inherits OMP_NUM_THREADS (Ray gives this 0-CPU actor 1); otherwise vLLM binds one to each core named.
        chosen = (gen.vllm.device, gen.vllm.cpu_bind, gen.vllm.threads, self.dtype)
        os.environ.update(hardware.generator_thread_env(*chosen))
        self.placement = hardware.generator_placement(*chosen)
        log.info("vLLM %s%s on %s (serve.generator.vllm.dtype %s)", self.dtype, self.placement,
                 hardware.detect().summary(), gen.vllm.dtype)
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

    def _batch_output_stream(self, generator: AsyncGenerator[Any]) -> AsyncGenerator[list[Any]]:
        """The streamed chunks, `paced` (Ray Serve LLM's hook for its response batcher, ray 2.60): a first token
        goes out when it is made, not at the next 50 ms tick, and a busy stream still sends a list per interval."""
        interval_ms = self._get_batch_interval_ms()
        assert interval_ms is not None, "asked for streams only"
        return paced(generator, interval_ms / 1000)

    async def chat_sse(self, request: dict[str, Any]) -> AsyncIterator[list[str]]:
        """`chat` for a caller without vLLM (the RAG graph's Generator): the request as its OpenAI JSON body, and
        batches of SSE strings only, a request refused before any token given as an error chunk like those vLLM
        streams mid-answer. Ray Serve LLM's `chat` takes and returns vLLM's protocol objects, which the caller would
        have to import: vLLM's protocol, 5.9 s of its first answer on an idle 2-core machine."""
        async for batch in await self.chat(ChatCompletionRequest.model_validate(request)):
            assert isinstance(batch, list)  # streamed: batches, never one whole response
            yield [item if isinstance(item, str) else f"data: {item.model_dump_json()}\n\n" for item in batch]

    async def served(self) -> str:
        """The label of the model this replica serves (also the `model` of its responses)."""
        return self.label

    async def computes(self) -> str:
        """The dtype the engine runs and the hardware that decided it (for /readyz)."""
        return f"{self.dtype}{self.placement} on {hardware.detect().summary()}"

    def _follow_catalog(self) -> None:
        """A newly promoted version: pin it in the running Serve config, and Serve rolls this application over."""
        manifest = trained.lookup(self.spec, self._storage)
        if (manifest is not None and trained.label(manifest) != self.label
                and serving.pin_generator(self._app, manifest.version)):
            log.info("%s promoted: rolling %s over from %s", trained.label(manifest), self._app, self.label)
