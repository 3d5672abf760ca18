"""`ragline eval retrieval|answers|corpus`: how well the index retrieves, and how well the served graph answers."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from app.cli.context import Collection, Context, connect
from app.cli.render import out, print_json
from app.cli.serve import endpoint
from app.errors import UserError


def eval_retrieval(
    ctx: typer.Context,
    dataset: Annotated[Path, typer.Option(help="BEIR-style directory: corpus.jsonl, queries.jsonl, qrels/.")],
    split: Annotated[str, typer.Option(help="qrels split.")] = "dev",
    rerank: Annotated[bool, typer.Option(help="Also rerank each mode's top chunks: <mode>+rerank as the serving "
                                         "graph does (the cross-encoder fused with the retriever's order, "
                                         "serve.reranker.retriever_weight), <mode>+ce by the cross-encoder "
                                         "alone.")] = False,
    reranker: Annotated[str, typer.Option(help="CrossEncoder for --rerank: catalog:NAME[:VERSION], a directory "
                                          "or a hub id.")] = "catalog:reranker",
    rerank_top: Annotated[int, typer.Option(help="Chunks reranked per query.")] = 50,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """nDCG@10 and recall@100 of dense, BM25 and hybrid search on a BEIR-style dataset (and reranked)."""
    from app.eval.retrieval import evaluate_retrieval

    c: Context = ctx.obj
    if not 1 <= rerank_top <= 1000:
        raise UserError(f"--rerank-top must be between 1 and 1000, not {rerank_top}")
    connect(c)
    result = evaluate_retrieval(dataset, split, c.storage.uri, c.cfg, reranker=reranker if rerank else None,
                                rerank_top=rerank_top)
    if as_json:
        print_json(result)
        return
    t = Table("mode", "nDCG@10", "recall@100",
              title=f"{result['dataset']} {result['split']} ({result['queries']} queries)")
    for mode, m in result["modes"].items():
        t.add_row(mode, f"{m['ndcg@10']:.4f}", f"{m['recall@100']:.4f}" if "recall@100" in m else "-")
    out.print(t)


def eval_answers(
    ctx: typer.Context,
    dataset: Annotated[Path, typer.Option(help="SQuAD v1.1 JSON, or JSONL lines {question, answers, doc_id} about "
                                          "documents already ingested.")],
    split: Annotated[str, typer.Option(help="train, dev or all. SQuAD is split by article: dev is a quarter of "
                                       "the articles, never trained on.")] = "dev",
    limit: Annotated[int | None, typer.Option(min=1, help="Ask this many questions, spread evenly over the "
                                              "split. [default: all]")] = None,
    url: Annotated[str | None, typer.Option(help="Endpoint. [default: the one `ragline serve` started]")] = None,
    key: Annotated[str | None, typer.Option(help="API key. [default: as `ragline serve` resolves it]")] = None,
    k: Annotated[int, typer.Option("-k", min=1, help="Passages retrieved per question (top_k).")] = 5,
    max_tokens: Annotated[int | None, typer.Option(min=1, help="Cap answers below the server's own budget.")] = None,
    concurrency: Annotated[int, typer.Option(min=1, max=256, help="Requests in flight.")] = 8,
    collection: Collection = "default",
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Ask a question set at the serving endpoint as users do; score exact match, F1, citations, latency."""
    from app.eval.answers import Endpoint, evaluate_answers

    c: Context = ctx.obj
    at = Endpoint(*endpoint(c, url, key))
    connect(c)
    report = evaluate_answers(dataset, split, at, c.storage, idk=c.cfg.serve.generator.idk_answer,
                              limit=limit, top_k=k, max_tokens=max_tokens, concurrency=concurrency,
                              collection=collection)
    if as_json:
        return print_json(report.model_dump())
    t = Table(show_header=False, title=f"{report.dataset} {report.split}: {report.questions} questions, "
              f"{report.generator}, index v{report.index_version} (run {report.run_id})")
    for label, value in (("exact match", f"{report.exact_match:.1f}"), ("F1", f"{report.f1:.1f}"),
                         ("citation accuracy", f"{report.citation_accuracy:.3f}"),
                         ("gold passage in the prompt", f"{report.gold_in_context:.3f}"),
                         ("\"I don't know\"", f"{report.idk_rate:.3f}"),
                         ("answer tokens (mean)", f"{report.answer_tokens:.1f}"),
                         ("latency p50 / p95", f"{report.latency_p50_s:.2f} / {report.latency_p95_s:.2f} s"),
                         ("tokens/s", f"{report.tokens_per_s:.1f}"), ("failed requests", str(report.errors)),
                         ("wall time", f"{report.wall_s:.1f} s")):
        t.add_row(label, value)
    out.print(t)


def eval_corpus(
    dataset: Annotated[Path, typer.Argument(help="SQuAD v1.1 JSON file.")],
    output: Annotated[Path, typer.Argument(help="JSONL corpus to write: one {id, title, text} per paragraph.")],
) -> None:
    """Write a SQuAD file's paragraphs as a corpus for `ragline ingest` (ids <article>#<paragraph>)."""
    from app.qa.questions import write_corpus

    n = write_corpus(dataset, output)
    out.print(f"wrote {n} paragraphs to {output}")
