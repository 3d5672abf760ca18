"""Locust scenarios for a Ragline endpoint: a mix of /v1/retrieve, /v1/query and streaming chat completions.

    locust -f load_tests/locustfile.py --host http://127.0.0.1:8000 --api-key KEY      (web UI)
    python -m load_tests.run --url http://127.0.0.1:8000 --users 8 --duration 60s      (headless, with a report)

Tasks are tagged `retrieve` and `generate` (query and streamed chat): `--tags retrieve` sends retrieval only.
"""

import json
import random

from locust import HttpUser, between, events, tag, task

QUESTIONS = [
    "How do I make sure clean-up code runs even when an exception is raised?",
    "What does the with statement do?",
    "How are default argument values evaluated?",
    "What is a generator expression?",
    "How does the global statement work?",
    "When do zebras cross the Mara river?",
]


@events.init_command_line_parser.add_listener
def _options(parser) -> None:
    parser.add_argument("--api-key", env_var="RAGLINE_API_KEY", default="", help="Bearer key for the endpoint")
    parser.add_argument("--max-tokens", type=int, default=32, help="Answer length per generated request")


def _check(response) -> None:
    """Failures are grouped by status in the report ("status 503"), not by each distinct message."""
    if response.status_code != 200:
        response.failure(f"status {response.status_code}")
    else:
        response.success()


class RaglineUser(HttpUser):
    wait_time = between(0.2, 1.0)

    def on_start(self) -> None:
        self.client.headers["Authorization"] = f"Bearer {self.environment.parsed_options.api_key}"
        self.max_tokens = self.environment.parsed_options.max_tokens

    @tag("retrieve")
    @task(5)
    def retrieve(self) -> None:
        with self.client.post("/v1/retrieve", json={"query": random.choice(QUESTIONS), "top_k": 5},
                              catch_response=True) as r:
            _check(r)

    @tag("generate")
    @task(2)
    def query(self) -> None:
        with self.client.post("/v1/query", json={"question": random.choice(QUESTIONS), "max_tokens": self.max_tokens},
                              catch_response=True) as r:
            _check(r)

    @tag("generate")
    @task(1)
    def chat_stream(self) -> None:
        body = {"model": "ragline", "stream": True, "max_tokens": self.max_tokens,
                "messages": [{"role": "user", "content": random.choice(QUESTIONS)}]}
        with self.client.post("/v1/chat/completions", json=body, stream=True, catch_response=True,
                              name="/v1/chat/completions (stream)") as r:
            if r.status_code != 200:
                return _check(r)
            done = False
            for line in r.iter_lines():
                if line == b"data: [DONE]":
                    done = True
                elif line.startswith(b"event: error"):
                    return r.failure("stream error event")
                elif line.startswith(b"data: "):
                    json.loads(line[6:])  # every chunk must be valid JSON
            return r.success() if done else r.failure("stream ended without [DONE]")
