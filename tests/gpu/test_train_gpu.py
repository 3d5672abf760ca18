"""GPU paths of the training jobs (NCCL, bf16, FSDP2 and ZeRO-3 on CUDA), vLLM loading the export, and the LLM
application on a GPU. Skipped without CUDA (and, for vLLM, without the `gpu` extra)."""

import asyncio
import importlib.util

import pytest
import torch

from app.storage import Storage
from app.train.config import TrainJobConfig
from app.train.run import run_training
from tests.helpers import SAMPLE, metric_history

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.fixture(scope="module")
def gpu_ray():
    import ray

    ray.init(address="local", num_gpus=torch.cuda.device_count(), include_dashboard=False)
    yield
    ray.shutdown()


@pytest.mark.parametrize("strategy", [{"strategy": "ddp"}, {"strategy": "fsdp"},
                                      {"strategy": "deepspeed", "zero_stage": 3}], ids=["ddp", "fsdp", "zero3"])
def test_sft_on_gpus_in_bf16(gpu_ray, tmp_path, strategy):
    workers = min(2, torch.cuda.device_count())
    cfg = TrainJobConfig.model_validate({
        "task": "sft", "name": "gpu", "sft": {"paths": [str(SAMPLE)], "max_length": 256}, "num_workers": workers,
        "use_gpu": True, "precision": "auto", "batch_size": 4, "epochs": 4, "max_steps": 8, "lr": 5e-5,
        "checkpoint_every": 4, **strategy})
    record = run_training(cfg, Storage(str(tmp_path / "store")))
    assert record["state"] == "succeeded"
    losses = metric_history(record, "loss")
    print(f"\n[gpu {'/'.join(str(v) for v in strategy.values())}] losses={[round(v, 4) for _, v in losses]} "
          f"metrics={record['metrics']} train_s={record.get('train_s')}")
    assert losses[-1][1] < losses[0][1]
    assert record["metrics"]["mfu"] > 0  # the device's peak is known for data-centre GPUs


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs the gpu extra (vllm)")
def test_vllm_loads_the_exported_sft_model(gpu_ray, tmp_path):
    from vllm import LLM, SamplingParams

    cfg = TrainJobConfig.model_validate({"task": "sft", "name": "v", "sft": {"paths": [str(SAMPLE)]},
                                         "num_workers": 1, "use_gpu": True, "max_steps": 2, "batch_size": 2})
    storage = Storage(str(tmp_path / "store"))
    record = run_training(cfg, storage)
    from app.catalog import Catalog

    model_dir = storage.local_path(Catalog(storage).get_model("sft", record["model"]["version"]).dir)
    out = LLM(model=str(model_dir), gpu_memory_utilization=0.3).generate(["What is a lambda?"],
                                                                        SamplingParams(max_tokens=8))
    assert out[0].outputs[0].text


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs the gpu extra (vllm)")
def test_the_llm_application_serves_on_gpu(gpu_ray, tmp_path):
    """deployments/llm.py with serve.generator.vllm.device=gpu: Ray Serve LLM places vLLM on a GPU bundle and streams
    a chat completion by handle, as the Generator calls it. Unrun where no GPU machine was at hand."""
    from ray import serve

    from app import envs
    from app.config import GeneratorConfig
    from app.models import generator as generator_model
    from app.rag.engines import ServeLLMEngine
    from deployments.llm import LLMArgs, build_llm_app

    overrides = ["serve.generator.vllm.device=gpu", "serve.generator.vllm.gpu_memory_utilization=0.3",
                 "serve.generator.max_context_tokens=1024"]
    serve.run(build_llm_app(LLMArgs(storage=str(tmp_path / "store"), overrides=overrides)), name="ragline-llm",
              route_prefix=None)
    try:
        path = generator_model.resolve("SmolLM2-135M-Instruct", envs.cache_dir())
        engine = ServeLLMEngine(GeneratorConfig(model=path))
        pieces = asyncio.run(_collect(engine))
        assert "".join(p.text for p in pieces[:-1]).strip() and pieces[-1].completion_tokens == 8
        print(f"\n[gpu vllm via Serve] {pieces[-1]}")
    finally:
        serve.shutdown()


async def _collect(engine) -> list:
    from app.rag.engines import Sampling

    return [p async for p in engine.stream([{"role": "user", "content": "What is a lambda?"}],
                                           Sampling(max_new_tokens=8, temperature=0.0, top_p=1.0))]
