"""Each stage's readiness as its deployment reports it and /readyz sends it: `StageReady` (`app/rag/protocol.py`)
extended with what the stage serves. Optional fields are unset where a stage does not report them, and /readyz
leaves unset fields out (`exclude_unset`), so a not-ready retriever says only `ready` and its `reason`."""

from __future__ import annotations

from pydantic import BaseModel

from app.rag.protocol import StageReady


class LoadedCollection(BaseModel):
    index_version: int
    chunks: int
    mib: float  # what its index holds in memory (MiB)


class RetrieverReady(StageReady):
    reason: str | None = None  # not ready: why
    collection: str | None = None  # ready: the collection the next fields describe (the default, if loaded)
    index_version: int | None = None  # ready: the index version served, the dataset version it was built from, …
    dataset_version: int | None = None
    embedder: str | None = None
    chunks: int | None = None
    computes: str | None = None  # the embedder's runtime and precision, on what hardware
    # the collections loaded now, by name (/readyz shows a caller only those its key may read), and their budget
    collections: dict[str, LoadedCollection] | None = None
    memory_budget_mib: int | None = None


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
