"""The RAG application: Ingress → (Retriever, Reranker, Generator), built from typed arguments.

`serve run deployments/serve_cpu.yaml`, `serve deploy` and `ragline serve` all call `build_app` with the YAML's
`args`; per-deployment replicas, autoscaling and resources come from the same YAML.
"""

# No `from __future__ import annotations`: Serve reads the builder's parameter annotation as a class.
from pathlib import Path

from ray.serve import Application

from deployments.generator import Generator
from deployments.ingress import Ingress
from deployments.reranker import Reranker
from deployments.retriever import Retriever
from deployments.settings import GraphArgs, Settings

CONFIG_DIR = Path(__file__).parent


def build_app(args: GraphArgs) -> Application:
    settings = Settings.from_args(args)
    # @serve.deployment turns the classes into Deployments; their stubs do not say so
    return Ingress.bind(Retriever.bind(settings), Reranker.bind(settings),  # type: ignore[attr-defined]
                        Generator.bind(settings), settings, args.api_keys_file)  # type: ignore[attr-defined]
