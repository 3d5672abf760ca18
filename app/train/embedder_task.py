"""The embedder task: the retriever's bi-encoder fine-tuned on (query, positive, hard negatives) groups, mined as
the reranker's are (`app.train.data.prepare_groups`).

Two losses (`embedder.loss`):
- contrastive, sentence-transformers' MultipleNegativesRankingLoss with hard negatives: each query's positive
  scored against every passage of the micro-batch (its own hard negatives and the other queries' groups), a softmax
  over `scale` × cosine;
- margin_mse, GPL's MarginMSE: a teacher cross-encoder scores every passage of a group once, before training, and
  the embedder's margins (`scale` × cosine of the positive minus that of each hard negative) regress onto the
  teacher's logit margins.

The export is a sentence-transformers directory (the base model's pooling and normalisation with the trained
transformer), so the ingest, the index build and the Retriever load it as they load MiniLM.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from app.errors import NotFound
from app.train import reranker_task
from app.train.config import TrainJobConfig
from app.train.hf_models import with_checkpointing

if TYPE_CHECKING:
    import torch

    from app.storage import Storage
    from app.train.data import Prepared
    from app.train.sft_data import Batch


def validate(cfg: TrainJobConfig) -> None:
    if cfg.lora is not None or cfg.freeze_layers:
        raise ValueError("lora and freeze_layers are for sft; the embedder is small enough to train whole")


def check_inputs(cfg: TrainJobConfig) -> None:
    reranker_task.check_pairs(cfg.embedder, "embedder")


def resolve_model(cfg: TrainJobConfig) -> str:
    from app.models import embedder

    return embedder.resolve(cfg.model_name)


def build_model(cfg: TrainJobConfig, path: str) -> torch.nn.Module:
    """The transformer under the sentence-transformers pooling (no head: the same on every rank). Without BERT's
    pooler: the mean of the token states is the embedding, and DDP fails a step whose parameters got no gradient."""
    import torch
    from transformers import AutoModel

    return with_checkpointing(cfg, AutoModel.from_pretrained(path, dtype=torch.float32, add_pooling_layer=False))


class GroupTokenize:
    """map_batches callable: {query, texts} → {query_ids, passage_ids}: the query and each passage of its group
    tokenized alone, truncated to their max lengths."""

    def __init__(self, model_dir: str, query_max_length: int, max_length: int):
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.query_max_length, self.max_length = query_max_length, max_length

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, list[Any]]:
        queries = self.tokenizer([str(q) for q in batch["query"]], truncation=True,
                                 max_length=self.query_max_length)["input_ids"]
        passages = [self.tokenizer([str(t) for t in texts], truncation=True, max_length=self.max_length)["input_ids"]
                    for texts in batch["texts"]]
        out = {"query_ids": queries, "passage_ids": passages}
        return out | ({"teacher": list(batch["teacher"])} if "teacher" in batch else {})


class TeacherScores:
    """map_batches callable: {query, texts} → the same with `teacher`, the cross-encoder's logit for each of the
    group's passages (G floats). Locates and loads the teacher once per actor."""

    def __init__(self, storage_uri: str, spec: str, max_length: int):
        from app.models import cross_encoder
        from app.storage import Storage

        located = cross_encoder.locate(spec, Storage(storage_uri))
        assert located is not None, spec  # prepare checked it
        self.model = cross_encoder.load(located[0], max_length=max_length)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        from app.models import cross_encoder

        groups = [[str(t) for t in texts] for texts in batch["texts"]]
        scores = cross_encoder.score(self.model, [(str(q), t) for q, texts in zip(batch["query"], groups,
                                                                                    strict=True) for t in texts],
                                     logits=True)
        g = len(groups[0])
        return dict(batch) | {"teacher": [scores[i * g:(i + 1) * g] for i in range(len(groups))]}


