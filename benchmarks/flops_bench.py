"""What this CPU's arithmetic allows the embedder, and how much of it each way of embedding uses.

    .venv/bin/python benchmarks/flops_bench.py [--chunks 512] [--repeats 3] [--int8] [--out FILE]

Ingest's time is the embedder's matrix products (its embed stage is 88-95% of a run), so how much faster than a plain
script the pipeline can be is bounded by the CPU: if the plain script already runs the model near the CPU's peak, a
pipeline computing in the same precision on the same cores cannot pass it by much. This measures, in one process:

1. Peak: a float32 matrix product of MiniLM's feed-forward shape (4,096 tokens x 384 -> 1,536), on one thread, in
   PyTorch (what sentence-transformers runs) and in OpenVINO (what Ragline's embedding actors run): GFLOP/s.
2. Each way of embedding `--chunks` SciFact chunks (the pipeline's chunker: 224 tokens, 32 shared; "title\\nchunk")
   with all-MiniLM-L6-v2, each side `--repeats` times in turn, medians: the plain script (sentence-transformers fp32
   on every thread), PyTorch fp32 on one thread, OpenVINO fp32 on one thread (one ingest actor), OpenVINO bf16 on one
   thread where bf16 is native, and with `--int8` two int8 ways on one thread: OpenVINO's (NNCF's post-training
   quantization, calibrated on 256 other chunks) and ONNX Runtime's dynamic quantization (int8 weights per output
   channel, activations quantized per batch; MLAS's u8s8 kernels, which run on AVX2 without VNNI). NNCF and ONNX
   Runtime are installed into benchmarks/.nncf and benchmarks/.ort on first use, never Ragline dependencies. For
   each: texts/s, the model's useful GFLOP/s (its matrix products on the real, unpadded tokens), that against the
   one-thread peak (per thread), the cosine of its vectors to PyTorch fp32's, and for OpenVINO the kernels its
   FullyConnected nodes ran (its own profiling counters).
3. The ceiling: the most an fp32 pipeline on all cores could gain over the plain script, if each core ran at the
   peak of step 1 (the higher of the two; held to a lower level, PyTorch's, the one the hold reaches): cores x peak /
   the plain script's GFLOP/s. Ragline's ingest goal is 1.8x on every CPU.

Held to a lower level (docs/guides/configuration.md, "Measuring another CPU"), the results record which of the
hold's variables were set, and OpenVINO's rows show what it ran: in OpenVINO's release wheels the matrix products it
hands to MLAS keep this CPU's own kernels (only oneDNN's are held), so those rows are faster than an AVX2 machine's
would be.

Writes benchmarks/results/flops-<date>-<cpu level>-<cpu>.json and the docs' table (or `--out FILE` alone).
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import readme_tables  # noqa: E402

CORPUS = ROOT.parent / "shared" / "datasets" / "scifact" / "corpus.jsonl"
NNCF_DIR = ROOT / "benchmarks" / ".nncf"
NNCF = ["nncf==3.4.0", "tabulate"]  # the rest of what it imports (numpy, scipy, networkx...) is in Ragline's env
ORT_DIR = ROOT / "benchmarks" / ".ort"
ORT = ["onnxruntime==1.32.0", "onnx==1.23.2", "flatbuffers", "ml_dtypes"]  # protobuf, sympy: in Ragline's env
SHAPE = (4096, 384, 1536)  # tokens, hidden, intermediate: MiniLM-L6's feed-forward product


def chunks(n: int, skip: int) -> list[str]:
    """`n` chunks as the pipeline embeds them, from SciFact's documents after the first `skip` chunks."""
    from app.ingest.chunk import chunk_text
    from app.models import embedder

    tok = embedder.load_tokenizer("all-MiniLM-L6-v2")
    out: list[str] = []
    with CORPUS.open(encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            text, title = rec.get("text") or "", rec.get("title") or ""
            for span in chunk_text(text, tok, 224, 32):
                out.append(embedder.embed_text(title, text[span.start_char:span.end_char], True))
            if len(out) >= skip + n:
                return out[skip:skip + n]
    return out[skip:]


def model_flops(texts: list[str]) -> float:
    """The matrix products' floating-point operations for embedding `texts` (their real tokens, specials
    included, at most 256 each): per layer and token, Q, K, V, output (4 d^2) and the feed-forward pair (2 d f)
    multiply-adds, plus attention's two n x n x d products."""
    from app.models import embedder

    cfg = json.loads((Path(embedder.resolve("all-MiniLM-L6-v2")) / "config.json").read_text())
    d, f, layers = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    tok = embedder.load_tokenizer("all-MiniLM-L6-v2")
    total = 0.0
    for text in texts:
        n = min(256, len(tok.encode(text).ids))
        total += layers * (2 * n * (4 * d * d + 2 * d * f) + 4 * n * n * d)
    return total


def peak() -> dict[str, float]:
    """One thread's float32 GFLOP/s on SHAPE: PyTorch's linear and OpenVINO's FullyConnected."""
    import numpy as np
    import openvino as ov
    import openvino.opset13 as ops
    import torch

    m, k, n = SHAPE
    flops = 2 * m * k * n
    x, w = torch.randn(m, k), torch.randn(n, k)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    torch_s = _best(lambda: torch.nn.functional.linear(x, w))
    torch.set_num_threads(threads)
    # Dynamic shapes, as the embedder's model has them: OpenVINO picks its kernel by them.
    p = ops.parameter(ov.PartialShape([-1, k]), ov.Type.f32)
    fc = ov.Core().compile_model(ov.Model([ops.matmul(p, ops.constant(w.numpy().T.copy()), False, False)], [p]),
                                 "CPU", _ov_config(1, "f32"))
    xn = x.numpy().astype(np.float32)
    ov_s = _best(lambda: fc(xn))
    return {"torch": round(flops / torch_s / 1e9, 1), "openvino": round(flops / ov_s / 1e9, 1)}


def _best(fn: Any, n: int = 10) -> float:
    """Seconds per call: the best of three rounds of `n` calls, after three warm-up calls."""
    for _ in range(3):
        fn()
    rounds = []
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        rounds.append((time.perf_counter() - t0) / n)
    return min(rounds)


def _ov_config(threads: int, precision: str) -> dict[str, Any]:
    return {"INFERENCE_PRECISION_HINT": precision, "INFERENCE_NUM_THREADS": threads, "NUM_STREAMS": 1,
            "ENABLE_CPU_PINNING": False}


def fc_kernels(model: Any, precision: str, example: dict[str, Any]) -> dict[str, int]:
    """How many FullyConnected nodes of `model` (an ov.Model) ran on which kernel (gemm_mlas_f32,
    brgemm_avx2_f32...) in one inference, by OpenVINO's own profiling counters."""
    import openvino as ov

    request = ov.Core().compile_model(model, "CPU", {**_ov_config(1, precision), "PERF_COUNT": True}) \
        .create_infer_request()
    request.infer(example)
    return dict(collections.Counter(i.exec_type for i in request.get_profiling_info()
                                    if i.node_type == "FullyConnected"))


def installed(target: Path, requirements: list[str]) -> None:
    """Puts `target`, with `requirements` installed into it (pip --target, once), on sys.path: for `--int8`."""
    stamp = target / "requirements.json"
    if not (stamp.is_file() and json.loads(stamp.read_text()) == requirements):
        print(f"installing {' '.join(requirements)} into {target} (once)", flush=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--upgrade", "--target",
                        str(target), *requirements], check=True)
        stamp.write_text(json.dumps(requirements))
    sys.path.insert(0, str(target))


