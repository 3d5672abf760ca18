"""The `args:` of Ragline's Serve applications, and what they load into: the storage root and the config."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from app import envs
from app.config import AppConfig, load_config
from app.storage import Storage


class GraphArgs(BaseModel):
    """`args:` of Ragline's applications in a Serve config (the RAG graph and the LLM)."""

    model_config = ConfigDict(extra="forbid")

    storage: str | None = Field(default=None, description="Storage root. None: RAGLINE_STORAGE or ./.ragline.")
    config_file: str | None = Field(default=None, description="A Ragline YAML config (the `serve:` section "
                                    "configures the graph).")
    # free-form here (AppConfig validates it in `load`); `object`: pydantic takes it as it took `Any`
    config: dict[str, object] | None = Field(default=None, description="A Ragline config given inline instead of "
                                          "config_file (`ragline serve --address` sends it: the cluster may not "
                                          "have the file).")
    overrides: list[str] = Field(default=[], description="Dotted KEY=VALUE overrides, e.g. "
                                 "serve.generator.max_new_tokens=64.")
    api_keys_file: str | None = Field(default=None, description="File of API keys. None: RAGLINE_API_KEYS, "
                                      "RAGLINE_API_KEYS_FILE or the key kept under the storage root.")
    search_from: str | None = Field(default=None, description="Another Ragline graph application whose "
                                    "Retriever and Reranker this one asks instead of starting its own (a candidate "
                                    "generator judged beside the served graph: the same passages, no second copy of "
                                    "the index). None: its own.")


def load(args: GraphArgs) -> tuple[str, AppConfig]:
    """(the storage root as every replica must see it, the validated config): loaded once, where the application
    is built; each deployment is then given only its own part of the config."""
    cfg = load_config(args.config_file or envs.RAGLINE_CONFIG or None, args.overrides, inline=args.config)
    storage = Storage(args.storage or cfg.storage or envs.storage_root())
    # replicas run in other working directories: hand them an absolute root
    return (str(storage.local_path()) if storage.is_local else storage.uri), cfg
