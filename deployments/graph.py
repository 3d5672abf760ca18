"""The RAG application: Ingress → (Retriever, Reranker, Generator), built from typed arguments.

`serve run deployments/serve_cpu.yaml`, `serve deploy` and `ragline serve` all call `build_app` with the YAML's
`args`; per-deployment replicas, autoscaling and resources come from the same YAML.
"""

# No `from __future__ import annotations`: Serve reads the builder's parameter annotation as a class.
from pathlib import Path

from ray.serve import Application

from deployments.generator import Generator
from deployments.ingress import Ingress, IngressArgs
from deployments.reranker import Reranker
from deployments.retriever import Retriever
from deployments.settings import GraphArgs, load

CONFIG_DIR = Path(__file__).parent


def build_app(args: GraphArgs) -> Application:
    """Each deployment is given the storage root and its own part of the config, nothing else."""
    storage, cfg = load(args)
    serve, poll_s = cfg.serve, cfg.serve.poll_interval_s
    # @serve.deployment turns the classes into Deployments; their stubs do not say so
    # with search_from, the Ingress asks that application's Retriever and Reranker
    retriever = None if args.search_from else Retriever.bind(  # type: ignore[attr-defined]
        storage, cfg.search, serve.retriever, poll_s)
    reranker = None if args.search_from else Reranker.bind(storage, serve.reranker, poll_s)  # type: ignore[attr-defined]
    generator = Generator.bind(storage, serve.generator, poll_s)  # type: ignore[attr-defined]
    return Ingress.bind(retriever, reranker, generator, storage, IngressArgs(  # type: ignore[attr-defined]
        api=serve.api, generator=serve.generator.model, max_new_tokens=serve.generator.max_new_tokens,
        embedder=cfg.ingest.embed.model,
        index_version=serve.retriever.index_version, candidates=serve.reranker.candidates if serve.reranker.model
        else 0, retrieve_batch=serve.retriever.max_batch_size, generator_engine=serve.generator.engine,
        poll_interval_s=poll_s,
        api_keys_file=args.api_keys_file, search_from=args.search_from))
