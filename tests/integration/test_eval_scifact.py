"""Retrieval quality on SciFact dev through `ragline eval retrieval` (the whole corpus: minutes on 2 cores)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, shared_dataset

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_scifact_dev_retrieval_quality(ray_cluster, tmp_path):
    dataset = shared_dataset("scifact")
    exe = Path(sys.executable).parent / "ragline"
    done = subprocess.run([str(exe), "--storage", str(tmp_path / "s"), "--address", ray_cluster, "eval",
                           "retrieval", "--dataset", str(dataset), "--split", "dev", "--json"],
                          capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    out = ROOT / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "scifact-dev-retrieval.json").write_text(json.dumps(result, indent=2))
    modes = result["modes"]
    assert result["queries"] == 210
    # Published MiniLM / BM25 figures on SciFact are ≈0.65 nDCG@10; far below means the pipeline lost documents
    # or embeddings. Fusion must not be worse than either ranking alone by more than noise.
    for mode in ("dense", "lexical", "hybrid"):
        assert modes[mode]["ndcg@10"] > 0.6, (mode, modes)
        assert modes[mode]["recall@100"] > 0.85, (mode, modes)
    assert modes["hybrid"]["ndcg@10"] >= max(modes["dense"]["ndcg@10"], modes["lexical"]["ndcg@10"]) - 0.02
