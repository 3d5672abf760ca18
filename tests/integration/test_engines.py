"""The transformers engine, the explicitly chosen fallback to vLLM, on the packaged SmolLM2 (no Serve needed):
it streams, honours max_new_tokens and stop strings, and stops generating when its stream is closed."""

import asyncio
import time

import pytest

from app.config import GeneratorConfig
from app.rag.engines import Sampling, TransformersEngine

MESSAGES = [{"role": "user", "content": "Name three colours of the rainbow."}]


async def collect(engine: TransformersEngine, sampling: Sampling, limit: int | None = None) -> list:
    pieces = []
    stream = engine.stream(MESSAGES, sampling)
    async for piece in stream:
        pieces.append(piece)
        if limit and len(pieces) == limit:
            await stream.aclose()
            break
    return pieces


def test_transformers_engine_streams_within_its_budget_and_stops_on_request():
    engine = TransformersEngine(GeneratorConfig(engine="transformers"))
    pieces = asyncio.run(collect(engine, Sampling(max_new_tokens=12, temperature=0.0, top_p=1.0)))
    *text, end = pieces
    full = "".join(p.text for p in text)
    assert full.strip() and end.finish_reason == "length" and end.completion_tokens == 12
    assert end.model == "SmolLM2-135M-Instruct" and end.prompt_tokens == engine.count_tokens(MESSAGES)

    word = full.split()[1]
    *cut, end = asyncio.run(collect(engine, Sampling(12, 0.0, 1.0, stop=(word,))))
    assert "".join(p.text for p in cut) == full[: full.index(word)] and end.finish_reason == "stop"

    t0 = time.perf_counter()
    assert len(asyncio.run(collect(engine, Sampling(400, 0.0, 1.0), limit=2))) == 2
    assert time.perf_counter() - t0 < 10, "closing the stream did not stop the 400-token generation"

    # sampling that fails inside generate (here NaN probabilities from a temperature the API would refuse) ends
    # the request at once with the error, instead of holding it until the request timeout
    t0 = time.perf_counter()
    with pytest.raises(RuntimeError):
        asyncio.run(collect(engine, Sampling(12, 1e-300, 1.0)))
    assert time.perf_counter() - t0 < 10
