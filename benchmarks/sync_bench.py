"""What a sync costs against rebuilding: a folder of documents changes by 1% (edits, deletions, additions), and
`ragline ingest --sync` brings its index up to date, side by side with the plain alternative, a full ingest and
index build of the changed folder into a fresh storage root.

    .venv/bin/python benchmarks/sync_bench.py [--documents 10000] [--change 0.01] [--repeats 3]

The folder holds one text file per document (a user's document store): SciFact's abstracts, then word-shuffled
copies of them (seeded) up to --documents, so no dedup drops any. Each repeat changes --change of the documents
(half edited, a quarter deleted, a quarter added), then runs the two sides in turns: the sync on the store that
holds the folder as it was, and the full rebuild of the folder as it is now in a fresh store; the rebuild's store
is the next repeat's starting point, so each side's time is measured three times. Both sides end with an index
version, and the two must hold the same chunks (ids) and documents. One local Ray, started by this script (start-up
not timed). Writes `benchmarks/results/sync-<date>-<cpu>.json` and rewrites the README table.
"""

from __future__ import annotations

import argparse
import datetime
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.readme_tables import publish  # noqa: E402

DEFAULT_CORPUS = ROOT.parent / "shared" / "datasets" / "scifact" / "corpus.jsonl"


def documents(corpus: Path, n: int) -> list[str]:
    """`n` texts: the corpus's, then word-shuffled copies of them."""
    base = [json.loads(line)["text"] for line in corpus.read_text(encoding="utf-8").splitlines() if line.strip()]
    base = [t for t in base if len(t.split()) >= 20]  # a document worth a chunk
    out = []
    for i in range(n):
        words = base[i % len(base)].split()
        if i >= len(base):
            random.Random(i).shuffle(words)
        out.append(" ".join(words))
    return out


def change(folder: Path, fraction: float, seed: int, texts: list[str]) -> dict[str, int]:
    """Edit half, delete a quarter and add a quarter of `fraction` of the folder's documents."""
    rng = random.Random(seed)
    files = sorted(folder.iterdir())
    n = max(4, int(len(files) * fraction))
    picked = rng.sample(files, n // 2 + n // 4)
    for f in picked[: n // 2]:
        f.write_text(f.read_text() + f" Revised in edit {seed}: the findings were replicated.")
    for f in picked[n // 2:]:
        f.unlink()
    for i in range(n // 4):
        words = rng.choice(texts).split()
        rng.shuffle(words)
        (folder / f"new-{seed}-{i:04d}.txt").write_text(" ".join(words))
    return {"edited": n // 2, "deleted": n // 4, "added": n // 4}


def timed_ingest(folder: Path, root: Path, cfg: Any, sync: bool) -> tuple[float, dict[str, Any]]:
    from app.indexing import run_ingest
    from app.storage import Storage

    t0 = time.perf_counter()
    report = run_ingest([str(folder)], cfg, Storage(str(root)), sync=sync)
    return time.perf_counter() - t0, dict(report)


def index_state(root: Path) -> tuple[list[str], int]:
    from app.index.search import Index
    from app.storage import Storage

    index = Index.load(Storage(str(root)))
    return sorted(index.chunks.column("chunk_id")), index.manifest.counts["documents"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="a BEIR corpus.jsonl")
    ap.add_argument("--documents", type=int, default=10_000)
    ap.add_argument("--change", type=float, default=0.01, help="fraction of the documents changed per repeat")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    import ray

    from app.config import load_config

    cfg = load_config(None, [])
    ray.init(address="local", include_dashboard=False, log_to_driver=False)
    texts = documents(args.corpus, args.documents)
    runs = []
    with tempfile.TemporaryDirectory(prefix="ragline-sync-") as tmp_s:
        tmp = Path(tmp_s)
        folder = tmp / "docs"
        folder.mkdir()
        for i, text in enumerate(texts):
            (folder / f"doc-{i:05d}.txt").write_text(text)
        store = tmp / "store-0"
        full_s, report = timed_ingest(folder, store, cfg, sync=False)
        print(f"initial full ingest: {len(texts)} documents, {report['chunks']} chunks in {full_s:.1f} s", flush=True)
        for r in range(args.repeats):
            changed = change(folder, args.change, r, texts)
            sync_s, synced = timed_ingest(folder, store, cfg, sync=True)
            rebuilt = tmp / f"store-{r + 1}"
            full_s, full = timed_ingest(folder, rebuilt, cfg, sync=False)
            assert synced["reconciled"] and full["reconciled"]
            assert index_state(store) == index_state(rebuilt), "the synced index differs from the rebuilt one"
            run = {"changed": changed, "sync_s": round(sync_s, 2), "full_s": round(full_s, 2),
                   "ratio": round(sync_s / full_s, 4), "files": synced["files"], "changes": synced["changes"],
                   "embeddings": synced["embeddings"], "embeddings_reused": synced["embeddings_reused"],
                   "full_chunks": full["chunks"]}
            runs.append(run)
            print(f"repeat {r + 1}: sync {sync_s:.1f} s ({synced['files']}), full rebuild {full_s:.1f} s: "
                  f"{run['ratio']:.3f} of it", flush=True)
            store = rebuilt  # the next change starts from the rebuilt store
    med = {k: round(statistics.median(x[k] for x in runs), 3) for k in ("sync_s", "full_s", "ratio")}
    print(f"median: sync {med['sync_s']:.1f} s, full rebuild {med['full_s']:.1f} s: the sync costs "
          f"{med['ratio']:.3f} of the rebuild ({1 / med['ratio']:.1f}x faster)")
    date = datetime.date.today().isoformat()
    command = " ".join(["python benchmarks/sync_bench.py", *(argv if argv is not None else sys.argv[1:])])
    publish("sync", {"date": date, "command": command, "documents": args.documents, "change": args.change,
                     "repeats": args.repeats, **med, "runs": runs})
    return 0


if __name__ == "__main__":
    sys.exit(main())
