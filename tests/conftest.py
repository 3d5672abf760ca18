"""Every test belongs to exactly one tier, given by the directory it lives in (tests/<tier>/); the tiers are the
markers registered in pyproject.toml. `quality` runs only when asked for by name (`-m quality`): it is a
measurement, never part of CI."""

from __future__ import annotations

from pathlib import Path

import pytest
import ray

from app.raycluster import NAMESPACE

# Run order: the quick tier first; e2e before the tiers that start the session's Ray (integration, browser), because
# `ray up`/`ray down` stop every Ray on this machine and so the e2e test refuses to run beside one.
TIERS = ("unit", "e2e", "integration", "browser", "gpu", "quality")
TESTS = Path(__file__).resolve().parent


def tier_of(item: pytest.Item) -> str:
    tier = Path(item.path).resolve().relative_to(TESTS).parts[0]
    if tier not in TIERS:
        raise pytest.UsageError(f"{item.nodeid}: a test lives in tests/<tier>/, the tier being one of {TIERS}")
    return tier


@pytest.hookimpl(tryfirst=True)  # mark first, so that `-m` then filters on the tier markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    quality_asked = "quality" in (config.getoption("markexpr") or "")
    tiers = {item: tier_of(item) for item in items}
    for item, tier in tiers.items():
        item.add_marker(tier)
    deselected = [item for item in items if tiers[item] == "quality" and not quality_asked]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
    skip = set(deselected)
    items[:] = sorted((item for item in items if item not in skip), key=lambda item: TIERS.index(tiers[item]))


# ---- what the tiers that run Ray share: one local Ray for the whole session, tiny language models ----


@pytest.fixture(scope="session")
def ray_cluster():
    # address="local": always a fresh cluster of our own, even if a `ray start` one runs on this machine
    # metrics exported every 2 s rather than Ray's 10: the vLLM tests read the engine's metrics where Prometheus does
    from app.raycluster import init_local

    init_local(num_cpus=2, namespace=NAMESPACE, include_dashboard=False, log_to_driver=False,
               _system_config={"metrics_report_interval_ms": 2000})
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


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
