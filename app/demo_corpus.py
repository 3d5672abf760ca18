"""The embedded demo corpus (`ragline demo`, the benchmarks): the Python language reference topics that ship with
CPython (`pydoc_data.topics`), so every install has it and nothing is downloaded."""

from __future__ import annotations

from pathlib import Path

# what `ragline demo` asks at the end: the exception-handling topics of the reference answer it
DEMO_QUESTION = "How do I make sure clean-up code runs even when an exception is raised?"


def write_demo_corpus(directory: Path) -> Path:
    """The Python language reference topics that ship with CPython (pydoc_data), one markdown file each."""
    from pydoc_data.topics import topics

    directory.mkdir(parents=True, exist_ok=True)
    for name, text in sorted(topics.items()):
        target = directory / f"{name}.md"
        body = f"# {name}\n\n{text}"
        if not target.exists() or target.read_text(encoding="utf-8") != body:
            target.write_text(body, encoding="utf-8")
    return directory