def ort_int8(st: Any, emb: Any, where: Path) -> Any:
    """emb (an OpenVinoEmbedder) computing with ONNX Runtime's dynamically quantized int8 model of `st`, on one
    thread: the same tokenizer, batching and pooling; only the model call differs."""
    import warnings

    import onnxruntime as ort
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from app.models import openvino_embedder

    where.mkdir(parents=True, exist_ok=True)
    fp32, int8 = where / "model.onnx", where / "model-int8.onnx"
    names = ["input_ids", "attention_mask", "token_type_ids"]
    example = openvino_embedder.example_input(st)
    with warnings.catch_warnings():
        # the tracer's constant-shape warnings (as in openvino_embedder._convert) and the TorchScript exporter's
        # deprecation notice
        warnings.simplefilter("ignore")
        torch.onnx.export(openvino_embedder.pooled(st).eval(), tuple(example[k] for k in names), str(fp32),
                          input_names=names, output_names=["embedding"], opset_version=17, dynamo=False,
                          dynamic_axes={**{k: {0: "batch", 1: "seq"} for k in names}, "embedding": {0: "batch"}})
    quantize_dynamic(str(fp32), str(int8), weight_type=QuantType.QInt8, per_channel=True)
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = 1, 1
    session = ort.InferenceSession(str(int8), options, providers=["CPUExecutionProvider"])
    emb.inputs = {i.name for i in session.get_inputs()}
    emb.model = lambda feed: session.run(None, feed)
    return emb


