"""SFT records → token ids and loss masks, as a Ray Data `map_batches` callable class.

A record is either chat-shaped (`messages`: [{role, content}, ...] ending with an assistant turn) or an
instruction record (`instruction` [+ `input`] [+ `system`] → `response`). Either way the model's own chat template
renders it, and the labels are the token ids of the assistant turns only (everything else is -100), found by
character offsets of the assistant contents in the rendered text, so no template-specific parsing is needed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

import numpy as np

from app.errors import UserError
from app.train.config import SFTDataConfig

if TYPE_CHECKING:
    import torch

IGNORE = -100  # label of tokens that carry no loss (prompt, template, padding)
ROLES = ("system", "user", "assistant")


class Batch(TypedDict):
    """A collated micro-batch (`collate_lm`, `app.train.reranker_data.collate_groups`,
    `app.train.embedder_task.collate_bi`): int64 tensors of shape (rows, T), padded to the longest row (a reranker
    row is one (query, passage) pair of a group; an embedder row one query or one passage)."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor  # 1 on real tokens
    labels: NotRequired[torch.Tensor]  # sft: the next-token targets, IGNORE where no loss
    token_type_ids: NotRequired[torch.Tensor]  # reranker: 0 on the query, 1 on the passage
    group_size: NotRequired[int]  # reranker, embedder: passages per group (the positive first, then negatives)
    queries: NotRequired[int]  # embedder: the first `queries` rows are queries, then each one's group
    scale: NotRequired[float]  # embedder: multiplies cosine similarities in its loss
    teacher: NotRequired[torch.Tensor]  # embedder, margin_mse: (queries, group_size) float32 teacher logits


