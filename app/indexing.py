"""Documents to a searchable index version: an ingest run (`app.ingest`, which publishes a dataset version) chained
with an index build (`app.index`). Neither of those packages imports the other; this is where they meet, for the
IngestService, `ragline ingest --in-process`, Ray jobs, retrieval evaluation and reranker training."""

from __future__ import annotations

from pathlib import Path

from app.catalog import Catalog
from app.config import AppConfig
from app.errors import NotFound
from app.index.build import build_index as build
from app.ingest.pipeline import DeleteReport, IngestReport, IngestReportDict, OnStart, delete_documents, ingest_dataset
from app.storage import Storage


def run_ingest(paths: list[str], cfg: AppConfig, storage: Storage, run_id: str | None = None,
               build_index: bool = True, on_start: OnStart | None = None, sync: bool = False) -> IngestReportDict:
    """Ingest `paths` (with `sync`, also deleting what is gone from under them); returns the run report
    (`IngestReport.to_dict`). Publishes a dataset version when the corpus changed, then (`build_index`) an index
    version from it. Raises UserError for bad inputs and IngestError when too many files are unreadable."""
    report = ingest_dataset(paths, cfg, storage, run_id=run_id, on_start=on_start, sync_roots=sync)
    if build_index and report.published:
        report.index_version = build(storage, cfg, report.dataset_version).version
    return report.to_dict()


def delete(doc_ids: list[str], prefixes: list[str], cfg: AppConfig, storage: Storage, run_id: str | None = None,
           build_index: bool = True) -> DeleteReport:
    """Remove documents by id or source prefix in a new dataset version, then (`build_index`) index it: the graph
    stops serving them once it swaps to that index version."""
    report = delete_documents(storage, doc_ids, prefixes, run_id)
    if build_index:
        report.index_version = build(storage, cfg, report.dataset_version).version
    return report


def ensure_index(dataset_dir: Path, storage: Storage, cfg: AppConfig) -> IngestReport:
    """Ingest a BEIR dataset's corpus (idempotent: a second run adds nothing) and make sure the latest dataset
    version has an index; needs a connected Ray. Returns the ingest report."""
    corpus = dataset_dir / "corpus.jsonl"
    if not corpus.is_file():
        raise NotFound(f"{corpus} is missing (a BEIR dataset needs corpus.jsonl)")
    eval_cfg = cfg.model_copy(deep=True)
    # BEIR qrels refer to every corpus document by id: dedup must not drop any (scifact, for one, has
    # near-identical abstracts that are judged separately), or relevant documents become unretrievable.
    eval_cfg.ingest.dedup.exact = False
    eval_cfg.ingest.dedup.near = False
    report = ingest_dataset([str(corpus)], eval_cfg, storage)
    catalog = Catalog(storage)
    dataset, index = catalog.latest("datasets"), catalog.latest("indexes")
    if dataset is not None and (index is None or index.parent != dataset.version):
        # the version this run published, or one an earlier run published but did not get to index (interrupted)
        report.index_version = build(storage, eval_cfg, dataset.version).version
    return report