class Side:
    """One way of embedding: `encode(texts)` -> (n, 384) unit vectors, on `threads` threads."""

    def __init__(self, name: str, threads: int, encode: Any, kernels: dict[str, int] | None = None):
        self.name, self.threads, self.encode, self.kernels = name, threads, encode, kernels
        self.seconds: list[float] = []


def sides(cores: int, int8: bool, calibration: list[str]) -> list[Side]:
    import numpy as np
    import openvino as ov
    import torch

    from app import hardware
    from app.models import embedder, openvino_embedder

    spec = "all-MiniLM-L6-v2"
    st = embedder.load(spec)

    def torch_side(name: str, threads: int) -> Side:
        def encode(texts: list[str]) -> np.ndarray:
            torch.set_num_threads(threads)
            return st.encode(texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=True)

        return Side(name, threads, encode)

    out = [torch_side("plain script: PyTorch fp32, all threads", cores), torch_side("PyTorch fp32", 1)]
    fp32 = embedder.Encoder(spec, "fp32", runtime="openvino", threads=1)
    assert fp32.openvino is not None
    ir = openvino_embedder._ir_path(embedder.revision(spec))
    example = _feed(fp32.openvino, calibration[:32])

    def ov_side(name: str, emb: Any, model: Any, precision: str) -> Side:
        return Side(name, 1, lambda texts: emb.encode(texts, 32), fc_kernels(model, precision, example))

    core = ov.Core()
    out.append(ov_side("OpenVINO fp32 (an ingest actor)", fp32.openvino, core.read_model(ir), "f32"))
    if hardware.detect().cpu_bf16:
        bf16 = embedder.Encoder(spec, "bf16", runtime="openvino", threads=1)
        out.append(ov_side("OpenVINO bf16", bf16.openvino, core.read_model(ir), "bf16"))
    if int8:
        installed(NNCF_DIR, NNCF)
        import nncf

        cal = _feed_batches(fp32.openvino, calibration)
        quantized = nncf.quantize(core.read_model(ir), nncf.Dataset(cal), model_type=nncf.ModelType.TRANSFORMER,
                                  subset_size=len(cal))
        q = embedder.Encoder(spec, "fp32", runtime="openvino", threads=1).openvino
        assert q is not None
        q.model = core.compile_model(quantized, "CPU", _ov_config(1, "f32"))
        out.append(ov_side("OpenVINO int8 (NNCF)", q, quantized, "f32"))
        installed(ORT_DIR, ORT)
        o = ort_int8(st, embedder.Encoder(spec, "fp32", runtime="openvino", threads=1).openvino, ORT_DIR / "model")
        out.append(Side("ONNX Runtime int8 (dynamic)", 1, lambda texts: o.encode(texts, 32)))
    return out


