"""The cross-encoder (the reranker): where it comes from, loading it, the text it reads and the order it gives.

A `model` spec is `catalog:NAME` (the promoted version of a reranker Ragline trained, followed as promotions
change; none until one is promoted), `catalog:NAME:VERSION` (that version), a packaged base model
(`all-MiniLM-L6-v2`: what `ragline train reranker` fine-tunes; loaded as a cross-encoder, its scoring head is
untrained), a local directory or a hub id. Serving (`deployments/reranker.py`), training (`app.train`) and
evaluation (`app.eval`) resolve, load and feed it through here, so all three score the same passage text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from app.catalog import Precision
from app.fusion import rrf
from app.models import embedder, local_or_hub, trained
from app.storage import Storage

if TYPE_CHECKING:
    from sentence_transformers import CrossEncoder


def resolve(spec: str) -> str:
    """A model outside the catalog: a packaged base model's directory, a local directory or a hub id."""
    if spec.lower() in embedder.PACKAGED:
        return embedder.resolve(spec)
    return local_or_hub(spec, "reranker")


def locate(spec: str, storage: Storage) -> tuple[str, str] | None:
    """(what `load` takes: a local directory or hub id, the label callers see) for a `model` spec; None while
    `catalog:NAME` has no promoted version. A trained version's files are mirrored into the local cache when the
    storage is remote."""
    if not trained.is_catalog(spec):
        return resolve(spec), spec
    manifest = trained.lookup(spec, storage)
    if manifest is None:
        return None
    return trained.local_dir(manifest, storage), trained.label(manifest)


def load(path: str, max_length: int | None = None, device: str = "cpu") -> CrossEncoder:
    """A sentence-transformers CrossEncoder from a directory or hub id `locate` (or `resolve`) returned."""
    from sentence_transformers import CrossEncoder

    return CrossEncoder(path, max_length=max_length, device=device)


def passage_text(title: str | None, text: str) -> str:
    """What the cross-encoder reads for a passage: the title and text the index embedded, the same in training
    (`app.train.reranker_data`), serving and evaluation."""
    return embedder.embed_text(title or "", text, include_title=True)


def score(model: CrossEncoder, pairs: Sequence[tuple[str, str]], precision: Precision = "fp32",
          logits: bool = False) -> list[float]:
    """The model's score of each (query, passage text) pair, in order, computed in `precision` (bf16: autocast):
    the probability sentence-transformers gives a one-label model, or (`logits`) the logit under it, whose
    differences are a teacher's margins (GPL)."""
    import torch

    if not pairs:
        return []
    with torch.autocast(model.device.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
        scores = model.predict(list(pairs), batch_size=64, show_progress_bar=False,
                               activation_fn=torch.nn.Identity() if logits else None)
    return [float(s) for s in scores]


def rerank_order(scores: list[float], retriever_weight: float, k: int = 60) -> list[int]:
    """Candidates (given in the retriever's order) best first, as indices: the cross-encoder's order by `scores`,
    fused by RRF with the given order weighted `retriever_weight` against the cross-encoder's 1 (0: the
    cross-encoder's order alone). Ties go to the retriever's order."""
    by_score = sorted(range(len(scores)), key=lambda i: -scores[i])
    if retriever_weight == 0:
        return by_score
    return [i for i, _ in rrf([by_score, list(range(len(scores)))], [1.0, retriever_weight], k)]
