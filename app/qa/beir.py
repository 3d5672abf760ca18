"""Read a BEIR-format dataset directory: `queries.jsonl` and `qrels/<split>.tsv` (the corpus is ingested
as is). Shared by retrieval evaluation (`app.eval.retrieval`) and reranker training (`app.train.data`)."""

from __future__ import annotations

import json
from pathlib import Path

from app.errors import NotFound, UserError


def load_qrels(path: Path) -> dict[str, dict[str, int]]:
    """`query-id<TAB>corpus-id<TAB>score` lines after a header; CRLF tolerated. Only scores > 0 are kept."""
    qrels: dict[str, dict[str, int]] = {}
    with path.open(encoding="utf-8", newline="") as fh:
        for lineno, raw in enumerate(fh, start=1):
            line = raw.rstrip("\r\n")
            if lineno == 1 and line.lower().startswith("query-id"):
                continue
            if not line.strip():
                continue
            fields = line.split("\t")
            if len(fields) != 3:
                raise UserError(f"{path}:{lineno}: expected 3 tab-separated fields "
                                f"(query-id, corpus-id, score), got {len(fields)}: {line[:80]!r}")
            qid, doc_id, score_s = (f.strip() for f in fields)
            if not qid or not doc_id:
                raise UserError(f"{path}:{lineno}: empty query-id or corpus-id: {line[:80]!r}")
            try:
                score = int(score_s)
            except ValueError:
                raise UserError(f"{path}:{lineno}: score {score_s!r} is not an integer") from None
            if score > 0:
                qrels.setdefault(qid, {})[doc_id] = score
    return qrels


def load_queries(path: Path) -> dict[str, str]:
    queries: dict[str, str] = {}
    with path.open(encoding="utf-8") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                rec = json.loads(raw)
            except json.JSONDecodeError as e:
                raise UserError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
            if not isinstance(rec, dict) or "_id" not in rec or not isinstance(rec.get("text"), str):
                raise UserError(f"{path}:{lineno}: a query needs '_id' and a string 'text'")
            queries[str(rec["_id"])] = rec["text"]
    return queries


def load_beir(dataset_dir: Path, split: str) -> tuple[dict[str, str], dict[str, dict[str, int]]]:
    """(queries {qid: text}, qrels {qid: {doc_id: grade}}) for `split`, keeping only queries with a relevant
    (score > 0) judgement. Raises UserError (NotFound for a missing file) naming the missing file or the bad file
    and line."""
    dataset_dir = Path(dataset_dir)
    if not dataset_dir.is_dir():
        raise NotFound(f"BEIR dataset directory {dataset_dir} does not exist")
    queries_path = dataset_dir / "queries.jsonl"
    if not queries_path.is_file():
        raise NotFound(f"{queries_path} is missing (a BEIR dataset needs queries.jsonl)")
    qrels_path = dataset_dir / "qrels" / f"{split}.tsv"
    if not qrels_path.is_file():
        have = sorted(p.stem for p in (dataset_dir / "qrels").glob("*.tsv"))
        raise NotFound(f"{qrels_path} is missing: no split {split!r} in {dataset_dir} "
                       f"(splits: {', '.join(have) or 'none'})")
    qrels = load_qrels(qrels_path)
    all_queries = load_queries(queries_path)
    missing = sorted(set(qrels) - set(all_queries))
    if missing:
        raise UserError(f"{qrels_path} judges {len(missing)} queries not in {queries_path} "
                        f"(first: {', '.join(missing[:5])})")
    queries = {qid: all_queries[qid] for qid in qrels}
    return queries, qrels
