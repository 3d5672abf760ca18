"""The RAG prompt: numbered passages, the question, an instruction to cite [n]; fitted to the model's window.

Pure logic: token counting is passed in (each engine counts with its own tokenizer), so it is unit-testable.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from app.config import GeneratorConfig
from app.errors import UserError
from app.rag.protocol import Message, Passage

CountTokens = Callable[[list[Message]], int]  # tokens of the rendered chat prompt, generation prompt included


@dataclass
class Prompt:
    messages: list[Message]
    passages: list[Passage]  # the passages in the prompt, in citation order ([1] is passages[0])
    prompt_tokens: int


def render_passages(passages: Sequence[Passage]) -> str:
    return "\n\n".join(f"[{i}] {p.title}\n{p.text}" if p.title else f"[{i}] {p.text}"
                       for i, p in enumerate(passages, start=1))


def user_turn(question: str, passages: Sequence[Passage]) -> str:
    if not passages:
        return f"There are no passages.\n\nQuestion: {question}"
    # the question before the passages too: a small model keeps track of what it is looking for
    return (f"Question: {question}\n\nPassages:\n\n{render_passages(passages)}\n\nQuestion: {question}\n"
            "Answer with a short phrase from the passages, then its passage number, like [1].")


def build_prompt(question: str, passages: Sequence[Passage], *, system: str, count_tokens: CountTokens,
                 max_context_tokens: int, max_new_tokens: int, max_passages: int,
                 history: Sequence[Message] = ()) -> Prompt:
    """Fits system + history + passages + question into `max_context_tokens - max_new_tokens` tokens.

    Passages go first (lowest-ranked first), then the oldest history turns; the question is never cut: if it
    does not fit alone, that is the caller's error (UserError).
    """
    budget = max_context_tokens - max_new_tokens
    assert budget > 0, "max_new_tokens must leave room for the prompt"
    kept = list(passages[:max_passages])
    turns = list(history)

    def messages() -> list[Message]:
        return [{"role": "system", "content": system}, *turns, {"role": "user", "content": user_turn(question, kept)}]

    while (n := count_tokens(messages())) > budget:
        if kept:
            kept.pop()
        elif turns:
            turns.pop(0)
        else:
            raise UserError(f"the question needs {n} tokens with the prompt, more than the {budget} the model's "
                             f"window leaves after {max_new_tokens} answer tokens")
    return Prompt(messages(), kept, n)


def system_text(cfg: GeneratorConfig) -> str:
    return cfg.system_prompt.replace("{idk_answer}", cfg.idk_answer)


def rag_prompt(question: str, passages: Sequence[Passage], cfg: GeneratorConfig, count_tokens: CountTokens,
               *, max_new_tokens: int | None = None, history: Sequence[Message] = ()) -> Prompt:
    """The prompt the Generator serves for `cfg` (and QA fine-tuning trains on, so the two never drift)."""
    return build_prompt(question, passages, system=system_text(cfg), count_tokens=count_tokens,
                        max_context_tokens=cfg.max_context_tokens,
                        max_new_tokens=max_new_tokens or cfg.max_new_tokens, max_passages=cfg.passages,
                        history=history)
