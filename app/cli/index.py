"""`ragline index build` and `ragline search`: index versions, and what they find."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from app.cli.context import Collection, Context, connect, json_object
from app.cli.render import out, print_hits, print_json
from app.errors import UserError

if TYPE_CHECKING:
    from app.catalog import EmbedderInfo


def index_build(
    ctx: typer.Context,
    dataset: Annotated[int | None, typer.Option(help="Dataset version. [default: latest]")] = None,
    embedder: Annotated[str | None, typer.Option(
        help="Embed the chunks with this model: catalog:NAME[:VERSION] (`ragline train embedder`), a packaged "
        "model, a local directory or a hub id. A serving graph swaps to the index and embeds questions with it; "
        "later builds keep it. [default: the latest index version's]")] = None,
    collection: Collection = "default",
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Build an index version (FAISS + BM25) from a dataset version."""
    from app.index.build import build_index

    c: Context = ctx.obj
    connect(c)  # re-embedding runs on Ray Data
    m = build_index(c.collection(collection), c.cfg, dataset, index_embedder(c, collection, embedder))
    info = {"index_version": m.version, "dataset_version": m.parent, "chunks": m.counts["chunks"],
            "dense": m.extra["dense"], "embedder": m.embedder.name}
    print_json(info) if as_json else out.print(f"index version {m.version} from dataset version {m.parent}: "
                                               f"{m.counts['chunks']} chunks embedded by {m.embedder.name}, dense "
                                               f"index {m.extra['dense']}")


def index_embedder(c: Context, collection: str, spec: str | None) -> EmbedderInfo | None:
    """What `spec` names, computing as the collection's latest dataset version does (None: no spec)."""
    from app.catalog import Catalog
    from app.models import embedder

    if spec is None:
        return None
    dataset = Catalog(c.collection(collection)).resolve("datasets", None)
    return embedder.target(spec, c.storage, embedder.Variant(dataset.embedder.runtime, dataset.embedder.precision))


def search(
    ctx: typer.Context,
    question: Annotated[str, typer.Argument(help="What to look for.")],
    mode: Annotated[str | None, typer.Option(help="dense | lexical | hybrid. [default: search.mode]")] = None,
    k: Annotated[int | None, typer.Option("-k", help="Results. [default: search.top_k]")] = None,
    source: Annotated[list[str] | None, typer.Option(help="Only sources matching this glob (repeatable).")] = None,
    where: Annotated[str | None, typer.Option(
        "--where", metavar="JSON", help='Only chunks whose document metadata matches this filter, MongoDB-style: '
        '\'{"department": "hr", "year": {"$gte": 2020}}\' ($eq $ne $in $nin $gt $gte $lt $lte $and $or).')] = None,
    index: Annotated[int | None, typer.Option(help="Index version. [default: latest]")] = None,
    collection: Collection = "default",
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Search a collection's latest index version and print ranked chunks with their sources."""
    from app.filters import parse_filter
    from app.index.search import Index, Searcher

    c: Context = ctx.obj
    if mode not in (None, "dense", "lexical", "hybrid"):
        raise UserError(f"--mode must be dense, lexical or hybrid, not {mode!r}")
    if k is not None and not 1 <= k <= 1000:
        raise UserError(f"-k must be between 1 and 1000, not {k}")
    f = parse_filter(json_object(where, "--where"), "--where") if where is not None else None  # before the load
    searcher = Searcher(Index.load(c.collection(collection), index), c.cfg.search)
    hits = searcher.search(question, mode, k, source, f)  # type: ignore[arg-type]
    if as_json:
        print_json({"index_version": searcher.index.version, "hits": [h.model_dump() for h in hits]})
        return
    print_hits(question, hits, searcher.index.version)

