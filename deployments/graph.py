"""The RAG application: Ingress → (Retriever, Reranker, Generator), built from typed arguments.

`serve run deployments/serve_cpu.yaml`, `serve deploy` and `ragline serve` all call `build_app` with the YAML's
`args`; per-deployment replicas, autoscaling and resources come from the same YAML.
"""

# No `from __future__ import annotations`: Serve reads the builder's parameter annotation as a class.
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from ray.serve import Application

from app import envs
from app.config import load_config
from app.storage import Storage
from deployments.generator import Generator
from deployments.ingress import Ingress
from deployments.reranker import Reranker
from deployments.retriever import Retriever
from deployments.settings import Settings

CONFIG_DIR = Path(__file__).parent


class GraphArgs(BaseModel):
    """`args:` of the application in a Serve config."""

    model_config = ConfigDict(extra="forbid")

    storage: str | None = Field(default=None, description="Storage root. None: RAGLINE_STORAGE or ./.ragline.")
    config_file: str | None = Field(default=None, description="A Ragline YAML config (the `serve:` section "
                                    "configures the graph).")
    config: dict[str, Any] | None = Field(default=None, description="A Ragline config given inline instead of "
                                          "config_file (`ragline serve --address` sends it: the cluster may not "
                                          "have the file).")
    overrides: list[str] = Field(default=[], description="Dotted KEY=VALUE overrides, e.g. "
                                 "serve.generator.max_new_tokens=64.")
    api_keys_file: str | None = Field(default=None, description="File of API keys. None: RAGLINE_API_KEYS, "
                                      "RAGLINE_API_KEYS_FILE or the key kept under the storage root.")


def build_app(args: GraphArgs) -> Application:
    cfg = load_config(args.config_file or envs.RAGLINE_CONFIG or None, args.overrides, inline=args.config)
    root = args.storage or cfg.storage or envs.storage_root()
    storage = Storage(root)
    # replicas run in other working directories: hand them an absolute root
    settings = Settings(storage=str(storage.local_path()) if storage.is_local else root, config=cfg.model_dump())
    # @serve.deployment turns the classes into Deployments; their stubs do not say so
    return Ingress.bind(Retriever.bind(settings), Reranker.bind(settings),  # type: ignore[attr-defined]
                        Generator.bind(settings), settings, args.api_keys_file)  # type: ignore[attr-defined]
