"""Each stage's readiness as its deployment reports it and /readyz sends it: `StageReady` (`app/rag/protocol.py`)
extended with what the stage serves. Optional fields are unset where a stage does not report them, and /readyz
leaves unset fields out (`exclude_unset`), so a not-ready retriever says only `ready` and its `reason`."""

from __future__ import annotations

from app.rag.protocol import StageReady


class RetrieverReady(StageReady):
    reason: str | None = None  # not ready: why
    index_version: int | None = None  # ready: the index version served, the dataset version it was built from, …
    dataset_version: int | None = None
    embedder: str | None = None
    chunks: int | None = None
    computes: str | None = None  # the embedder's runtime and precision, on what hardware


class RerankerReady(StageReady):
    reranker: str  # the model's label, or "none"
    precision: str  # what it scores in: bf16 or fp32
    computes: str  # that precision, on what hardware


class GeneratorReady(StageReady):
    generator: str  # the model (version) answering
    engine: str
    llm: str | None = None  # vllm: the model the LLM application serves, or why it is not ready
    computes: str | None = None  # vllm: its dtype and the hardware that chose it


class Unanswered(StageReady):
    """A stage that did not answer the probe in time (in place of its own readiness)."""

    error: str
