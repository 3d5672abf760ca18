"""The peers' answering apps for benchmarks/peers_answer_bench.py: a Haystack RAG pipeline and a LlamaIndex query
engine, each behind FastAPI the way their docs show it, run by the peers' own environment (benchmarks/.venv-peers).

    python peers_apps.py haystack|llamaindex CORPUS_DIR SETTINGS_JSON PORT

At start-up the app indexes the corpus's markdown files (each framework's own splitter and in-memory store, the
packaged MiniLM), loads the generator (the packaged SmolLM2, with the framework's HuggingFace generator) and serves:
  GET  /health               200 once it answers;
  POST /query {"question"}   the answer, streamed as plain text while the generator produces it.
Greedy decoding, at most `max_new_tokens` tokens, the framework's own default prompt around the top `top_k` chunks.

SETTINGS_JSON: {"embedder_dir", "generator_dir", "chunk_tokens", "overlap_tokens", "split_words",
"split_overlap_words", "top_k", "max_new_tokens"}.
"""

# No `from __future__ import annotations`: FastAPI reads the route's body model from its annotation.
import json
import queue
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

Answer = Callable[[str], Iterator[str]]  # a question -> the answer's pieces as they are generated


def haystack(corpus: Path, s: dict[str, Any]) -> Answer:
    """Haystack's RAG pipeline from its docs: TextEmbedder -> EmbeddingRetriever -> ChatPromptBuilder ->
    TransformersChatGenerator (transformers-haystack: Haystack 2's HuggingFaceLocalChatGenerator, moved out of
    haystack-ai in 3); the streaming callback feeds the response."""
    from haystack import Pipeline
    from haystack.components.builders import ChatPromptBuilder
    from haystack.components.converters import TextFileToDocument
    from haystack.components.preprocessors import DocumentSplitter
    from haystack.components.retrievers.in_memory import InMemoryEmbeddingRetriever
    from haystack.components.writers import DocumentWriter
    from haystack.dataclasses import ChatMessage
    from haystack.document_stores.in_memory import InMemoryDocumentStore
    from haystack_integrations.components.embedders.sentence_transformers import (
        SentenceTransformersDocumentEmbedder,
        SentenceTransformersTextEmbedder,
    )
    from haystack_integrations.components.generators.transformers import TransformersChatGenerator

    store = InMemoryDocumentStore()
    indexing = Pipeline()
    indexing.add_component("converter", TextFileToDocument())
    indexing.add_component("splitter", DocumentSplitter(split_by="word", split_length=s["split_words"],
                                                        split_overlap=s["split_overlap_words"]))
    indexing.add_component("embedder", SentenceTransformersDocumentEmbedder(model=s["embedder_dir"],
                                                                            progress_bar=False))
    indexing.add_component("writer", DocumentWriter(document_store=store))
    indexing.connect("converter", "splitter")
    indexing.connect("splitter", "embedder")
    indexing.connect("embedder", "writer")
    indexing.run({"converter": {"sources": sorted(corpus.glob("*.md"))}})

    # the prompt of Haystack's RAG tutorial
    template = [ChatMessage.from_user(
        "Given the following information, answer the question.\n\nContext:\n{% for document in documents %}\n"
        "    {{ document.content }}\n{% endfor %}\n\nQuestion: {{question}}\nAnswer:")]
    rag = Pipeline()
    rag.add_component("embedder", SentenceTransformersTextEmbedder(model=s["embedder_dir"], progress_bar=False))
    rag.add_component("retriever", InMemoryEmbeddingRetriever(document_store=store, top_k=s["top_k"]))
    rag.add_component("prompt_builder", ChatPromptBuilder(template=template, required_variables=["question"]))
    rag.add_component("llm", TransformersChatGenerator(
        model=s["generator_dir"], task="text-generation",
        generation_kwargs={"max_new_tokens": s["max_new_tokens"], "do_sample": False}))
    rag.connect("embedder.embedding", "retriever.query_embedding")
    rag.connect("retriever", "prompt_builder.documents")
    rag.connect("prompt_builder.prompt", "llm.messages")
    rag.warm_up()

    def answer(question: str) -> Iterator[str]:
        pieces: queue.Queue[str | None] = queue.Queue()

        def run() -> None:
            try:
                rag.run({"embedder": {"text": question}, "prompt_builder": {"question": question},
                         "llm": {"streaming_callback": lambda chunk: pieces.put(chunk.content)}})
            finally:
                pieces.put(None)

        threading.Thread(target=run, daemon=True).start()
        while (piece := pieces.get()) is not None:
            yield piece

    return answer


def llamaindex(corpus: Path, s: dict[str, Any]) -> Answer:
    """LlamaIndex's starter: SimpleDirectoryReader -> VectorStoreIndex (SentenceSplitter), then
    `as_query_engine(streaming=True)` with HuggingFaceLLM; the response's `response_gen` is streamed."""
    from llama_index.core import Settings, SimpleDirectoryReader, VectorStoreIndex
    from llama_index.core.node_parser import SentenceSplitter
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding
    from llama_index.llms.huggingface import HuggingFaceLLM
    from transformers import AutoTokenizer

    Settings.embed_model = HuggingFaceEmbedding(model_name=s["embedder_dir"], device="cpu")
    tokenizer = AutoTokenizer.from_pretrained(s["embedder_dir"])
    tokenizer.model_max_length = 1 << 30  # measuring a whole document is not feeding it to the model
    Settings.node_parser = SentenceSplitter(chunk_size=s["chunk_tokens"], chunk_overlap=s["overlap_tokens"],
                                            tokenizer=tokenizer.tokenize)
    # the files themselves: the reader's default skips a directory under a hidden one (the storage root's .ragline-*)
    documents = SimpleDirectoryReader(input_files=sorted(corpus.glob("*.md"))).load_data()
    index = VectorStoreIndex.from_documents(documents)
    llm = HuggingFaceLLM(model_name=s["generator_dir"], tokenizer_name=s["generator_dir"], device_map="cpu",
                         max_new_tokens=s["max_new_tokens"], generate_kwargs={"do_sample": False},
                         is_chat_model=True)
    engine = index.as_query_engine(llm=llm, similarity_top_k=s["top_k"], streaming=True)

    def answer(question: str) -> Iterator[str]:
        yield from engine.query(question).response_gen

    return answer


def main(argv: list[str]) -> int:
    side, corpus, settings, port = argv
    import uvicorn
    from fastapi import FastAPI
    from fastapi.responses import StreamingResponse
    from pydantic import BaseModel

    answer = {"haystack": haystack, "llamaindex": llamaindex}[side](Path(corpus), json.loads(Path(settings)
                                                                                             .read_text()))

    class Query(BaseModel):
        question: str

    app = FastAPI()

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/query")
    def query(q: Query) -> StreamingResponse:  # sync: FastAPI runs it, and the stream, in its thread pool
        return StreamingResponse(answer(q.question), media_type="text/plain")

    uvicorn.run(app, host="127.0.0.1", port=int(port), log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
