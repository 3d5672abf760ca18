"""The training job's typed config: one YAML file per job (`deployments/jobs/sft.yaml`, `reranker.yaml`).

Everything a run needs is here, so the file (plus `--set` overrides) is the whole record of how a model was made;
it is stored with the run and with the model version it exports.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from app import collections
from app.config import AppConfig, ConfigBase, GeneratorConfig, SearchConfig
from app.config_files import format_validation_error, merge, parse_overrides, read_yaml_mapping
from app.errors import UserError

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class RagQAConfig(ConfigBase):
    """QA examples in the serving format, built from a question set and the index: each is the exact prompt the
    generator serves for the question (its system prompt, the passages the index retrieves, the question), then
    a short answer citing the passage that holds it, or the configured "I don't know" when none does."""

    dataset: str = Field(description="SQuAD v1.1 JSON or JSONL {question, answers, doc_id}; its documents must "
                         "be in the index (`ragline eval corpus`, then `ragline ingest`).")
    split: Literal["train", "dev", "all"] = Field(default="train", description="Questions trained on. SQuAD is "
                                                  "split by article, so `ragline eval answers --split dev` asks "
                                                  "about articles no example came from.")
    limit: int | None = Field(default=None, ge=1, description="Use this many questions, spread evenly. None: all.")
    collection: str = Field(default="default", pattern=collections.NAME_RE.pattern, description="The collection "
                            "whose index holds the questions' documents and gives the passages.")
    index_version: int | None = Field(default=None, ge=1, description="Index the passages come from. None: the "
                                      "latest.")
    top_k: int = Field(default=5, ge=1, le=100, description="Passages retrieved per question, as /v1/query's "
                       "top_k (the prompt keeps the generator's `passages` of them).")
    idk_fraction: float = Field(default=0.03, ge=0, lt=1, description="Share of questions whose gold passage is "
                                "taken out of the prompt, answered with the generator's idk_answer.")
    insert_gold: bool = Field(default=True, description="Put the gold passage into the prompt (at a stable random "
                              "place among the generator's `passages`) when the retriever missed it. Off: such "
                              "questions are answered with idk_answer too.")
    generator: GeneratorConfig | None = Field(default=None, description="The generator whose prompt is trained "
                                              "on. None: the serving config's (`serve.generator` of --config), "
                                              "filled in when the job starts.")
    search: SearchConfig | None = Field(default=None, description="Retrieval settings. None: the serving "
                                        "config's `search`.")


class SFTDataConfig(ConfigBase):
    """Instruction/response or chat-message records for supervised fine-tuning."""

    paths: list[str] = Field(default_factory=list, description="jsonl or parquet files (local or s3:// / gs://).")
    rag_qa: RagQAConfig | None = Field(default=None, description="Build the examples from a question set and "
                                       "the index instead of reading records (paths then adds to them).")
    prompt_field: str = Field(default="instruction", description="Field holding the user's turn (instruction "
                              "records).")
    input_field: str | None = Field(default="input", description="Optional field appended to the prompt "
                                    "(Alpaca-style 'input'); missing or empty is fine.")
    response_field: str = Field(default="response", description="Field holding the answer the model learns.")
    system_field: str | None = Field(default="system", description="Optional field with a system message.")
    messages_field: str = Field(default="messages", description="Field of chat records: a list of "
                                "{role, content} ending with an assistant turn. Takes precedence when present.")
    max_length: int = Field(default=512, ge=16, le=32768, description="Most tokens in one example (prompt + "
                            "response after the chat template). Longer records are dropped as 'too_long'.")
    packing: bool = Field(default=False, description="Concatenate examples into rows of up to max_length tokens "
                          "(fewer pad tokens; attention crosses example boundaries, as in TRL's naive packing).")
    pad_to_multiple_of: int = Field(default=32, ge=1, le=4096, description="A micro-batch is padded to a "
                                    "multiple of this many tokens: a few shapes recur instead of one per length. "
                                    "On CPU each new shape costs oneDNN compiled kernels, kept in a cache of 1,024 "
                                    "(README, Answers: a run padded to exact lengths grew in memory and slowed "
                                    "step after step). 1: exact lengths.")
    group_by_length: int = Field(default=0, ge=0, description="Windows of this many examples (a multiple of "
                                 "batch_size) are sorted by length and cut into micro-batches of like length, "
                                 "which then come in a seeded random order: fewer pad tokens, attention still "
                                 "within each example. Replaces the training loop's shuffle buffer, so the rows "
                                 "should come shuffled (rag_qa questions do). 0: off.")


class QGenDataConfig(ConfigBase):
    """Question-writing examples from a SQuAD-format file: each shows the writer a paragraph as `ragline adapt`
    does (`app.models.question_writer`), and the reply it learns is one of the paragraph's questions and its
    answer. The records are tokenized as sft's are (`sft.max_length`, `sft.group_by_length`, ...)."""

    dataset: str | None = Field(default=None, description="SQuAD v1.1 JSON: articles of paragraphs with "
                                "questions and answer spans.")
    split: Literal["train", "dev", "all"] = Field(default="train", description="Articles trained on (SQuAD is "
                                                  "split by article).")
    per_paragraph: int = Field(default=1, ge=1, description="Questions taught per paragraph (its first ones): "
                               "more paragraphs teach more than more questions about one.")
    limit: int | None = Field(default=None, ge=1, description="Use this many examples, spread evenly over the "
                              "articles. None: all.")
    passage_words: int = Field(default=180, ge=20, description="Words of a paragraph shown, as "
                               "`adapt.writer.passage_words`; a question whose answer lies past them is left out "
                               "(counted as answer_not_shown).")


