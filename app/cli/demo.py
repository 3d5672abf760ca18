"""`ragline demo`: the main job, end to end, on the embedded demo corpus (`app.demo_corpus`)."""

from __future__ import annotations

from typing import Annotated

import typer

from app.cli.context import Context
from app.cli.index import search
from app.cli.ingest import ingest
from app.cli.render import out
from app.cli.serve import ENDPOINT_FILE, query, serve
from app.demo_corpus import DEMO_QUESTION, write_demo_corpus
from app.errors import UserError


def demo(
    ctx: typer.Context,
    question: Annotated[str, typer.Option(help="The question to answer at the end.")] = DEMO_QUESTION,
    port: Annotated[int | None, typer.Option(help="HTTP port of the endpoint. [default: the Serve config's]")
                    ] = None,
) -> None:
    """The main job on the embedded default: local Ray, ingest the Python reference topics, index, search,
    serve the RAG graph and ask it."""
    c: Context = ctx.obj
    if not c.storage.is_local:
        raise UserError("the demo writes its corpus under the storage root: use a local --storage")
    corpus = write_demo_corpus(c.storage.local_path("demo-corpus"))
    out.print(f"[bold]1/4[/] demo corpus: {len(list(corpus.glob('*.md')))} Python reference topics in {corpus}")
    out.print("[bold]2/4[/] ingesting through the IngestService (Ray Data pipeline → dataset + index version)")
    ingest(ctx, [str(corpus)], detach=False, in_process=False, index=True, as_json=False)
    out.print("[bold]3/4[/] searching (hybrid: FAISS + BM25, reciprocal rank fusion)")
    search(ctx, question, mode=None, k=5, source=None, index=None, as_json=False)
    out.print("[bold]4/4[/] serving the RAG graph on Ray Serve and asking it over HTTP")
    serve(ctx, serve_config=None, port=port, api_keys_file=None, as_json=False)
    query(ctx, question, url=None, key=None, k=5, as_json=False)
    url = str(c.storage.read_json(ENDPOINT_FILE)["url"])
    out.print(f"\nThe endpoint stays up: ask more in the web console at [bold]{url}/[/] with the API key (see "
              "above), or with `ragline query`. `ray stop` ends it.", soft_wrap=True)
