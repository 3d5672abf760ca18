"""One local Ray for the whole session, the fixture corpus, a tiny language model."""

from pathlib import Path

import pytest
import ray

from app.config import AppConfig, load_config
from app.raycluster import NAMESPACE
from tests.helpers import write_corpus


@pytest.fixture(scope="session")
def ray_cluster():
    # address="local": always a fresh cluster of our own, even if a `ray start` one runs on this machine
    # metrics exported every 2 s rather than Ray's 10: the vLLM tests read the engine's metrics where Prometheus does
    ray.init(address="local", num_cpus=2, namespace=NAMESPACE, include_dashboard=False, log_to_driver=False,
             _system_config={"metrics_report_interval_ms": 2000})
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


@pytest.fixture
def corpus(tmp_path) -> tuple[Path, dict[str, int]]:
    d = tmp_path / "corpus"
    return d, write_corpus(d)


@pytest.fixture
def cfg() -> AppConfig:
    # the corpus has 1 corrupt file of 7: allow it
    return load_config(None, ["ingest.read.max_error_fraction=0.5"])


def tiny_llama(path: Path, hidden_size: int) -> str:
    """A two-layer Llama with SmolLM2's tokenizer and chat template, four attention heads of hidden_size / 4."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from app import envs
    from app.models import generator

    tokenizer = AutoTokenizer.from_pretrained(generator.resolve("SmolLM2-135M-Instruct", envs.cache_dir()))
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=512, tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id)
    LlamaForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="session")
def tiny_lm(tmp_path_factory) -> str:
    """The training strategies are under test, not the model."""
    return tiny_llama(tmp_path_factory.mktemp("tiny-lm"), 64)


@pytest.fixture(scope="session")
def tiny_lm_vllm(tmp_path_factory) -> str:
    """The same with head_dim 32, the smallest vLLM's CPU attention takes: the model-swap test serves it."""
    return tiny_llama(tmp_path_factory.mktemp("tiny-lm-vllm"), 128)
