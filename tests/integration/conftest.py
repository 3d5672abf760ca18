"""One local Ray for the whole session, and a small fixture corpus with planted problems."""

import json
import socket
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import ray

from app.config import AppConfig, load_config
from app.raycluster import NAMESPACE

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "deployments" / "jobs" / "data" / "sft-sample.jsonl"  # 41 instruction records
PLANTED = ("The great zebra migration crosses the Mara river every July, when hundreds of thousands of zebras "
           "and wildebeest leave the Serengeti for fresh grazing in the Maasai Mara.")


@pytest.fixture(scope="session")
def ray_cluster():
    # address="local": always a fresh cluster of our own, even if a `ray start` one runs on this machine
    ray.init(address="local", num_cpus=2, namespace=NAMESPACE, include_dashboard=False, log_to_driver=False)
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def topic_text(i: int, words: int = 120) -> str:
    """Distinct documents: each draws its words from its own vocabulary, so no two are near copies."""
    return f"Topic {i}. " + " ".join(f"term{i}x{j}" for j in range(words))


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
    return {"read": 22, "kept": 17, "unreadable": 2, "empty": 1, "exact_duplicate": 1, "duplicate_id": 0,
            "near_duplicate": 1, "files": 7, "unreadable_files": 1}


@pytest.fixture
def corpus(tmp_path) -> tuple[Path, dict[str, int]]:
    d = tmp_path / "corpus"
    return d, write_corpus(d)


@pytest.fixture
def cfg() -> AppConfig:
    # the corpus has 1 corrupt file of 7: allow it
    return load_config(None, ["ingest.read.max_error_fraction=0.5"])


@pytest.fixture(scope="session")
def tiny_lm(tmp_path_factory) -> str:
    """A two-layer Llama with SmolLM2's tokenizer and chat template: the strategies are under test, not the model."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from app import envs
    from app.models import generator

    tokenizer = AutoTokenizer.from_pretrained(generator.resolve("SmolLM2-135M-Instruct", envs.cache_dir()))
    path = tmp_path_factory.mktemp("tiny-lm")
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id)
    LlamaForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)