class RerankerDataConfig(ConfigBase):
    """Where (query, positive) pairs come from and how hard negatives are mined."""

    beir_dir: str | None = Field(default=None, description="BEIR-style dataset directory (corpus.jsonl, "
                                 "queries.jsonl, qrels/<split>.tsv). None: mine pairs from the latest index in the "
                                 "storage root itself (pseudo-queries, see `self_queries`).")
    questions: str | None = Field(default=None, description="A question set (SQuAD v1.1 JSON, or JSONL "
                                  "{question, answers, doc_id}) whose documents are in the storage root's index: "
                                  "each question is a query, its document the positive (`ragline eval corpus`, "
                                  "then `ragline ingest`, put them there). Not with beir_dir.")
    split: str = Field(default="train", description="qrels split (beir_dir), or question split (questions: "
                       "train, dev or all; SQuAD is split by article) to train on.")
    collection: str = Field(default="default", pattern=collections.NAME_RE.pattern, description="The collection "
                            "whose index holds the queries' documents (questions, or pairs mined from the index "
                            "itself) and the negatives.")
    index_version: int | None = Field(default=None, ge=1, description="Index version negatives are mined from. "
                                      "None: the latest.")
    negatives: int = Field(default=7, ge=1, le=63, description="Hard negatives per positive.")
    mine_top_k: int = Field(default=30, ge=2, le=1000, description="BM25 and dense candidates per query; the "
                            "negatives are drawn from their union minus the positives.")
    self_queries: int = Field(default=2000, ge=1, description="Without beir_dir or questions: chunks turned into "
                              "(pseudo-query, chunk) pairs; the query is the chunk's title, or its first sentence.")
    max_length: int = Field(default=256, ge=16, le=4096, description="Tokens of (query, passage) the "
                            "cross-encoder reads.")