def prepare(cfg: TrainJobConfig, model_path: str, storage: Storage) -> Prepared:
    from transformers import AutoTokenizer

    from app.models import cross_encoder
    from app.train.data import prepare_groups

    ec = cfg.embedder
    pad = AutoTokenizer.from_pretrained(model_path).pad_token_id or 0
    columns, label = ["query_ids", "passage_ids"], None
    if ec.loss == "margin_mse":
        assert ec.teacher is not None  # the config's validator
        if cross_encoder.locate(ec.teacher, storage) is None:
            raise NotFound(f"embedder.teacher {ec.teacher}: no version is promoted yet")
        columns, label = [*columns, "teacher"], (TeacherScores, (storage.uri, ec.teacher, ec.max_length))
    return prepare_groups(cfg, ec, storage, GroupTokenize, (model_path, ec.query_max_length, ec.max_length),
                          columns, int(pad), label)


def collate_bi(batch: dict[str, np.ndarray], pad_id: int, scale: float) -> Batch:
    """B groups of G passages → input_ids and attention_mask of shape (B + B·G, T): the B queries, then group 0's
    passages, group 1's, …; padded to the longest row."""
    import torch

    rows = [list(q) for q in batch["query_ids"]] + [list(p) for group in batch["passage_ids"] for p in group]
    longest = max(len(r) for r in rows)
    ids = torch.full((len(rows), longest), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), longest), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.as_tensor(r)
        mask[i, : len(r)] = 1
    out: Batch = {"input_ids": ids, "attention_mask": mask, "queries": len(batch["query_ids"]),
                  "group_size": len(batch["passage_ids"][0]), "scale": scale}
    if "teacher" in batch:  # margin_mse: (B, G) logits
        out["teacher"] = torch.as_tensor(np.stack([np.asarray(t, dtype=np.float32) for t in batch["teacher"]]))
    return out


def collate(cfg: TrainJobConfig, pad_id: int) -> Callable[[dict[str, np.ndarray]], Batch]:
    return lambda b: collate_bi(b, pad_id, cfg.embedder.scale)


def batched_in_data(cfg: TrainJobConfig) -> bool:
    return False


def model_inputs(cfg: TrainJobConfig, batch: Batch, device: torch.device) -> dict[str, torch.Tensor]:
    return {k: batch[k].to(device) for k in ("input_ids", "attention_mask")}


def mean_pooled(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(N, T, H) token states → (N, H) unit vectors: the mean over real tokens, as sentence-transformers' MiniLM
    pools and normalises."""
    import torch

    m = mask.unsqueeze(-1).to(hidden.dtype)
    pooled = (hidden * m).sum(1) / m.sum(1).clamp(min=1.0)
    return torch.nn.functional.normalize(pooled.float(), dim=-1)


def loss(out: Any, batch: Batch) -> torch.Tensor:
    """contrastive: cross-entropy of each query over all B·G passages of the micro-batch, its own positive (row
    i·G) the label. margin_mse (the batch has `teacher`): the mean squared error between the embedder's and the
    teacher's margins, the positive's score minus each hard negative's, (B, G-1)."""
    import torch

    vectors = mean_pooled(out.last_hidden_state, batch["attention_mask"].to(out.last_hidden_state.device))
    b, g = batch["queries"], batch["group_size"]
    queries, passages = vectors[:b], vectors[b:]
    if "teacher" in batch:
        own = batch["scale"] * torch.einsum("bh,bgh->bg", queries, passages.view(b, g, -1))  # (B, G)
        teacher = batch["teacher"].to(own.device)
        return torch.nn.functional.mse_loss(own[:, :1] - own[:, 1:], teacher[:, :1] - teacher[:, 1:])
    scores = batch["scale"] * queries @ passages.T  # (B, B·G)
    return torch.nn.functional.cross_entropy(scores, torch.arange(b, device=scores.device) * g)


def export(cfg: TrainJobConfig, model: Any, path: str, directory: Path) -> None:
    """A sentence-transformers directory: the base model's modules (pooling, normalisation, max length) around the
    trained transformer."""
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(path, device="cpu")
    transformer: Any = st[0]  # sentence_transformers.models.Transformer
    missing, unexpected = transformer.auto_model.load_state_dict(model.state_dict(), strict=False)
    assert not unexpected and all(k.startswith("pooler.") for k in missing), (missing, unexpected)
    st.save(str(directory))
