"""Promotion that is earned: a generator version is promoted only when it answers better than the one being
served, judged by the answer evaluation (`app.eval.answers`) on the same question set, asked the same way, and
better past noise: a paired bootstrap over the questions' F1 (`app.eval.paired`, `gate` in the config) must put the
whole interval of the difference above zero.

The candidate is served by a copy of the running graph beside it (`app.serving.deploy_candidate`, route
`/candidate`) that asks the served graph's Retriever and Reranker: the same passages and prompt, with only the
generator changed. The served graph and the candidate answer the same questions over HTTP; the copy is removed
afterwards, whatever happened. A promotion then reaches users through the hot swap the graph already does for
`serve.generator.model=catalog:NAME`.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from app import collections, serving
from app.catalog import Catalog
from app.config import GateConfig
from app.errors import Conflict, UserError
from app.eval.answers import AnswerEvalReport, Endpoint, evaluate_answers, per_question
from app.eval.paired import Comparison, paired_bootstrap
from app.storage import Storage

CANDIDATE_READY_S = 900.0  # a vLLM replica loads in under a minute on CPU; a busy machine takes longer


class PromotionResult(BaseModel):
    name: str
    version: int
    forced: bool = False  # promoted without being judged (--force)
    served: AnswerEvalReport | None = None  # the graph as it serves now
    candidate: AnswerEvalReport | None = None  # the same graph with the candidate as its generator
    comparison: Comparison | None = None  # per-question F1, paired
    # an embedder: the index version that re-embedded the collection with it, which the graph swaps to
    index_version: int | None = None
    collection: str | None = None


def compare(storage: Storage, served: AnswerEvalReport, candidate: AnswerEvalReport, gate: GateConfig) -> Comparison:
    """The paired bootstrap of the two runs' per-question F1 (their stored rows)."""
    a, b = per_question(storage, served.run_id), per_question(storage, candidate.run_id)
    assert a.keys() == b.keys(), "asked different questions"
    qids = sorted(a)
    return paired_bootstrap([a[q].f1 for q in qids], [b[q].f1 for q in qids], gate.resamples, gate.confidence)


def refusal(served: AnswerEvalReport, candidate: AnswerEvalReport, comparison: Comparison) -> str | None:
    """Why the candidate is not promoted, or None. It must answer better (F1) than what is served past noise (a
    tie keeps what users have), and every question must have been answered by both: a failed request scores zero,
    which would make the comparison about load rather than answers."""
    assert (served.dataset, served.split, served.questions) == (candidate.dataset, candidate.split,
                                                                 candidate.questions), "asked different questions"
    if served.errors or candidate.errors:
        return (f"{served.errors} requests to the served graph and {candidate.errors} to the candidate failed "
                "(see the eval runs' rows); ask again when the graph is less busy, or with a lower --limit")
    if not comparison.better:
        return f"it does not answer better past noise ({comparison.describe('per-question F1')})"
    return None


def question_set(manifest_config: dict, dataset: Path | None) -> Path:
    """The given question set, else the one the version was fine-tuned from (its rag_qa dataset, whose dev split
    it never saw)."""
    if dataset is not None:
        return dataset
    rag_qa = ((manifest_config.get("sft") or {}).get("rag_qa") or {}).get("dataset")
    if not rag_qa:
        raise UserError("this version was not fine-tuned on a question set: give --dataset (questions to judge it "
                        "by) or --force")
    return Path(rag_qa)


class GeneratorJudgment(BaseModel):
    """The served graph and a copy of it serving the candidate, asked the same questions."""

    served: AnswerEvalReport
    candidate: AnswerEvalReport
    comparison: Comparison  # per-question F1, paired
    refusal: str | None  # why the candidate is not promoted (`refusal`); None: it earned it


def judge_generator(storage: Storage, spec: str, endpoint: Endpoint, questions: Path, *, idk: str,
                    gate: GateConfig | None = None, split: str = "dev", limit: int | None = 200,
                    concurrency: int = 8, collection: str = collections.DEFAULT) -> GeneratorJudgment:
    """The graph served at `endpoint` against a copy of it whose generator is `spec` (catalog:NAME:VERSION), on
    the same questions about `collection`. Needs a connected Ray."""

    def ask(at: Endpoint) -> AnswerEvalReport:
        return evaluate_answers(questions, split, at, storage, idk=idk, limit=limit, concurrency=concurrency,
                                collection=collection)

    try:
        prefix, apps = serving.deploy_candidate(spec)
        served = ask(endpoint)  # while the candidate loads
        serving.wait_running(apps, CANDIDATE_READY_S)
        candidate = ask(Endpoint(endpoint.url.rstrip("/") + prefix, endpoint.key, endpoint.timeout_s))
    finally:
        serving.remove_candidate()
    comparison = compare(storage, served, candidate, gate or GateConfig())
    return GeneratorJudgment(served=served, candidate=candidate, comparison=comparison,
                             refusal=refusal(served, candidate, comparison))


def promote_generator(storage: Storage, name: str, version: int, endpoint: Endpoint, *, idk: str,
                      gate: GateConfig | None = None, dataset: Path | None = None, split: str = "dev",
                      limit: int | None = 200, concurrency: int = 8) -> PromotionResult:
    """Promotes generator `name` `version` if it beats the served graph on the question set; otherwise raises
    Conflict with both scores. Needs a connected Ray and the graph served at `endpoint`."""
    catalog = Catalog(storage)
    questions = question_set(catalog.get_model(name, version).config, dataset)
    j = judge_generator(storage, f"catalog:{name}:{version}", endpoint, questions, idk=idk, gate=gate, split=split,
                        limit=limit, concurrency=concurrency)
    served, candidate = j.served, j.candidate
    if j.refusal:
        raise Conflict(
            f"not promoted: {name} v{version} scores F1 {candidate.f1:.1f} (exact match {candidate.exact_match:.1f})"
            f" on {candidate.questions} {split} questions of {questions.name}, against F1 {served.f1:.1f} (exact "
            f"match {served.exact_match:.1f}) for {served.generator}, served now: {j.refusal} (eval runs "
            f"{candidate.run_id}, {served.run_id}); --force promotes it anyway")
    catalog.promote(name, version)
    return PromotionResult(name=name, version=version, served=served, candidate=candidate, comparison=j.comparison)
