"""Request bodies of the HTTP API. Unknown fields are errors (422 naming the field), so a typo in a parameter
never silently falls back to a default; the OpenAI-compatible bodies accept the OpenAI parameters clients send.

Every string must be encodable as UTF-8 (JSON lets a client send a lone UTF-16 surrogate, which no tokenizer
takes), and numbers stay in ranges sampling can use. The configurable sizes (list lengths, characters) are
`ApiConfig`'s, checked by `deployments/limits.py` before any work is done."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from app import collections
from app.filters import FILTER_DOC, parse_filter

MIN_TEMPERATURE = 0.01  # below it (but above 0, which is greedy) logits / temperature overflow to inf


def _encodable(v: str) -> str:
    try:
        v.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"not valid Unicode text (character {e.start} is a lone surrogate)") from None
    return v


def _usable_temperature(v: float | None) -> float | None:
    if v is not None and 0 < v < MIN_TEMPERATURE:
        raise ValueError(f"use 0 for greedy decoding, or at least {MIN_TEMPERATURE}")
    return v


Text = Annotated[str, AfterValidator(_encodable)]
Temperature = Annotated[float | None, Field(default=None, ge=0, le=2, description="0: greedy. Otherwise 0.01 to 2."),
                        AfterValidator(_usable_temperature)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _not_blank(v: str) -> str:
    if not v.strip():
        raise ValueError("must not be empty or only whitespace")
    return v.strip()


Mode = Literal["dense", "lexical", "hybrid"]


def _filter_syntax(v: dict[str, object] | None) -> dict[str, object] | None:
    if v is not None:
        parse_filter(v)  # its UserError (a ValueError) names the part: a 422 for field `filter`
    return v


MetadataFilter = Annotated[dict[str, object] | None, Field(default=None, description=FILTER_DOC),
                           AfterValidator(_filter_syntax)]
CollectionName = Annotated[str, Field(default=collections.DEFAULT, max_length=64, description="The collection to "
                                      "search (one the API key may read; see GET /v1/collections).")]


class RetrieveRequest(_Body):
    query: Text = Field(description="The search text.")
    top_k: int = Field(default=10, ge=1, description="Chunks returned (at most api.max_top_k).")
    mode: Mode | None = Field(default=None, description="dense, lexical or hybrid. None: the configured mode.")
    sources: list[Text] | None = Field(default=None, description="Only chunks whose source matches a glob.")
    collection: CollectionName
    filter: MetadataFilter

    _query = field_validator("query")(_not_blank)


class QueryRequest(_Body):
    question: Text = Field(description="The question to answer from the indexed documents.")
    top_k: int = Field(default=5, ge=1, description="Passages retrieved (and reranked) as context candidates.")
    mode: Mode | None = None
    sources: list[Text] | None = None
    collection: CollectionName
    filter: MetadataFilter
    stream: bool = Field(default=False, description="Server-sent events: tokens, then citations, then done.")
    max_tokens: int | None = Field(default=None, ge=1, description="Answer length cap (tokens).")
    temperature: Temperature = None

    _question = field_validator("question")(_not_blank)


class RerankRequest(_Body):
    query: Text
    documents: list[Text] = Field(min_length=1, description="Texts to order by relevance.")
    top_n: int | None = Field(default=None, ge=1, description="How many to return. None: all.")

    _query = field_validator("query")(_not_blank)


class EmbeddingsRequest(_Body):
    input: Text | list[Text] = Field(description="Text or texts to embed (OpenAI `input`).")
    model: Text | None = Field(default=None, description="`ragline/<collection>`: that collection's embedder; the "
                               "default collection's embedder's name, or none: the default's.")
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(default=None, description="Only the model's own dimension is accepted.")
    user: Text | None = None

    @field_validator("input")
    @classmethod
    def _inputs(cls, v: str | list[str]) -> str | list[str]:
        texts = [v] if isinstance(v, str) else v
        if not texts:
            raise ValueError("give at least one text")
        if any(not t.strip() for t in texts):
            raise ValueError("texts must not be empty or only whitespace")
        return v


class TextPart(_Body):
    type: Literal["text"]
    text: Text


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")  # clients add name, tool_call_id, …: harmless for RAG
    role: Literal["system", "user", "assistant", "developer", "tool"]
    content: Text | list[TextPart] | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "\n".join(p.text for p in self.content)
        return self.content or ""


class StreamOptions(_Body):
    include_usage: bool = False


class ChatCompletionRequest(_Body):
    model: Text | None = Field(default=None, description="`ragline/<collection>` answers from that collection; "
                               "`ragline`, the generator's name or none: from the default collection.")
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: Temperature = None
    top_p: float | None = Field(default=None, gt=0, le=1)
    n: int = Field(default=1, ge=1, le=1, description="Only one choice is generated.")
    stop: Text | list[Text] | None = None
    seed: int | None = Field(default=None, ge=0, lt=2**63, description="Accepted for compatibility; answers are "
                             "sampled as the generator is configured.")
    user: Text | None = None
    # Ragline's own retrieval knobs (OpenAI clients pass them with extra_body); the collection is the model's name
    top_k: int = Field(default=5, ge=1)
    mode: Mode | None = None
    sources: list[Text] | None = None
    filter: MetadataFilter

    @field_validator("messages")
    @classmethod
    def _ends_with_user(cls, v: list[ChatMessage]) -> list[ChatMessage]:
        if v[-1].role != "user" or not v[-1].text().strip():
            raise ValueError("the last message must be a non-empty user message (it is the question)")
        return v
