"""What tests of several tiers share: paths, the shared datasets, the fixture corpus with planted problems, free
ports, MLflow history. Test modules import from here, never from another tier's package or conftest."""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from app.config import AppConfig
from app.storage import Storage

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
SAMPLE = ROOT / "deployments" / "jobs" / "data" / "sft-sample.jsonl"  # 41 instruction records
PLANTED = ("The great zebra migration crosses the Mara river every July, when hundreds of thousands of zebras "
           "and wildebeest leave the Serengeti for fresh grazing in the Maasai Mara.")


# The session's served graph (tests/conftest.py `served`). Small CPU shares, so an ingest or a training job still
# fits beside it on 2 cores. A 1 GiB KV cache is plenty for these answers, and two LLM replicas (a model swap) fit.
# The answer budget is long and no stop string ends it (the abort test starts a long answer; callers ask for short
# ones with max_tokens). Admission's budget is 20 s instead of half the 120 s deadline, so the burst test takes ~20 s.
GRAPH_DEPLOYMENT_OPTIONS = {
    "Ingress": {"ray_actor_options": {"num_cpus": 0.05}},
    "Retriever": {"ray_actor_options": {"num_cpus": 0.1}},
    "Reranker": {"ray_actor_options": {"num_cpus": 0.05}},
    "Generator": {"ray_actor_options": {"num_cpus": 0.05}},
}
GRAPH_OVERRIDES = ["serve.generator.max_new_tokens=400", "serve.generator.stop=[]",
                   "serve.generator.vllm.kv_cache_gib=1", "serve.poll_interval_s=1",
                   "serve.api.generation_budget_s=20"]


@dataclass(frozen=True)
class Served:
    url: str
    key: str  # the store's first API key
    storage: Storage  # on the session's S3 server
    cfg: AppConfig  # the config the corpus was ingested with
    overrides: list[str]  # the graph's config overrides (a redeploy extends them)
    tmp: Path  # the fixture's directory: corpus/, hr/, mlruns/, audit/
    sft: int  # the SFT version trained before deploying (unpromoted)
    ingest_run: str  # the IngestService run that published index version 1

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


def shared(*parts: str) -> Path:
    """A folder of ../shared (test datasets, the KubeRay CRDs). Absent, its tests skip on a developer's machine and
    fail in CI (`CI=true`, as CI services set it), where a skip would pass a run that never ran them."""
    path = SHARED.joinpath(*parts)
    if not path.is_dir():
        why = f"{path} is absent: ../shared is not checked out beside the project"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{why} (CI=true: the tests that need it must run)", pytrace=False)
        pytest.skip(why)
    return path


def shared_dataset(name: str) -> Path:
    return shared("datasets", name)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def topic_text(i: int, words: int = 120) -> str:
    """Distinct documents: each draws its words from its own vocabulary, so no two are near copies."""
    return f"Topic {i}. " + " ".join(f"term{i}x{j}" for j in range(words))


def lighthouses_pdf() -> bytes:
    """A two-page PDF for the served graph's corpus: the console shows its pages (tests/browser)."""
    from tests import document_files

    return document_files.text_pdf([["Lighthouse keepers log every ship that passes the cape."],
                                    ["Their log books since 1850 are kept in the harbour museum."]])


def write_corpus(d: Path) -> dict[str, int]:
    """Fixture corpus; returns the counts every ingest of it must report."""
    d.mkdir(parents=True, exist_ok=True)
    docs = [{"id": f"doc{i}", "title": f"Topic {i}", "text": topic_text(i)} for i in range(12)]
    docs.append({"id": "zebra", "title": "Zebra migration", "text": PLANTED})
    with (d / "main.jsonl").open("w") as f:
        for doc in docs:
            f.write(json.dumps(doc) + "\n")
        f.write(json.dumps({"id": "copy-of-doc0", "text": docs[0]["text"]}) + "\n")  # exact duplicate
        f.write("{this line is not json\n")  # unreadable record
    near = docs[3]["text"].split()
    near[50] = "changed"
    (d / "near-copy.txt").write_text(" ".join(near))  # near duplicate of doc3
    (d / "cafe.txt").write_bytes("Caf\xe9 cr\xe8me br\xfbl\xe9e is served cold in Paris.".encode("latin-1"))
    (d / "blank.md").write_text("  \n\t\n")  # empty after normalisation
    (d / "corrupt.parquet").write_bytes(b"PAR1 this is not a parquet file")  # unreadable file
    pq.write_table(pa.table({"id": ["pq1", "pq2"], "text": ["Columnar storage keeps each column together on disk.",
                                                            "Compression codecs such as zstd shrink parquet."]}),
                   d / "rows.parquet")
    (d / "page.html").write_text("<html><head><title>Snakes</title></head><body><nav>Home | About</nav><main>"
                                 "<p>Pythons are large constricting snakes found in Africa and Asia.</p></main>"
                                 "<footer>Copyright</footer></body></html>")
    # read: 15 jsonl lines + near + cafe + blank + 2 parquet rows + html + corrupt file = 22
    return {"read": 22, "kept": 17, "unreadable": 2, "too_large": 0, "outside_roots": 0, "empty": 1,
            "exact_duplicate": 1, "duplicate_id": 0, "near_duplicate": 1, "files": 7, "unreadable_files": 1}


