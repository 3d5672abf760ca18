"""The question writer's conversation: the prompt that shows it a passage, and the reply it is read from (and, for
the `qgen` training task, taught to give). `app.adapt` asks with it; `app.train.qgen_data` trains on it.

The prompt puts the passage first and ends on "Question:", so a small instruct model continues with a question
rather than with a preamble: on SciFact, SmolLM2-135M asked with the instruction first answered "What is the answer
to this question?" for 6 of 16 passages, with the passage first for 1 of 16.
"""

from __future__ import annotations

PROMPT = ("{passage}\n\nWrite a question that is answered by the text above, and its short answer copied from the "
          "text.\nQuestion:")


def shown(text: str, words: int) -> str:
    """What of a passage the writer sees: its first `words` words, whitespace collapsed."""
    return " ".join(text.split()[:words])


def prompt(title: str, text: str, words: int) -> str:
    """The writer's user message for a passage: its title and first `words` words."""
    body = shown(text, words)
    return PROMPT.format(passage=f"{title.strip()}. {body}" if title.strip() else body)


def reply(question: str, answer: str) -> str:
    """A reply as `app.adapt.questions.parse` reads it: the question on the first line, then its answer."""
    return f"{question.strip()}\nAnswer: {answer.strip()}"
