"""The round trip (InPars, Promptagator): a synthetic question is kept only when the current retriever finds the
document it was written from. A question the retriever cannot lead back to its passage is more often vague or
wrong than hard, and training on it teaches noise."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import numpy as np

from app.config import SearchConfig
from app.eval.metrics import collapse_to_docs
from app.storage import Storage


def doc_rank(doc_id: str, ranked_doc_ids: list[str]) -> int:
    """1-based rank of `doc_id` among documents (chunk hits collapsed), 0 when absent."""
    docs = collapse_to_docs(ranked_doc_ids)
    return docs.index(doc_id) + 1 if doc_id in docs else 0


class RoundTrip:
    """map_batches callable: rows with `question` (None: nothing to search) and `doc_id` in, a `rank` column
    added (0: not in the top `k` documents, or no question). Loads the index version once per actor."""

    def __init__(self, storage_uri: str, index_version: int, search: Mapping[str, object],
                 mode: Literal["dense", "lexical", "hybrid"], k: int):
        from app.index.search import Index, Searcher

        self.searcher = Searcher(Index.load(Storage(storage_uri), index_version), SearchConfig.model_validate(search))
        self.mode, self.k = mode, k

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        asked = [i for i, q in enumerate(batch["question"]) if isinstance(q, str) and q]  # NaN: none (pandas)
        ranks = np.zeros(len(batch["question"]), dtype=np.int64)
        if asked:
            questions = [str(batch["question"][i]) for i in asked]
            vectors = None if self.mode == "lexical" else self.searcher.embed(questions)
            index, cfg = self.searcher.index, self.searcher.cfg
            for j, i in enumerate(asked):
                # three chunks a document: enough chunk hits to fill k documents
                hits = index.search(questions[j], None if vectors is None else vectors[j], self.mode, 3 * self.k, cfg)
                rank = doc_rank(str(batch["doc_id"][i]), [h.doc_id for h in hits])
                ranks[i] = rank if rank <= self.k else 0
        return {**batch, "rank": ranks}