HR_LEAVE = [  # distinct enough that deduplication keeps each
    "Annual leave policy: staff accrue twenty days of annual leave a year, booked through the people team.",
    "The annual leave policy lets unused leave carry over into the first quarter of the next year.",
    "Parental leave sits beside annual leave in the policy: sixteen weeks, paid in full.",
    "Annual leave requests need two weeks of notice under the leave policy; managers approve them.",
    "Sick leave does not count against annual leave; the policy asks for a note after three days.",
    "Part-time staff accrue annual leave pro rata, as the leave policy's table shows by contract hours.",
]


def write_hr_corpus(d: Path) -> int:
    """The `hr` collection's corpus: records with metadata (department, year, published). Six strong matches of
    "annual leave policy" in department hr, one weak one in legal (only "policy": a filtered search must still find
    it, far down the unfiltered ranking), one in finance. Returns the number of documents."""
    d.mkdir(parents=True, exist_ok=True)
    docs = [{"id": f"hr-{i}", "title": f"Leave policy {i}", "text": HR_LEAVE[i], "department": "hr",
             "year": 2019 + i, "published": f"{2019 + i}-03-0{i + 1}"} for i in range(6)]
    docs.append({"id": "legal-1", "title": "Vendor contracts", "department": "legal", "year": 2018,
                 "published": "2018-11-20", "text": "The legal team reviews vendor contracts before signature, "
                 "under the procurement policy."})
    docs.append({"id": "finance-1", "title": "Expenses", "department": "finance", "year": 2024,
                 "published": "2024-01-15", "text": "Expense reports must be filed within thirty days of travel."})
    with (d / "handbook.jsonl").open("w") as f:
        f.writelines(json.dumps(doc) + "\n" for doc in docs)
    return len(docs)


def write_beir_slice(source: Path, dest: Path, splits: dict[str, int], corpus_size: int) -> Path:
    """A small BEIR dataset cut from a large one, for tests that must finish in minutes: the first `n` judged
    queries of each split (in qrels order), every document they judge relevant, then the corpus's documents in
    file order as distractors up to `corpus_size`."""
    from app.qa.beir import load_qrels

    (dest / "qrels").mkdir(parents=True, exist_ok=True)
    wanted_docs: set[str] = set()
    wanted_queries: set[str] = set()
    for split, n in splits.items():
        qrels = dict(list(load_qrels(source / "qrels" / f"{split}.tsv").items())[:n])
        lines = [f"{q}\t{d}\t{score}\n" for q, docs in qrels.items() for d, score in docs.items()]
        (dest / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(lines))
        wanted_queries.update(qrels)
        wanted_docs.update(d for docs in qrels.values() for d in docs)
    assert len(wanted_docs) <= corpus_size, (len(wanted_docs), corpus_size)
    with (source / "corpus.jsonl").open(encoding="utf-8") as fh:
        lines = fh.readlines()
    relevant = [line for line in lines if str(json.loads(line)["_id"]) in wanted_docs]
    distractors = [line for line in lines if str(json.loads(line)["_id"]) not in wanted_docs]
    (dest / "corpus.jsonl").write_text("".join(relevant + distractors[:corpus_size - len(relevant)]),
                                       encoding="utf-8")
    with (source / "queries.jsonl").open(encoding="utf-8") as fh:
        queries = [line for line in fh if str(json.loads(line)["_id"]) in wanted_queries]
    (dest / "queries.jsonl").write_text("".join(queries), encoding="utf-8")
    return dest


def metric_history(record: dict, key: str) -> list[tuple[int, float]]:
    """(step, value) of one metric of a finished training run, read back from its MLflow run."""
    from app import tracking

    client = tracking.client(record["mlflow"]["uri"])
    return sorted((m.step, m.value) for m in client.get_metric_history(record["mlflow"]["run_id"], key))


def train_sft(storage: Storage, tiny_lm: str, name: str) -> int:
    """A short `ragline train sft` run of the tiny Llama; the version it published."""
    from app.train.config import TrainJobConfig
    from app.train.run import run_training

    record = run_training(TrainJobConfig.model_validate({
        "task": "sft", "name": name, "model": tiny_lm, "num_workers": 1, "batch_size": 2, "max_steps": 2,
        "sft": {"paths": [str(SAMPLE)], "max_length": 128}}), storage)
    assert record["state"] == "succeeded", record
    return int(record["model"]["version"])


def wait_for(pred, timeout: float, what: str, every: float = 0.5):
    """pred()'s first truthy value, polled every `every` s; fails the test after `timeout` s, naming `what`."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if got := pred():
            return got
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
