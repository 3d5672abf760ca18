"""The RAG prompt: numbered passages, the question, an instruction to cite [n]; fitted to the model's window.

Pure logic: token counting is passed in (each engine counts with its own tokenizer), so it is unit-testable.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

Message = dict[str, str]
CountTokens = Callable[[list[Message]], int]  # tokens of the rendered chat prompt, generation prompt included


@dataclass
class Prompt:
    messages: list[Message]
    passages: list[dict[str, Any]]  # the passages in the prompt, in citation order ([1] is passages[0])
    prompt_tokens: int


def render_passages(passages: Sequence[dict[str, Any]]) -> str:
    return "\n\n".join(f"[{i}] {p['title']}\n{p['text']}" if p.get("title") else f"[{i}] {p['text']}"
                       for i, p in enumerate(passages, start=1))


def user_turn(question: str, passages: Sequence[dict[str, Any]]) -> str:
    if not passages:
        return f"There are no passages.\n\nQuestion: {question}"
    return (f"Passages:\n\n{render_passages(passages)}\n\nQuestion: {question}\n"
            "Answer in one or two sentences and cite the passage number, like [1].")


def build_prompt(question: str, passages: Sequence[dict[str, Any]], *, system: str, count_tokens: CountTokens,
                 max_context_tokens: int, max_new_tokens: int, max_passages: int,
                 history: Sequence[Message] = ()) -> Prompt:
    """Fits system + history + passages + question into `max_context_tokens - max_new_tokens` tokens.

    Passages go first (lowest-ranked first), then the oldest history turns; the question is never cut: if it
    does not fit alone, that is the caller's error (ValueError).
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
            raise ValueError(f"the question needs {n} tokens with the prompt, more than the {budget} the model's "
                             f"window leaves after {max_new_tokens} answer tokens")
    return Prompt(messages(), kept, n)