class EmbedderDataConfig(RerankerDataConfig):
    """Where (query, positive) pairs come from for the bi-encoder, and how hard negatives are mined: the reranker's
    sources, read the same way."""

    negatives: int = Field(default=3, ge=1, le=63, description="Hard negatives per positive; the other queries' "
                           "passages in the micro-batch are negatives too.")
    max_length: int = Field(default=256, ge=16, le=4096, description="Tokens of a passage the embedder reads "
                            "(MiniLM's sentence-transformers limit is 256).")
    query_max_length: int = Field(default=64, ge=8, le=4096, description="Tokens of a query.")
    scale: float = Field(default=20.0, gt=0, description="Multiplies cosine similarities: the contrastive "
                         "loss's inverse temperature before the softmax over passages (sentence-transformers' "
                         "MultipleNegativesRankingLoss uses 20), and margin_mse's, so that the student's margins "
                         "range as a cross-encoder's logits do.")
    loss: Literal["contrastive", "margin_mse"] = Field(default="contrastive", description="contrastive: each "
                                                       "query's positive against every passage of the micro-batch "
                                                       "(the positives are the only labels). margin_mse (GPL, "
                                                       "Wang et al. 2022): the teacher cross-encoder scores each "
                                                       "group, and the embedder learns its margins, positive "
                                                       "minus each hard negative, so a negative that is in fact "
                                                       "relevant is not pushed away.")
    teacher: str | None = Field(default=None, description="margin_mse: the cross-encoder whose logits label the "
                                "groups, a reranker model spec (catalog:NAME[:VERSION], a local directory).")

    @model_validator(mode="after")
    def _teacher(self) -> EmbedderDataConfig:
        if self.loss == "margin_mse" and not self.teacher:
            raise ValueError("loss margin_mse needs a teacher (a cross-encoder: catalog:NAME[:VERSION] or a "
                             "directory)")
        return self


class LoraConfig(ConfigBase):
    """LoRA adapters (peft); merged into the base weights on export."""

    r: int = Field(default=16, ge=1, description="Adapter rank.")
    alpha: int = Field(default=32, ge=1, description="Scaling numerator (scale = alpha / r).")
    dropout: float = Field(default=0.05, ge=0, lt=1, description="Dropout on the adapter input.")
    target_modules: list[str] | str = Field(default="all-linear", description="Modules that get adapters.")


