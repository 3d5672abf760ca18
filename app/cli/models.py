"""`ragline models list` and `ragline models promote`: trained model versions in the catalog."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from pydantic import BaseModel
from rich.table import Table

from app.cli.context import Context, connect
from app.cli.render import out, print_json
from app.cli.serve import endpoint

if TYPE_CHECKING:
    from app.promotion import PromotionResult


class ModelRow(BaseModel):
    name: str
    version: int
    task: str
    run: str
    created_at: str
    base_model: str
    promoted: bool
    metrics: dict[str, float]


def models_list(ctx: typer.Context, as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Model versions per name, with their metrics and which one is promoted."""
    from app.catalog import Catalog

    c: Context = ctx.obj
    catalog = Catalog(c.storage)
    rows: list[ModelRow] = []
    for name in catalog.model_names():
        promoted = catalog.promoted(name)
        for m in catalog.model_versions(name):
            rows.append(ModelRow(name=name, version=m.version, task=m.task, run=m.run, created_at=m.created_at,
                                 base_model=m.base_model, promoted=promoted is not None and
                                 promoted.version == m.version, metrics=m.metrics))
    if as_json:
        return print_json([r.model_dump() for r in rows])
    t = Table("name", "version", "task", "run", "created", "loss", "promoted", title="models")
    for r in rows:
        t.add_row(r.name, str(r.version), r.task, r.run, r.created_at,
                  f"{r.metrics['loss']:.4f}" if "loss" in r.metrics else "-", "yes" if r.promoted else "")
    out.print(t)


def models_promote(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Model name (reranker, sft, or a job's register_as).")],
    version: Annotated[int, typer.Argument(help="Version to serve.")],
    force: Annotated[bool, typer.Option(help="Promote without judging it against the served graph.")] = False,
    dataset: Annotated[Path | None, typer.Option(help="A generator is judged on this question set (as in `eval "
                                                 "answers`). [default: the one it was fine-tuned from]")] = None,
    split: Annotated[str, typer.Option(help="Split of the question set: dev is never trained on.")] = "dev",
    collection: Annotated[str | None, typer.Option(help="An embedder re-embeds this collection. [default: the one "
                                                   "it was trained on]")] = None,
    limit: Annotated[int, typer.Option(min=1, help="Questions asked of each generator.")] = 200,
    url: Annotated[str | None, typer.Option(help="Endpoint. [default: the one `ragline serve` started]")] = None,
    key: Annotated[str | None, typer.Option(help="API key. [default: as `ragline serve` resolves it]")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Mark a model version as the one to serve; a running graph that serves `catalog:NAME` swaps to it.

    A generator (an sft model) must earn it: the served graph and a copy of it serving this version answer the
    same questions, and the version is promoted only if its F1 is higher past noise: a paired bootstrap over the
    questions (the `gate` config) must put the difference above zero (both scores are shown either way)."""
    from app.catalog import Catalog
    from app.eval.answers import Endpoint
    from app.promotion import PromotionResult, promote_generator
    from app.train.config import TrainJobConfig
    from app.train.tasks import model_setting, task_named

    c: Context = ctx.obj
    catalog = Catalog(c.storage)
    manifest = catalog.get_model(name, version)
    stage = task_named(manifest.task).stage
    if stage == "retriever":
        connect(c)
        trained_on = TrainJobConfig.model_validate(manifest.config).embedder.collection
        result = promote_embedder(c, name, version, collection or trained_on)
    elif force or stage != "generator":
        catalog.promote(name, version)
        result = PromotionResult(name=name, version=version, forced=force)
    else:
        at = Endpoint(*endpoint(c, url, key))
        connect(c)
        result = promote_generator(c.storage, name, version, at, idk=c.cfg.serve.generator.idk_answer,
                                   gate=c.cfg.gate, dataset=dataset, split=split, limit=limit)
    if as_json:
        return print_json(result.model_dump())
    if result.served and result.candidate and result.comparison:
        out.print(f"F1 {result.candidate.f1:.1f} against {result.served.f1:.1f} for {result.served.generator} "
                  f"({result.candidate.questions} {split} questions of {result.candidate.dataset}; "
                  f"{result.comparison.describe('per-question F1')})")
    if result.index_version is not None:
        return out.print(f"promoted {name} version {version}: index version {result.index_version} of collection "
                         f"{result.collection} is embedded by it; a serving graph swaps to it within seconds")
    uses = "adapt's next runs write their questions with it" if stage == "writer" else \
        "a serving graph swaps to it within seconds"
    out.print(f"promoted {name} version {version}: {model_setting(stage)}=catalog:{name} follows it; {uses}")


def promote_embedder(c: Context, name: str, version: int, collection: str) -> PromotionResult:
    """Promoted, and the collection's latest dataset version indexed with it."""
    from app.catalog import Catalog
    from app.cli.index import index_embedder
    from app.index.build import build_index
    from app.promotion import PromotionResult

    info = index_embedder(c, collection, f"catalog:{name}:{version}")
    Catalog(c.storage).promote(name, version)
    m = build_index(c.collection(collection), c.cfg, None, info)
    return PromotionResult(name=name, version=version, index_version=m.version, collection=collection)
