"""`ragline adapt`: adapt the reranker, the embedder (and the generator) to a collection with no labels;
`ragline adapt questions`: only its first step, the synthetic question sets."""

from __future__ import annotations

from typing import Annotated

import typer

from app.cli.context import Collection, Context, connect
from app.cli.render import out, print_json

Reuse = Annotated[str | None, typer.Option("--questions", metavar="RUN", help="Reuse the question sets of this "
                                           "synthesis run (`ragline adapt questions` prints its id) instead of "
                                           "writing new ones.")]


def adapt(
    ctx: typer.Context,
    collection: Collection = "default",
    questions: Reuse = None,
    url: Annotated[str | None, typer.Option(help="The served graph, which judges a generator (adapt.roles with "
                                            "generator). [default: the one `ragline serve` started]")] = None,
    key: Annotated[str | None, typer.Option(help="API key. [default: as `ragline serve` resolves it]")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Write questions about the collection's chunks (vLLM on Ray Data), keep those the retriever answers, train
    the reranker and the embedder (taught by the reranker once one is promoted) on them, and promote each only if
    it ranks held-out questions' passages better than what is served (a paired bootstrap); a promoted embedder
    re-embeds the collection into a new index version. With --set adapt.roles=[reranker,embedder,generator] the
    generator is fine-tuned on the questions' answers too and promoted only if the served graph, copied with it,
    answers the held-out ones better. Settings: the `adapt` section of the config (--set adapt.chunks=500)."""
    if ctx.invoked_subcommand is not None:
        return
    from app.adapt.run import adapt as run_adapt
    from app.adapt.synthesize import synthesis_run
    from app.cli.serve import endpoint
    from app.eval.answers import Endpoint

    c: Context = ctx.obj
    storage = c.collection(collection)
    reused = synthesis_run(storage, questions, f"collection {collection!r}") if questions is not None else None
    at = Endpoint(*endpoint(c, url, key)) if "generator" in c.cfg.adapt.roles else None
    connect(c)
    report = run_adapt(c.storage, collection, c.cfg, reused, at)
    if as_json:
        return print_json(report.model_dump())
    q = report.questions
    out.print(f"questions {q.run_id}: {q.counts.train} to train on and {q.counts.heldout} held out, of "
              f"{q.counts.sampled} questions asked ({sum(q.counts.rejected.values())} replies held no new question, "
              f"{q.counts.dropped} failed the round trip)")
    for r in report.roles:
        metric = "per-question F1" if r.role == "generator" else f"nDCG@{c.cfg.gate.k}"
        taught = f" (taught by {r.teacher})" if r.teacher else ""
        out.print(f"{r.role} {r.candidate}{taught} against {r.served}: {r.comparison.describe(metric)}")
        if r.decision == "refused":
            out.print("  refused: nothing served changed")
        elif r.index_version is not None:
            out.print(f"  promoted: index version {r.index_version} is embedded by it; a serving graph swaps to it")
        else:
            out.print(f"  promoted: a graph serving serve.{r.role}.model=catalog:{r.candidate.split(':')[0]} swaps "
                      "to it")


def adapt_questions(
    ctx: typer.Context,
    collection: Collection = "default",
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Only the synthetic questions: sampled chunks → question writer (vLLM on Ray Data) → round trip → a training
    set and a held-out set (JSONL, the question-set format `ragline train reranker` reads)."""
    from app.adapt.run import writer_model
    from app.adapt.synthesize import synthesize

    c: Context = ctx.obj
    storage = c.collection(collection)
    connect(c)
    result = synthesize(storage, c.cfg.adapt, c.cfg.search, *writer_model(c.cfg, c.storage))
    if as_json:
        return print_json(result.model_dump())
    n = result.counts
    out.print(f"synthesis run {result.run_id}: {n.train} training and {n.heldout} held-out questions of {n.sampled} "
              f"asked (rejected {n.rejected or 'none'}, {n.dropped} failed the round trip); writing took "
              f"{result.write_s:.0f} s, the round trip {result.round_trip_s:.0f} s\n"
              f"  {storage.path(result.train_file)}\n  {storage.path(result.heldout_file)}")