class TrainJobConfig(ConfigBase):
    """One fine-tuning job."""

    task: str = Field(description="A registered training task (app/train/tasks.py): sft, causal-LM "
                      "fine-tuning; reranker, a cross-encoder; embedder, the retriever's bi-encoder; qgen, "
                      "`ragline adapt`'s question writer.")
    name: str | None = Field(default=None, description="Run name. Starting a run with the name of one that "
                             "stopped resumes it from its latest checkpoint. None: <task>-<timestamp>.")
    model: str | None = Field(default=None, description="Packaged name, local directory or hub id. None: the "
                              "task's default, SmolLM2-135M-Instruct (sft, qgen) or all-MiniLM-L6-v2 (reranker, "
                              "embedder).")
    register_as: str | None = Field(default=None, description="Catalog model name the export is registered "
                                    "under. None: the task name ('sft', 'reranker', 'embedder' or 'qgen').")
    sft: SFTDataConfig = Field(default_factory=SFTDataConfig)
    reranker: RerankerDataConfig = Field(default_factory=RerankerDataConfig)
    embedder: EmbedderDataConfig = Field(default_factory=EmbedderDataConfig)
    qgen: QGenDataConfig = Field(default_factory=QGenDataConfig)
    on_bad_record: Literal["fail", "skip"] = Field(default="fail", description="fail: any bad record stops the "
                                                   "job before training, naming it; skip: drop and count it.")
    lora: LoraConfig | None = Field(default=None, description="Train LoRA adapters instead of all weights.")
    freeze_layers: int = Field(default=0, ge=0, description="sft: keep the embeddings and the lowest N transformer "
                               "blocks frozen, so backward stops above them (SmolLM2 ties its output head to the "
                               "embeddings: that stays frozen too). 20 of SmolLM2-135M's 30 trains 2.2x faster "
                               "on CPU.")

    # ---- distribution -----------------------------------------------------------------------------------------
    strategy: Literal["ddp", "fsdp", "deepspeed"] = Field(default="ddp", description="ddp: replicated model; "
                                                          "fsdp: FSDP2, fully_shard per transformer block; "
                                                          "deepspeed: ZeRO (see zero_stage).")
    zero_stage: int = Field(default=2, description="deepspeed: ZeRO stage 1, 2 or 3.")
    reshard_after_forward: bool = Field(default=False, description="fsdp: free each block's gathered parameters "
                                        "after its forward, and after each micro-batch's backward (least memory; "
                                        "two all-gathers per micro-batch). False: they stay gathered through an "
                                        "optimizer step's micro-batches, as ZeRO-2 keeps them: one all-gather and "
                                        "one reduce-scatter per step (1.35x the tokens/s on 2 CPU workers at "
                                        "grad_accum 4, the same loss).")
    offload_optimizer: bool = Field(default=False, description="deepspeed: keep optimizer state on the CPU.")
    offload_params: bool = Field(default=False, description="deepspeed (ZeRO-3 only): keep parameters on the CPU.")
    num_workers: int = Field(default=2, ge=1, description="Training workers (one process each).")
    use_gpu: bool = Field(default=False, description="One GPU per worker and NCCL; False: CPU workers with gloo.")
    cpus_per_worker: float = Field(default=1.0, gt=0, description="CPUs each worker reserves (torch threads "
                                   "follow it).")
    torch_threads: int | None = Field(default=None, ge=1, description="Threads torch uses in each worker. None: "
                                      "cpus_per_worker, rounded (at least 1). More than the reservation lets a job "
                                      "use cores that a Serve graph reserved but leaves idle.")
    placement_strategy: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = Field(
        default="PACK", description="How the workers' placement group lays them over nodes: PACK as few nodes as "
        "fit (fastest collectives), SPREAD over as many as possible, STRICT_*: the same or the run waits. The "
        "run record's worker_nodes says where they ran.")
    precision: Literal["auto", "bf16", "fp32"] = Field(default="auto", description="auto: bf16 autocast on GPUs "
                                                       "that support it, fp32 otherwise.")

    # ---- optimisation -----------------------------------------------------------------------------------------
    batch_size: int = Field(default=8, ge=1, description="Examples per worker per micro-batch.")
    grad_accum: int = Field(default=1, ge=1, description="Micro-batches per optimizer step.")
    epochs: int = Field(default=1, ge=1, description="Passes over the training data (max_steps may stop sooner).")
    max_steps: int | None = Field(default=None, ge=1, description="Stop after this many optimizer steps.")
    lr: float = Field(default=5e-5, gt=0, description="Peak learning rate.")
    weight_decay: float = Field(default=0.0, ge=0, description="AdamW weight decay.")
    warmup_steps: int = Field(default=0, ge=0, description="Linear warm-up steps, then cosine decay to zero.")
    max_grad_norm: float | None = Field(default=1.0, gt=0, description="Gradient clipping norm. None: no clipping.")
    activation_checkpointing: bool = Field(default=False, description="Recompute activations in backward "
                                           "(less memory, about a third more compute).")
    seed: int = Field(default=0, description="Seeds model init of new heads, data order and dropout.")

    # ---- checkpoints, failures, tracking -----------------------------------------------------------------------
    checkpoint_every: int = Field(default=50, ge=1, description="Optimizer steps between checkpoints (and one at "
                                  "the end).")
    keep_checkpoints: int = Field(default=2, ge=1, description="Newest checkpoints kept in storage.")
    max_failures: int = Field(default=0, ge=-1, description="Worker failures the run survives, resuming from the "
                              "latest checkpoint (-1: unlimited).")
    mlflow_tracking_uri: str | None = Field(default=None, description="MLflow tracking URI. None: "
                                            "MLFLOW_TRACKING_URI, else a file store under a local storage root (an "
                                            "s3/gs root needs one or the other).")
    peak_flops_per_worker: float | None = Field(default=None, gt=0, description="Peak FLOP/s of one worker's "
                                                "device, for MFU. None: looked up for known GPUs; unknown on CPU.")
    chaos_fail_at_step: int | None = Field(default=None, ge=1, description="Testing fault tolerance: the last "
                                           "worker exits abruptly once, when it reaches this step.")

    @field_validator("task")
    @classmethod
    def _registered(cls, task: str) -> str:
        from app.train.tasks import TASKS, unknown  # the task modules read these config classes: imported late

        if task not in TASKS:
            raise ValueError(unknown(task))
        return task

    @model_validator(mode="after")
    def _check(self) -> TrainJobConfig:
        from app.train.tasks import TASKS

        if self.name is not None and not NAME_RE.match(self.name):
            raise ValueError(f"name {self.name!r} must be 1-64 letters, digits, '_', '.', '-'")
        if self.register_as is not None and not NAME_RE.match(self.register_as):
            raise ValueError(f"register_as {self.register_as!r} must be 1-64 letters, digits, '_', '.', '-'")
        if self.strategy == "deepspeed" and self.zero_stage not in (1, 2, 3):
            raise ValueError(f"zero_stage must be 1, 2 or 3, not {self.zero_stage}")
        if self.offload_params and not (self.strategy == "deepspeed" and self.zero_stage == 3):
            raise ValueError("offload_params needs strategy deepspeed with zero_stage 3")
        if self.offload_optimizer and self.strategy != "deepspeed":
            raise ValueError("offload_optimizer needs strategy deepspeed")
        for section in ("reranker", "embedder"):
            pairs: RerankerDataConfig = getattr(self, section)
            if pairs.beir_dir and pairs.questions:
                raise ValueError(f"{section}: give beir_dir or questions, not both")
        if self.lora is not None and self.freeze_layers:
            raise ValueError("freeze_layers is for full fine-tuning; with lora the base model is frozen already")
        TASKS[self.task].validate(self)
        return self

    @property
    def model_name(self) -> str:
        from app.train.tasks import TASKS

        return self.model or TASKS[self.task].default_model

    @property
    def catalog_name(self) -> str:
        return self.register_as or self.task


