"""The sentence embedder compiled by OpenVINO: the same weights, tokenizer, mean pooling and normalisation as
sentence-transformers, a faster CPU runtime.

Measured on this project's CPU (AMD EPYC, AVX512-BF16), one thread, 256 SciFact abstracts: OpenVINO fp32 encodes
2.0x as fast as PyTorch fp32 and OpenVINO bf16 3.7x (4.2x on two threads over the whole SciFact corpus), at a
cosine of 0.99998 to PyTorch fp32 (PyTorch's own bf16 autocast: 2.6x, 0.998); one question takes 1.5 ms in
OpenVINO bf16 against 9.7 ms in PyTorch fp32. Dynamic int8 (onnxruntime, per-channel weights) reached 2.5-2.9x at
a cosine of 0.995, so int8 is not offered; on an AVX2-only EPYC it was 1.28x OpenVINO fp32 at a cosine of 0.987
(benchmarks/flops_bench.py --int8).

The model is converted from the loaded PyTorch module once per model revision and OpenVINO release, and kept as
OpenVINO IR under the local model cache (`RAGLINE_CACHE`); a file lock lets the embedding actors of one node
share the conversion. Once the IR is there, neither sentence-transformers nor PyTorch is loaded: the tokenizer is
the model's own `tokenizer.json` through the `tokenizers` library (what the fast Hugging Face tokenizer runs), so
an embedding actor is up in about a second instead of six (importing sentence-transformers alone took 5.8 s here),
which every ingest run pays per actor.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from app import envs
from app.catalog import Precision

if TYPE_CHECKING:
    import torch
    from sentence_transformers import SentenceTransformer
    from tokenizers import Tokenizer


def supported(model_dir: str) -> bool:
    """Whether the model is what this runtime reproduces: a transformer, mean pooling, optionally Normalize
    (read from the sentence-transformers files, without loading the model)."""
    modules_file, pooling_file = Path(model_dir) / "modules.json", Path(model_dir) / "1_Pooling" / "config.json"
    if not (modules_file.is_file() and pooling_file.is_file()):
        return False
    kinds = [m["type"].rsplit(".", 1)[-1] for m in json.loads(modules_file.read_text())]
    pooling = json.loads(pooling_file.read_text())
    mean_only = pooling.get("pooling_mode") == "mean" or (
        pooling.get("pooling_mode_mean_tokens") is True
        and not any(v for k, v in pooling.items() if k.startswith("pooling_mode_") and k != "pooling_mode_mean_tokens"))
    return kinds in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]) and mean_only


def _ir_path(revision: str) -> Path:
    import openvino as ov

    key = hashlib.sha256(f"{revision}|{ov.get_version()}".encode()).hexdigest()[:16]
    return Path(envs.cache_dir()) / "openvino" / key / "model.xml"


def pooled(st: SentenceTransformer) -> torch.nn.Module:
    """The transformer of `st` with its mean pooling and normalisation inside: (batch, seq) ids -> (batch, dim)
    unit vectors, what an exported graph computes."""
    import torch

    class Pooled(torch.nn.Module):
        def __init__(self, model: torch.nn.Module):
            super().__init__()
            self.model = model

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                    token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
            extra = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
            h = self.model(input_ids=input_ids, attention_mask=attention_mask,
                           **extra).last_hidden_state  # (batch, seq, dim)
            mask = attention_mask.unsqueeze(-1).to(h.dtype)
            mean = (h * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(mean, dim=-1)

    transformer = st[0].auto_model
    assert isinstance(transformer, torch.nn.Module)
    return Pooled(transformer)


def example_input(st: SentenceTransformer) -> dict[str, torch.Tensor]:
    """Two padded texts as `st`'s tokenizer gives them: what an export traces `pooled(st)` with."""
    return dict(st.tokenizer(["an example", "a second, longer example"], padding=True, return_tensors="pt"))


