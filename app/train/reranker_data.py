"""Training groups for the cross-encoder: (query, positive, hard negatives), mined from a published index.

Each row is one group: the query and `1 + negatives` passages, the positive first. Negatives are drawn (seeded
per query) from the union of the index's BM25 and dense top-`mine_top_k` minus every positive document of the
query; a group short of hard negatives is filled with random chunks, so every group has the same size and
the loss is a softmax over the group (listwise cross-entropy, label 0).

Pairs come from BEIR qrels, or, for a corpus without labels, from the corpus itself: a chunk becomes a
(pseudo-query, chunk) pair whose query is the chunk's document title, or its first sentence (then cut from the
passage, so the pair is not a verbatim match).
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

import numpy as np

from app.config import SearchConfig
from app.models.cross_encoder import passage_text
from app.passage import ChunkRow
from app.storage import Storage
from app.train.config import RerankerDataConfig

if TYPE_CHECKING:
    from app.train.sft_data import Batch


class QueryRow(TypedDict):
    """A query and its relevant documents, as a Ray Data row: the `MineNegatives` input."""

    qid: str
    query: str
    positives: list[str]  # doc ids
    positive_texts: NotRequired[list[str]]  # self pairs: the passage itself (the query cut from it)


def self_pairs(chunks: Sequence[ChunkRow], n: int, seed: int) -> list[QueryRow]:
    """Up to `n` (pseudo-query, chunk) pairs from an index's chunk table, for a corpus without labels."""
    rng = random.Random(seed)
    picked = rng.sample(range(len(chunks)), min(n, len(chunks)))
    out: list[QueryRow] = []
    for row in picked:
        c = chunks[row]
        title = (c.get("title") or "").strip()
        if title and c["chunk_index"] == 0:
            query, text = title, c["text"]
        else:
            parts = re.split(r"(?<=[.!?])\s+", c["text"].strip(), maxsplit=1)
            first, rest = parts[0], parts[1] if len(parts) > 1 else ""
            if len(first.split()) < 4 or len(rest.split()) < 8:
                continue
            query, text = first, rest
        out.append({"qid": c["chunk_id"], "query": query, "positives": [c["doc_id"]],
                    "positive_texts": [passage_text(title, text)]})
    return out


class MineNegatives:
    """map_batches callable: {qid, query, positives, positive_texts?} → one group row per positive:
    {qid, texts: [positive, negative × n]}. Loads the index version once per actor."""

    def __init__(self, storage_uri: str, index_version: int | None, cfg: Mapping[str, object], seed: int):
        """`cfg`: a RerankerDataConfig (`model_dump`)."""
        from app.index.search import Index, Searcher

        self.cfg = RerankerDataConfig.model_validate(cfg)
        self.searcher = Searcher(Index.load(Storage(storage_uri), index_version), SearchConfig())
        self.index = self.searcher.index
        self.by_doc: dict[str, int] = {}
        doc_ids, positions = self.index.chunks.column("doc_id"), self.index.chunks.column("chunk_index")
        for row, (doc, pos) in enumerate(zip(doc_ids, positions, strict=True)):
            if doc not in self.by_doc or pos < positions[self.by_doc[doc]]:  # a document's first chunk stands
                self.by_doc[doc] = row  # for it as a positive
        self.seed = seed

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, list[Any]]:
        queries = [str(q) for q in batch["query"]]
        vectors = self.searcher.embed(queries)
        out: dict[str, list[Any]] = {"qid": [], "query": [], "texts": []}
        k, n = self.cfg.mine_top_k, self.cfg.negatives
        given = batch.get("positive_texts")
        for i, (qid, query, vec) in enumerate(zip(batch["qid"], queries, vectors, strict=True)):
            positives = {str(d) for d in batch["positives"][i]}
            rows = [r for r, _ in self.index.lexical_search(query, k, None)]
            rows += [r for r, _ in self.index.dense_search(vec, k, None) if r not in rows]
            pool = [r for r in rows if self.index.chunks[r]["doc_id"] not in positives]
            rng = random.Random(f"{self.seed}/{qid}")
            while len(pool) < n:  # a tiny index: fill with random chunks of other documents
                r = rng.randrange(len(self.index.chunks))
                if self.index.chunks[r]["doc_id"] not in positives:
                    pool.append(r)
            if given is not None:
                texts = [str(t) for t in given[i]]
            else:
                texts = [self.passage(self.by_doc[d]) for d in sorted(positives) if d in self.by_doc]
            for text in texts:
                negatives = rng.sample(pool, n)
                out["qid"].append(str(qid))
                out["query"].append(query)
                out["texts"].append([text] + [self.passage(r) for r in negatives])
        return out

    def passage(self, row: int) -> str:
        """What the cross-encoder reads for the index's chunk `row`: the text serving and evaluation give it."""
        chunk = self.index.chunks[row]
        return passage_text(chunk["title"], chunk["text"])


class PairTokenize:
    """map_batches callable: {qid, texts} + the query → {input_ids, token_type_ids, tokens}: the group's
    (query, passage) pairs tokenized for the cross-encoder, truncated to max_length."""

    def __init__(self, model_dir: str, max_length: int):
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.max_length = max_length

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, list[Any]]:
        out: dict[str, list[Any]] = {"input_ids": [], "token_type_ids": [], "tokens": []}
        for query, texts in zip(batch["query"], batch["texts"], strict=True):
            enc = self.tokenizer([str(query)] * len(texts), [str(t) for t in texts], truncation="longest_first",
                                 max_length=self.max_length)
            out["input_ids"].append(enc["input_ids"])
            out["token_type_ids"].append(enc.get("token_type_ids") or [[0] * len(x) for x in enc["input_ids"]])
            out["tokens"].append(sum(len(x) for x in enc["input_ids"]))
        return out


def collate_groups(batch: dict[str, np.ndarray], pad_id: int) -> Batch:
    """(B groups × G pairs) → input_ids, token_type_ids, attention_mask of shape (B·G, T), padded to the longest."""
    import torch

    pairs = [list(p) for group in batch["input_ids"] for p in group]
    types = [list(p) for group in batch["token_type_ids"] for p in group]
    longest = max(len(p) for p in pairs)
    ids = torch.full((len(pairs), longest), pad_id, dtype=torch.long)
    tt = torch.zeros((len(pairs), longest), dtype=torch.long)
    mask = torch.zeros((len(pairs), longest), dtype=torch.long)
    for i, (p, t) in enumerate(zip(pairs, types, strict=True)):
        ids[i, : len(p)] = torch.as_tensor(p)
        tt[i, : len(t)] = torch.as_tensor(t)
        mask[i, : len(p)] = 1
    return {"input_ids": ids, "token_type_ids": tt, "attention_mask": mask, "group_size": len(batch["input_ids"][0])}
