"""How ingest cost grows with the corpus: the Ragline pipeline (ingest + index build) at 1x, 4x and 16x a corpus,
time and peak memory per size, and the cost per document at each size against 1x (1.00 = linear).

    .venv/bin/python benchmarks/ingest_scale_bench.py [--base 500] [--scales 1 4 16] [--repeats 3]

The corpus at scale s is the first --base SciFact documents and s-1 copies of each with changed ids and their
words shuffled (seeded per copy): the same lengths, so the same tokens to embed, and text that no dedup drops,
since a copy that dedup removed would cost nothing and hide the growth. Each run ingests into a fresh storage
root on one local Ray started by this script (start-up not timed). Peak memory is the largest sum of resident
memory over this driver and every process of the Ray session (raylet, GCS, workers), sampled every second (RSS:
pages shared between processes count in each). Median of --repeats runs per size. Writes
`benchmarks/results/ingest_scale-<date>.json` and rewrites the README table.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.readme_tables import publish  # noqa: E402

DEFAULT_CORPUS = ROOT.parent / "shared" / "datasets" / "scifact" / "corpus.jsonl"


def scaled_corpus(corpus: Path, base: int, scale: int, out: Path) -> int:
    """`base` documents of `corpus` and scale-1 word-shuffled copies of each into `out`; returns the count."""
    docs = [json.loads(line) for line in corpus.read_text(encoding="utf-8").splitlines() if line.strip()][:base]
    with out.open("w", encoding="utf-8") as fh:
        for copy in range(scale):
            for i, doc in enumerate(docs):
                if copy:
                    words = doc["text"].split()
                    random.Random(copy * 1_000_003 + i).shuffle(words)
                    doc = {**doc, "_id": f"{doc['_id']}~{copy}", "text": " ".join(words)}
                fh.write(json.dumps(doc) + "\n")
    return scale * len(docs)


class PeakMemory:
    """Largest summed RSS (MB) of this process and the Ray session's processes while in the `with` block."""

    def __init__(self, period_s: float = 1.0):
        self.period_s, self.peak_mb = period_s, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            total = me.memory_info().rss
            for p in psutil.process_iter(["cmdline", "memory_info"]):
                # Ray's workers are "ray::<name>"; raylet, GCS and the rest run from the ray package
                cmd = " ".join(p.info["cmdline"] or [])
                if p.pid != me.pid and p.info["memory_info"] and ("ray::" in cmd or "/ray/" in cmd):
                    total += p.info["memory_info"].rss
            self.peak_mb = max(self.peak_mb, total / 2**20)
            self._stop.wait(self.period_s)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def one_run(corpus: Path, cfg: Any, root: Path) -> dict[str, Any]:
    from app.catalog import Catalog
    from app.index.build import build_index
    from app.ingest.pipeline import ingest_dataset
    from app.storage import Storage

    storage = Storage(str(root))
    with PeakMemory() as mem:
        t0 = time.perf_counter()
        report = ingest_dataset([str(corpus)], cfg, storage)
        t1 = time.perf_counter()
        build_index(storage, cfg, report.dataset_version)
        t2 = time.perf_counter()
    index = Catalog(storage).latest("indexes")
    assert index is not None and report.reconciled
    dense: Any = index.extra["dense"]  # app.index.build.DenseParams, as a dict
    return {"seconds": t2 - t0, "ingest_s": t1 - t0, "index_s": t2 - t1, "peak_mb": mem.peak_mb,
            "documents": report.documents.kept, "chunks": report.chunks, "dense": dense["type"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="jsonl corpus (BEIR corpus.jsonl)")
    ap.add_argument("--base", type=int, default=500, help="documents at scale 1")
    ap.add_argument("--scales", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    import ray

    from app.config import load_config

    cfg = load_config(None, [])
    ray.init(address="local", include_dashboard=False, log_to_driver=False)
    sizes = []
    with tempfile.TemporaryDirectory(prefix="ragline-scale-") as tmp_s:
        tmp = Path(tmp_s)
        for scale in args.scales:
            corpus = tmp / f"corpus-x{scale}.jsonl"
            n = scaled_corpus(args.corpus, args.base, scale, corpus)
            runs = []
            for r in range(args.repeats):
                run = one_run(corpus, cfg, tmp / f"x{scale}-{r}")
                assert run["documents"] == n, (run["documents"], n)  # nothing deduplicated away
                runs.append(run)
                print(f"x{scale} ({n} documents) run {r + 1}: {run['seconds']:.1f} s (ingest {run['ingest_s']:.1f}, "
                      f"index {run['index_s']:.1f}), peak {run['peak_mb']:.0f} MB", flush=True)
            med = {k: round(statistics.median(x[k] for x in runs), 2)
                   for k in ("seconds", "ingest_s", "index_s", "peak_mb")}
            sizes.append({"scale": scale, "documents": n, "chunks": runs[-1]["chunks"], "dense": runs[-1]["dense"],
                          **med, "ms_per_document": round(med["seconds"] / n * 1e3, 2),
                          "runs": [{k: round(v, 2) if isinstance(v, float) else v for k, v in x.items()}
                                   for x in runs]})
    first = sizes[0]
    for z in sizes:
        z["per_document_vs_first"] = round(z["ms_per_document"] / first["ms_per_document"], 3)
        z["memory_vs_first"] = round(z["peak_mb"] / first["peak_mb"], 3)
        print(f"x{z['scale']:<3} {z['documents']:>6} documents {z['seconds']:>7.1f} s  {z['ms_per_document']:>6.1f} "
              f"ms/document ({z['per_document_vs_first']:.2f}x of x{first['scale']})  peak {z['peak_mb']:.0f} MB")
    date = datetime.date.today().isoformat()
    command = " ".join(["python benchmarks/ingest_scale_bench.py", *(argv if argv is not None else sys.argv[1:])])
    result = {"date": date, "command": command, "base": args.base, "repeats": args.repeats, "cpus": os.cpu_count(),
              "sizes": sizes}
    publish("ingest_scale", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