def _convert(st: SentenceTransformer, xml: Path) -> None:
    """PyTorch module -> OpenVINO IR with the pooling inside the graph (`pooled`)."""
    import openvino as ov
    import torch

    example = example_input(st)
    with warnings.catch_warnings():
        # The tracer warns that shape checks inside the attention mask code become constants: they compare a
        # mask's length with itself, which holds for every input shape.
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        ir = ov.convert_model(pooled(st).eval(), example_input=example)
    tmp = xml.parent.with_name(xml.parent.name + f".tmp{os.getpid()}")
    ov.save_model(ir, tmp / xml.name, compress_to_fp16=False)  # fp32 weights: precision is chosen at compile time
    shutil.rmtree(xml.parent, ignore_errors=True)
    tmp.rename(xml.parent)


def max_seq_length(model_dir: Path) -> int:
    """Tokens the model reads: sentence-transformers before 6 saved it in sentence_bert_config.json (the packaged
    MiniLM), 6 (what `ragline train embedder` exports with) as the tokenizer's model_max_length."""
    saved = json.loads((model_dir / "sentence_bert_config.json").read_text()).get("max_seq_length")
    return int(saved or json.loads((model_dir / "tokenizer_config.json").read_text())["model_max_length"])


def pooled_dim(model_dir: Path) -> int:
    """The vectors' dimension, from the pooling config as either sentence-transformers version writes it."""
    pooling = json.loads((model_dir / "1_Pooling" / "config.json").read_text())
    return int(pooling.get("word_embedding_dimension") or pooling["embedding_dimension"])


def _tokenizer(model_dir: Path) -> Tokenizer:
    """The model's fast tokenizer as sentence-transformers calls it: truncated to the model's max_seq_length,
    padded to the longest text of a batch."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tok.enable_truncation(max_seq_length(model_dir))
    pad = json.loads((model_dir / "tokenizer_config.json").read_text()).get("pad_token", "[PAD]")
    pad = pad["content"] if isinstance(pad, dict) else pad
    tok.enable_padding(pad_id=tok.token_to_id(pad), pad_token=pad)
    return tok


class OpenVinoEmbedder:
    """Texts in, (n, dim) unit-length float32 vectors out, as `SentenceTransformer.encode` would give them.
    `load` gives the PyTorch model, called only when the IR is not cached yet."""

    def __init__(self, model_dir: str, revision: str, precision: Precision, threads: int,
                 load: Callable[[], SentenceTransformer]):
        import openvino as ov
        from filelock import FileLock

        xml = _ir_path(revision)
        xml.parent.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(xml.parent) + ".lock"):
            if not xml.is_file():
                _convert(load(), xml)
        self.tokenizer = _tokenizer(Path(model_dir))
        self.dim = pooled_dim(Path(model_dir))
        self.model = ov.Core().compile_model(xml, "CPU", {
            "INFERENCE_PRECISION_HINT": "bf16" if precision == "bf16" else "f32",
            "INFERENCE_NUM_THREADS": threads, "NUM_STREAMS": 1,
            # OpenVINO pins its threads to the first cores by default, so two embedding actors on one node share
            # one core: measured 29.6 texts/s each pinned, 57.8 unpinned (two 1-thread processes, 2 cores).
            "ENABLE_CPU_PINNING": False})
        self.inputs = {port.get_any_name() for port in self.model.inputs}
        # Calling a CompiledModel reuses one infer request, which two threads must not share (the in-process
        # Searcher is called from threads); one encode at a time also keeps to the threads given above.
        self.lock = threading.Lock()

    def encode(self, texts: list[str], batch_size: int) -> np.ndarray:
        # Shortest first, so each batch pads to a near-equal length; the input order is restored.
        order = np.argsort([len(t) for t in texts], kind="stable")
        out = np.empty((len(texts), self.dim), np.float32)
        for start in range(0, len(texts), batch_size):
            idx = order[start : start + batch_size]
            enc = self.tokenizer.encode_batch([texts[i] for i in idx])
            feed = {"input_ids": [e.ids for e in enc], "attention_mask": [e.attention_mask for e in enc],
                    "token_type_ids": [e.type_ids for e in enc]}  # (batch, longest) each
            with self.lock:
                out[idx] = self.model({k: np.asarray(v, np.int64) for k, v in feed.items() if k in self.inputs})[0]
        return out