def _feed(emb: Any, texts: list[str]) -> dict[str, Any]:
    """OpenVINO's inputs for `texts` as the embedder makes them: (batch, longest) int64 each."""
    import numpy as np

    enc = emb.tokenizer.encode_batch(texts)
    feed = {"input_ids": [e.ids for e in enc], "attention_mask": [e.attention_mask for e in enc],
            "token_type_ids": [e.type_ids for e in enc]}
    return {k: np.asarray(v, np.int64) for k, v in feed.items() if k in emb.inputs}


def _feed_batches(emb: Any, texts: list[str]) -> list[dict[str, Any]]:
    ordered = sorted(texts, key=len)
    return [_feed(emb, ordered[i:i + 8]) for i in range(0, len(ordered), 8)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chunks", type=int, default=512, help="SciFact chunks embedded by each side (512)")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each side, in turn; medians (3)")
    ap.add_argument("--int8", action="store_true", help="add OpenVINO's and ONNX Runtime's int8 (installs NNCF and "
                    "ONNX Runtime into benchmarks/.nncf and benchmarks/.ort)")
    ap.add_argument("--out", type=Path, help="write only this results file (no docs table)")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import numpy as np

    from app import hardware

    hw = hardware.detect()
    texts, calibration = chunks(args.chunks, 0), chunks(256, args.chunks)
    gflop = model_flops(texts) / 1e9
    top = peak()
    print(f"{hw.summary()}; one-thread fp32 peak: PyTorch {top['torch']} GFLOP/s, OpenVINO {top['openvino']}; "
          f"{len(texts)} chunks, {gflop:.1f} GFLOP", flush=True)
    runs = sides(hw.cores, args.int8, calibration)
    vectors: dict[str, np.ndarray] = {}
    for _ in range(args.repeats):
        for side in runs:
            t0 = time.perf_counter()
            vectors[side.name] = side.encode(texts)
            side.seconds.append(time.perf_counter() - t0)
    # Held to a lower level, only PyTorch's peak is the held one (MKL obeys its cap; OpenVINO's MLAS reads none).
    best_peak = top["torch"] if hw.forced else max(top.values())
    ref = vectors[runs[0].name]
    rows: dict[str, Any] = {}
    for side in runs:
        s = statistics.median(side.seconds)
        cos = (vectors[side.name] * ref).sum(axis=1)
        rows[side.name] = {"threads": side.threads, "seconds": [round(x, 3) for x in side.seconds],
                           "texts_per_s": round(len(texts) / s, 1), "gflop_per_s": round(gflop / s, 1),
                           "of_peak": round(gflop / s / (best_peak * side.threads), 3),
                           "cosine_min": round(float(cos.min()), 4), "cosine_mean": round(float(cos.mean()), 5),
                           "fc_kernels": side.kernels}
        print(f"{side.name:42} {rows[side.name]['texts_per_s']:7.1f} texts/s {rows[side.name]['gflop_per_s']:6.1f} "
              f"GFLOP/s {rows[side.name]['of_peak']:.0%} of peak  cos >= {rows[side.name]['cosine_min']:.4f}  "
              f"{side.kernels or ''}", flush=True)
    plain = rows[runs[0].name]["gflop_per_s"]
    ceiling = round(hw.cores * best_peak / plain, 2)
    print(f"fp32 ceiling over the plain script on {hw.cores} cores: {ceiling}x (ingest's goal 1.8x)")
    result = {"date": datetime.date.today().isoformat(),
              "command": "python benchmarks/flops_bench.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "chunks": len(texts), "gflop": round(gflop, 2), "repeats": args.repeats,
              "peak_shape": SHAPE, "peak_gflop_per_s": top, "peak_used": best_peak,
              "sides": rows, "fp32_ceiling_over_plain": ceiling}
    readme_tables.save("flops", result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