class BadRecord(UserError):
    """A training record that makes no example; `reason` is its drop reason in the counts (missing_field, empty,
    bad_template, too_long)."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason


def to_messages(record: Mapping[str, object], cfg: SFTDataConfig) -> list[dict[str, str]]:
    """The record as chat messages; BadRecord(reason, what is wrong) if it fits neither shape."""
    if cfg.messages_field in record and record[cfg.messages_field] is not None:
        messages = record[cfg.messages_field]
        if not isinstance(messages, list) or not messages:
            raise BadRecord("bad_template", f"'{cfg.messages_field}' must be a non-empty list")
        out = []
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
                raise BadRecord("bad_template", f"'{cfg.messages_field}[{i}]' needs a role in {ROLES} and a "
                                "string content")
            out.append({"role": m["role"], "content": m["content"]})
        if out[-1]["role"] != "assistant":
            raise BadRecord("bad_template", f"the last of '{cfg.messages_field}' must be an assistant turn")
        if any(m["role"] == "assistant" and not m["content"].strip() for m in out):
            raise BadRecord("empty", "an assistant turn is empty")
        return out
    texts = []
    for field in (cfg.prompt_field, cfg.response_field):
        if field not in record:
            raise BadRecord("missing_field", f"no '{field}' (nor '{cfg.messages_field}')")
        text = record[field]
        if not isinstance(text, str):
            raise BadRecord("bad_template", f"'{field}' must be a string")
        texts.append(text)
    prompt, response = texts
    extra = record.get(cfg.input_field) if cfg.input_field else None
    if isinstance(extra, str) and extra.strip():
        prompt = f"{prompt}\n\n{extra}"
    if not prompt.strip() or not response.strip():
        raise BadRecord("empty", f"'{cfg.prompt_field}' or '{cfg.response_field}' is empty")
    messages = [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}]
    system = record.get(cfg.system_field) if cfg.system_field else None
    if isinstance(system, str) and system.strip():
        messages.insert(0, {"role": "system", "content": system})
    return messages


def encode(messages: list[dict[str, str]], tokenizer: Any, max_length: int) -> tuple[list[int], list[int]]:
    """(input_ids, labels) of one conversation; labels are -100 outside the assistant contents (their closing
    end-of-turn token included, so the model learns to stop)."""
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    spans = []
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        # the prefix up to this turn's content, as the template renders it when asking for a reply
        prefix = tokenizer.apply_chat_template(messages[:i], tokenize=False, add_generation_prompt=True)
        if not text.startswith(prefix) or text.find(m["content"], len(prefix)) != len(prefix):
            raise BadRecord("bad_template", "the chat template does not render this conversation as a prefix "
                            "of itself (unsupported template)")
        upto = tokenizer.apply_chat_template(messages[: i + 1], tokenize=False)
        spans.append((len(prefix), len(upto)))
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids = enc["input_ids"]
    if len(ids) > max_length:
        raise BadRecord("too_long", f"{len(ids)} tokens after the chat template, more than max_length {max_length}")
    labels = [tok if any(a <= s < b for a, b in spans) else IGNORE
              for tok, (s, _) in zip(ids, enc["offset_mapping"], strict=True)]
    # trailing whitespace/newline after the end-of-turn token belongs to no turn: no loss there either
    return ids, labels


class SFTTokenize:
    """map_batches callable: rows {record (JSON text), source} → {input_ids, labels, tokens, source, drop, detail}.

    Bad records stay in the output with `drop` set to the reason (missing_field, empty, bad_template, too_long,
    invalid_json), so counts reconcile and the driver can name them; kept rows have drop "".
    """

    def __init__(self, model_dir: str, cfg: Mapping[str, object]):  # an SFTDataConfig (`model_dump`)
        from transformers import AutoTokenizer

        self.cfg = SFTDataConfig.model_validate(cfg)
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, list[Any]]:
        out: dict[str, list[Any]] = {k: [] for k in ("input_ids", "labels", "tokens", "source", "drop", "detail")}
        for raw, source in zip(batch["record"], batch["source"], strict=True):
            ids: list[int] = []
            labels: list[int] = []
            drop = detail = ""
            try:
                record = json.loads(raw)
                if not isinstance(record, dict):
                    raise BadRecord("bad_template", "a record must be a JSON object")
                ids, labels = encode(to_messages(record, self.cfg), self.tokenizer, self.cfg.max_length)
                if all(t == IGNORE for t in labels):
                    raise BadRecord("too_long", "no response token survives")
            except json.JSONDecodeError as e:
                drop, detail = "invalid_json", f"not valid JSON ({e.msg})"
            except BadRecord as e:
                drop, detail = e.reason, str(e)
            for k, v in (("input_ids", ids), ("labels", labels), ("tokens", len(ids)), ("source", source),
                         ("drop", drop), ("detail", detail)):
                out[k].append(v)
        return out


def pack(batch: dict[str, np.ndarray], max_length: int) -> dict[str, list[Any]]:
    """map_batches function: greedy concatenation of consecutive examples into rows of ≤ max_length tokens."""
    rows: dict[str, list[Any]] = {"input_ids": [], "labels": [], "tokens": []}
    ids: list[int] = []
    labels: list[int] = []
    for x, y in zip(batch["input_ids"], batch["labels"], strict=True):
        if ids and len(ids) + len(x) > max_length:
            rows["input_ids"].append(ids)
            rows["labels"].append(labels)
            rows["tokens"].append(len(ids))
            ids, labels = [], []
        ids, labels = ids + list(x), labels + list(y)
    if ids:
        rows["input_ids"].append(ids)
        rows["labels"].append(labels)
        rows["tokens"].append(len(ids))
    return rows


def group_by_length(batch: dict[str, np.ndarray], micro_batch: int, seed: int) -> dict[str, list[Any]]:
    """map_batches function over a window of examples: sorted by length, cut into runs of `micro_batch` (each run
    padded to its own longest, so little padding), and the runs put in an order drawn from `seed` and the window's
    lengths (the same window gives the same order, so a resumed run replays it)."""
    lengths = [len(x) for x in batch["input_ids"]]
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    runs = [order[i: i + micro_batch] for i in range(0, len(order), micro_batch)]
    rng = np.random.default_rng([seed, len(lengths), sum(lengths)])
    picked = [i for r in rng.permutation(len(runs)) for i in runs[r]]
    return {k: [batch[k][i] for i in picked] for k in ("input_ids", "labels")}


def collate_lm(batch: dict[str, np.ndarray], pad_id: int, multiple: int = 1) -> Batch:
    """Right-pad a micro-batch to its longest row rounded up to `multiple`: input_ids, labels, attention_mask, each
    (B, T) int64."""
    import torch

    longest = -(-max(len(x) for x in batch["input_ids"]) // multiple) * multiple
    n = len(batch["input_ids"])
    ids = torch.full((n, longest), pad_id, dtype=torch.long)
    labels = torch.full((n, longest), IGNORE, dtype=torch.long)
    mask = torch.zeros((n, longest), dtype=torch.long)
    for i, (x, y) in enumerate(zip(batch["input_ids"], batch["labels"], strict=True)):
        ids[i, : len(x)] = torch.as_tensor(np.array(x, dtype=np.int64))
        labels[i, : len(y)] = torch.as_tensor(np.array(y, dtype=np.int64))
        mask[i, : len(x)] = 1
    return {"input_ids": ids, "labels": labels, "attention_mask": mask}