def with_serving(cfg: TrainJobConfig, app: AppConfig) -> TrainJobConfig:
    """rag_qa examples are the serving graph's prompts: take its generator and search settings where the job
    leaves them out (they are then stored with the run and the model version)."""
    rq = cfg.sft.rag_qa
    if rq is not None:  # only the sft task reads it; filled in for another task's job it is unused
        rq.generator = rq.generator or app.serve.generator
        rq.search = rq.search or app.search
    return cfg


def parse_job_config(data: object, source: str) -> TrainJobConfig:
    """`data` validated as a job config, or a UserError naming `source` and each bad field (pydantic's own
    ValidationError is no UserError: the CLI would report it as an internal error)."""
    try:
        return TrainJobConfig.model_validate(data)
    except ValidationError as e:
        raise UserError(format_validation_error(e, source)) from e


def load_job_config(path: str | Path | None, task: str, overrides: list[str] | None = None) -> TrainJobConfig:
    """The job file (if any) + dotted overrides, validated, with `task` set by the command. A file written for the
    other task is an error, not a silent switch."""
    data = read_yaml_mapping(path, "job config") if path else {}
    source = str(path) if path else "defaults"
    if data.get("task", task) != task:
        raise UserError(f"job config {source} is for task {data['task']!r}, not {task!r}")
    data["task"] = task
    if overrides:
        data = merge(data, parse_overrides(overrides))
        source += " + overrides"
    cfg = parse_job_config(data, source)
    # relative data paths are the caller's: make them absolute before the job runs elsewhere (service, workers)
    cfg.sft.paths = [p if "://" in p else os.path.abspath(os.path.expanduser(p)) for p in cfg.sft.paths]
    if cfg.sft.rag_qa is not None:
        cfg.sft.rag_qa.dataset = os.path.abspath(os.path.expanduser(cfg.sft.rag_qa.dataset))
    if cfg.qgen.dataset:
        cfg.qgen.dataset = os.path.abspath(os.path.expanduser(cfg.qgen.dataset))
    for pairs in (cfg.reranker, cfg.embedder):
        if pairs.beir_dir:
            pairs.beir_dir = os.path.abspath(os.path.expanduser(pairs.beir_dir))
        if pairs.questions:
            pairs.questions = os.path.abspath(os.path.expanduser(pairs.questions))
    return cfg
