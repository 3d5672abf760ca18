"""Retrieval evaluation and reranker training on a SciFact slice, through the `ragline` CLI as users run it: 30 dev
queries over 300 abstracts (the ones they judge relevant, then distractors), with floors that catch a broken
pipeline; then a smoke run of `train reranker` on 20 train queries' qrels for two steps, `models promote`, and
`eval retrieval --rerank`; `adapt` on a stored question set, refusing the candidates it trains; and its embedder
promoted by hand into a re-embedded index version. The full-corpus quality figures are measured by
benchmarks/quality.py and benchmarks/adapt_bench.py, not here."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT, shared_dataset, write_beir_slice

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def scifact_slice(tmp_path_factory) -> Path:
    return write_beir_slice(shared_dataset("scifact"), tmp_path_factory.mktemp("data") / "scifact-slice",
                            {"dev": 30, "train": 20}, corpus_size=300)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """One storage root for the module: the slice is ingested once (under eval/scifact-slice) and shared."""
    return tmp_path_factory.mktemp("scifact") / "s"


def ragline(root: Path, address: str, *args: str) -> dict:
    exe = Path(sys.executable).parent / "ragline"
    done = subprocess.run([str(exe), "--storage", str(root), "--address", address, *args, "--json"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_retrieval_eval_on_a_dev_slice(ray_cluster, scifact_slice, store):
    result = ragline(store, ray_cluster, "eval", "retrieval", "--dataset", str(scifact_slice), "--split", "dev")
    modes = result["modes"]
    assert result["queries"] == 30 and set(modes) == {"dense", "lexical", "hybrid"}
    # A pipeline that loses documents or embeddings, or mixes up ids, falls far below these (measured on this
    # slice: nDCG@10 dense 0.899, BM25 0.853, hybrid 0.877; recall@100 0.97-1.0); fusion must not be worse than
    # BM25 beyond noise.
    for mode in ("dense", "lexical", "hybrid"):
        assert modes[mode]["ndcg@10"] > 0.7, (mode, modes)
        assert modes[mode]["recall@100"] > 0.9, (mode, modes)
    assert modes["hybrid"]["ndcg@10"] >= modes["lexical"]["ndcg@10"] - 0.02, modes


def test_reranker_smoke_trained_on_the_train_qrels_promoted_and_evaluated(ray_cluster, scifact_slice, store):
    """A smoke test of the path (two steps teach a cross-encoder little: its quality is benchmarks/quality.py's):
    the job reads the qrels it was given, the promoted version is the one evaluated, and its scores, not the
    retriever's order, rank the "+ce" lists."""
    overrides = [f"reranker.beir_dir={scifact_slice}", "name=slice-reranker", "max_steps=2", "checkpoint_every=2",
                 "batch_size=4", "reranker.max_length=128"]
    run = ragline(store, ray_cluster, "train", "reranker", "--in-process", "--config",
                  str(ROOT / "deployments" / "jobs" / "reranker.yaml"), *(a for o in overrides for a in ("--set", o)))
    assert run["state"] == "succeeded" and run["model"]["name"] == "reranker", run
    counts = run["counts"]
    assert counts["queries"] == 20 and counts["kept"] + sum(counts["dropped"].values()) == counts["records"]
    assert counts["kept"] == counts["records"]  # every positive of the slice's train queries is in its corpus
    ragline(store, ray_cluster, "models", "promote", "reranker", str(run["model"]["version"]))
    result = ragline(store, ray_cluster, "eval", "retrieval", "--dataset", str(scifact_slice), "--split", "dev",
                     "--rerank", "--rerank-top", "10")
    modes = result["modes"]
    assert result["reranker"] == f"reranker:v{run['model']['version']}" and result["retriever_weight"] == 1.0
    assert result["rerank_top"] == 10
    # the cross-encoder's order is its own: were its scores ignored (or constant), "+ce" would be the retriever's
    # order and score the same in every mode
    assert any(modes[f"{m}+ce"]["ndcg@10"] != modes[m]["ndcg@10"] for m in ("dense", "lexical", "hybrid")), modes
    for mode in ("dense", "lexical", "hybrid"):
        # two steps teach the cross-encoder little (measured alone: 0.52-0.58); the fused order still leans on the
        # retriever's (measured 0.77-0.80 against 0.85-0.90 unreranked)
        assert modes[f"{mode}+rerank"]["ndcg@10"] > 0.5 * modes[mode]["ndcg@10"], (mode, modes)


def stored_questions(storage, beir: Path, heldout: float, seed: int) -> str:
    """A synthesis run stored as `ragline adapt questions` stores one, of the slice's own claims (its dev and train
    queries, each asked of the first chunk of a document it judges relevant), held out by adapt's own rule: what
    the writer hands the roles, without starting an engine (test_multinode.py runs the writer). Its id."""
    from app.adapt.questions import held_out
    from app.adapt.synthesize import RUNS, SynthesisCounts, SyntheticSet
    from app.catalog import Catalog
    from app.index.build import load_chunks
    from app.qa.beir import load_qrels, load_queries

    chunks = load_chunks(storage, Catalog(storage).latest("datasets")).to_pylist()
    first_chunk: dict[str, str] = {}
    for c in sorted(chunks, key=lambda c: c["chunk_id"]):
        first_chunk.setdefault(c["doc_id"], c["chunk_id"])
    claims = load_queries(beir / "queries.jsonl")
    sets: dict[str, list[dict]] = {"train": [], "heldout": [], "rejected": []}
    for split in ("dev", "train"):
        for qid, docs in load_qrels(beir / "qrels" / f"{split}.tsv").items():
            doc = min(docs)
            chunk = first_chunk[doc]  # every judged document is in the slice
            row = {"id": f"{chunk}#{qid}", "question": claims[qid], "doc_id": doc, "chunk_id": chunk, "rank": 1,
                   "answers": []}
            sets["heldout" if held_out(chunk, heldout, seed) else "train"].append(row)
    run = "adapt-scifact-claims"
    files = {name: f"{RUNS}/{run}/{name}.jsonl" for name in sets}
    for name, rel in files.items():
        storage.write_bytes(rel, "".join(json.dumps(r) + "\n" for r in sets[name]).encode())
    n = {name: len(rows) for name, rows in sets.items()}
    storage.write_json(f"{RUNS}/{run}/questions.json", SyntheticSet(
        run_id=run, created_at="2026-12-03T00:00:00Z", index_version=Catalog(storage).latest("indexes").version,
        writer="scifact claims", counts=SynthesisCounts(sampled=n["train"] + n["heldout"], rejected={}, dropped=0,
                                                        train=n["train"], heldout=n["heldout"]),
        write_s=0, round_trip_s=0, **{f"{name}_file": rel for name, rel in files.items()}).model_dump())
    return run


def test_adapt_on_a_stored_question_set_refuses_a_worse_embedder_and_reranker(ray_cluster, scifact_slice, store):
    """`ragline adapt --questions RUN` (no labels needed: the run could be the writer's; here it holds the slice's
    claims): one training step each makes a reranker and an embedder (taught the reranker's margins) that cannot
    beat what is served on the held-out questions, and the gate refuses both: nothing is promoted, the embedder's
    staged index version is discarded, and the report is listed with its run."""
    from app.adapt.run import adapt_runs
    from app.catalog import Catalog
    from app.storage import Storage

    corpus = store / "eval" / "scifact-slice"  # ingested by the tests above; adapt works on the index alone
    storage = Storage(str(corpus))
    indexes = Catalog(storage).latest("indexes")
    run = stored_questions(storage, scifact_slice, heldout=0.4, seed=0)
    overrides = ['adapt.train={"max_steps": 1, "num_workers": 1, '
                 '"batch_size": 4, "reranker": {"max_length": 96}}', "adapt.reranker_name=adapted",
                 # one undamped step (no warm-up) moves the vectors enough for the next test to see
                 'adapt.embedder_train={"max_steps": 1, "num_workers": 1, "batch_size": 4, "lr": 1e-4, '
                 '"warmup_steps": 0, "embedder": {"max_length": 96}}', "adapt.embedder_name=adapted-embedder",
                 "adapt.teacher=catalog:adapted:1"]  # the reranker trained just before (auto: only a promoted one)
    report = ragline(corpus, ray_cluster, *(a for o in overrides for a in ("--set", o)), "adapt", "--questions", run)
    n = report["questions"]["counts"]
    assert report["questions"]["run_id"] == run and n["train"] > 0 and n["heldout"] > 0, n
    reranker, embedder = report["roles"]
    assert (reranker["role"], reranker["served"], reranker["candidate"]) == ("reranker", "none", "adapted:v1")
    # GPL: the reranker candidate, named as the teacher, teaches the embedder its margins
    assert (embedder["role"], embedder["served"], embedder["candidate"], embedder["teacher"]) == (
        "embedder", "all-MiniLM-L6-v2", "adapted-embedder:v1", "catalog:adapted:1")
    for role in (embedder, reranker):
        c = role["comparison"]
        assert c["n"] == n["heldout"] and c["low"] <= 0 and role["decision"] == "refused", role
    catalog = Catalog(storage)
    assert catalog.promoted("adapted") is None and catalog.promoted("adapted-embedder") is None  # what is served stays
    assert catalog.get_model("adapted", 1).task == "reranker"
    assert catalog.get_model("adapted-embedder", 1).task == "embedder"
    assert catalog.latest("indexes") == indexes  # the candidate index was staged, judged, and not published
    assert len(storage.listdir("indexes")) == 2 * indexes.version  # its files are gone: a version's dir and files
    (listed,) = adapt_runs(storage)  # what `ragline status` lists
    assert listed.questions.run_id == run and listed.report
    assert [r.decision for r in listed.report.roles] == ["refused", "refused"]


def test_a_trained_embedder_promoted_re_embeds_the_index_and_stays_through_rebuilds(ray_cluster, scifact_slice,
                                                                                      store):
    """The embedder `adapt` trained above (on questions written from the slice's own index, taught by the reranker
    adapt trained: no labels) and refused, promoted by hand (`models promote`): the collection is re-embedded into
    a new index version that a Searcher embeds questions with, a plain rebuild keeps that embedder and reuses every
    vector, and naming the packaged model goes back to the dataset's own vectors."""
    import faiss
    import numpy as np

    from app.catalog import Catalog
    from app.config import AppConfig, SearchConfig
    from app.index.build import build_index
    from app.index.search import Index, Searcher
    from app.models import embedder
    from app.storage import Storage
    from app.train.run import training_runs

    corpus = store / "eval" / "scifact-slice"
    storage = Storage(str(corpus))
    before = Catalog(storage).latest("indexes")
    assert before is not None and before.embedder.name == "all-MiniLM-L6-v2"
    manifest = Catalog(storage).get_model("adapted-embedder", 1)
    run = training_runs(storage).load(manifest.run)
    assert run["state"] == "succeeded" and run["task"] == "embedder", run
    counts = run["counts"]
    assert counts["kept"] + sum(counts["dropped"].values()) == counts["records"] and counts["group_size"] == 4
    assert (run["config"]["embedder"]["loss"], run["config"]["embedder"]["teacher"]) == ("margin_mse",
                                                                                         "catalog:adapted:1")

    promoted = ragline(corpus, ray_cluster, "models", "promote", "adapted-embedder", "1")
    assert promoted["collection"] == "default" and promoted["index_version"] == before.version + 1, promoted
    index = Index.load(storage)
    assert index.manifest.embedder.name == "catalog:adapted-embedder:1" and index.manifest.embedder.files
    done = index.manifest.extra["reembedded"]
    assert (done["embedded"], done["reused"], sum(done["rows_by_node"].values())) == (len(index.chunks), 0,
                                                                                      len(index.chunks)), done
    # the same chunks, new vectors: a step moves them, but not far
    old = Index.load(storage, before.version)
    assert old.chunks.column("chunk_id") == index.chunks.column("chunk_id")
    a, b = (faiss.rev_swig_ptr(i.dense.get_xb(), i.dense.ntotal * i.dense.d).reshape(i.dense.ntotal, -1)
            for i in (old, index))
    cosines = np.sum(a * b, axis=1)
    assert cosines.min() > 0.5 and cosines.mean() < 0.9999, cosines
    searcher = Searcher(index, SearchConfig())  # as the Retriever does: questions embedded by the index's embedder
    assert not np.allclose(searcher.embed(["cancer cells"]), Searcher(old, SearchConfig()).embed(["cancer cells"]))
    assert len(searcher.search("cancer cells", "dense", 3)) == 3

    rebuilt = build_index(storage, AppConfig())  # as a later ingest does
    assert rebuilt.embedder.name == "catalog:adapted-embedder:1" and rebuilt.version == index.version + 1
    assert rebuilt.extra["reembedded"]["reused"] == len(index.chunks)  # nothing embedded again
    base = index.manifest.embedder  # the packaged model again (`index build --embedder all-MiniLM-L6-v2`)
    back = build_index(storage, AppConfig(), None, embedder.target("all-MiniLM-L6-v2", storage,
                                                                   embedder.Variant(base.runtime, base.precision)))
    assert back.embedder.name == "all-MiniLM-L6-v2" and "reembedded" not in back.extra
