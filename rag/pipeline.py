"""The voice chain as steps: evaluate -> threshold -> answer -> final.

The DVC stages call one step each (with files in between); `run_chain` calls them all in memory
for the CLI, on any KB folder and queries file. ``p`` is a params mapping shaped like params.yaml.
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from rag import config
from rag.answer import answer_row, decide
from rag.chunk import load_kb
from rag.evaluate import doc_runs, embed_texts, retrieval_metrics, top1_cosine
from rag.gate import ThresholdError, choose_tau
from rag.queries import check_against_kb, load_queries, raw_queries, rewrite_queries
from rag.scoring import final_metrics
from rag.search import PassageIndex
from rag.selection import AnswerScorer, load_scorer
from rag.sentences import SentenceIndex


def gate_scores(index: PassageIndex, queries: Sequence[dict], texts: Mapping[str, str],
                vectors: Mapping[str, np.ndarray], p: Mapping) -> dict[str, float]:
    """``{query_id: abstention score}`` of the signal ``abstain.signal`` (higher = more answerable).

    ``combined`` is a logistic model over all signals, fitted on ``queries`` (their ``answerable``
    labels), the same questions tau is fitted on; see `rag.abstain`. Raises ThresholdError when the
    labels hold one class only.
    """
    from rag import abstain

    feats = abstain.features(index, texts, vectors, p["retrieval"]["stopwords"] or ())
    model = _gate_model(feats, queries, p)
    return {q: round(s, 6) for q, s in abstain.signal_scores(p["abstain"]["signal"], feats, model).items()}


def _gate_model(feats: Mapping[str, Mapping[str, float]], queries: Sequence[dict], p: Mapping):
    """The `rag.abstain.fit_combined` model on ``feats`` and the queries' labels (None unless
    ``abstain.signal`` is combined). Raises ThresholdError when the labels hold one class only."""
    from rag import abstain

    if p["abstain"]["signal"] != "combined":
        return None
    ids = list(feats)
    labels = {q["id"]: q["answerable"] for q in queries}
    if len({labels[q] for q in ids}) < 2:
        raise ThresholdError("the combined abstention signal is fitted on the questions' labels: "
                             "it needs answerable and unanswerable questions")
    return abstain.fit_combined([feats[q] for q in ids], [labels[q] for q in ids], int(p["abstain"]["seed"]))


def fit_gate(index: PassageIndex, queries: Sequence[dict], texts: Mapping[str, str],
             vectors: Mapping[str, np.ndarray], p: Mapping, apply_to: PassageIndex | None = None):
    """The gate as a function ``(query, (384,) unit vector) -> score`` (one question at a time, as a turn needs
    it), with the model of `gate_scores` fitted on ``queries`` searched in ``index``, applied to questions
    searched in ``apply_to`` (default ``index``; another KB gets the gate shipped from this one). Raises
    ThresholdError as `gate_scores` does."""
    from rag import abstain

    stop = p["retrieval"]["stopwords"] or ()
    model = _gate_model(abstain.features(index, texts, vectors, stop), queries, p)

    def score(query: str, vector: np.ndarray) -> float:
        feats = abstain.features(apply_to or index, {"q": query}, {"q": vector}, stop)
        return abstain.signal_scores(p["abstain"]["signal"], feats, model)["q"]
    return score


HEADLINE = ("recall@1", "recall@3", "mrr@10")  # the retrieval metrics step_evaluate reports


def step_evaluate(index: PassageIndex, queries: Sequence[dict], p: Mapping) -> tuple[list[dict], dict]:
    """Search with the raw and the rewritten transcript in ``retrieval.mode``.

    Raises InputError (`rag.queries.check_against_kb`) for gold names not in the KB or no
    answerable query. Returns (per-query rows ``{id, answerable, query, raw_top, top, raw_score, top1, score}``,
    metrics ``{"mode": ..., "raw": {recall_at_1, recall_at_3, mrr_at_10}, "rewritten": {...}}``); ``raw_score`` / ``top1`` are the raw and
    rewritten top-1 cosines, ``score`` is the gate's signal (`gate_scores`) of the rewritten query.
    """
    check_against_kb(queries, {x.doc for x in index.passages})
    mode = p["retrieval"]["mode"]
    rules = config.rewrite_rules(p, index.passages)
    forms = {"raw": raw_queries(queries), "rewritten": rewrite_queries(queries, rules)}
    rows = {q["id"]: {"id": q["id"], "answerable": q["answerable"], "query": forms["rewritten"][q["id"]]}
            for q in queries}
    metrics = {"mode": mode}
    for form, texts in forms.items():
        vectors = embed_texts(texts)
        runs = doc_runs(index, texts, mode, vectors)
        # retrieval.json is a headline file (dvc exp show): recall_at_1, recall_at_3, mrr_at_10; the full
        # matrix is the compare stage's (compare.json keeps "recall@1").
        metrics[form] = {k.replace("@", "_at_"): v for k, v in retrieval_metrics(queries, runs, (1, 3, 10)).items()
                         if k in HEADLINE}
        for qid, cos in top1_cosine(index, vectors).items():
            rows[qid]["raw_top" if form == "raw" else "top"] = [d for d, _ in runs[qid][:3]]
            rows[qid]["raw_score" if form == "raw" else "top1"] = round(cos, 6)
        if form == "rewritten":
            for qid, score in gate_scores(index, queries, texts, vectors, p).items():
                rows[qid]["score"] = score
    return list(rows.values()), metrics


def step_threshold(per_query: Sequence[dict], p: Mapping) -> dict:
    """Fit tau on the rewritten queries' gate scores (see `rag.gate.choose_tau`)."""
    return choose_tau({r["id"]: r["score"] for r in per_query},
                      {r["id"]: r["answerable"] for r in per_query}, p["threshold"]["policy"],
                      float(p["threshold"]["epsilon"]))


@contextlib.contextmanager
def llm_url(p: Mapping):
    """Yield the LLM base URL: ``llm.url`` if set, else a local llama.cpp server started here and
    stopped (by PID) on exit, errors included. Yields None when the local server fails to start,
    so the answer step falls back instead of crashing."""
    if p["llm"]["url"]:
        yield p["llm"]["url"]
        return
    from rag.llm_server import LocalServer

    server = LocalServer(n_ctx=int(p["llm"]["n_ctx"]), threads=int(p["llm"]["threads"]))
    try:
        server.start()
    except (RuntimeError, FileNotFoundError):
        yield None
        return
    try:
        yield server.url
    finally:
        server.stop()


def step_answer(index: PassageIndex, queries: Sequence[dict], kb: Mapping[str, str], p: Mapping,
                tau: float, url: str | None, scores: Mapping[str, float]) -> list[dict]:
    """answers.jsonl rows for every query (see `rag.answer.answer_row`); ``scores`` are the gate
    scores of `step_evaluate` (``{query_id: score}``), compared with ``tau``."""
    settings = config.answer_settings(p, tau)
    rewritten = rewrite_queries(queries, config.rewrite_rules(p, index.passages))
    vectors = embed_texts(rewritten)
    return [answer_row(qid, rewritten[qid], index, vectors[qid], scores[qid], settings, kb, url)
            for qid in rewritten]


def step_final(answers: Sequence[dict], queries: Sequence[dict], kb: Mapping[str, str], p: Mapping,
               tau: float, sentences: SentenceIndex | None = None,
               scorer: AnswerScorer | None = None) -> tuple[list[dict], dict]:
    """Verify or replace every answer; returns (final.jsonl rows, final metrics). ``sentences``: the KB's
    precomputed `SentenceIndex` (the embed_sentences stage's); None builds it from ``kb`` here, once.
    ``scorer``: the learned answer selection (`rag.answer.decide`); None: the table-driven pick."""
    settings, rules = config.answer_settings(p, tau), config.verify_rules(p)
    sentences = sentences or SentenceIndex.build(kb)
    vectors = embed_texts({a["id"]: a["query"] for a in answers})
    rows = [decide(a, kb, vectors[a["id"]], settings, rules, sentences, scorer) for a in answers]
    return rows, final_metrics(queries, rows, kb)


def latency_metrics(answers: Sequence[dict]) -> dict:
    """p50/p95 (ms) of first-token and total LLM latency over the queries that called the model."""
    from rag.bench import summary

    return {key: summary([a[key] for a in answers if a.get(key) is not None]) for key in ("first_token_ms", "total_ms")}


def answer_question(question: str, p: Mapping, tau: float, url: str | None) -> tuple[dict, dict, float, dict]:
    """One typed question on the clinic KB (``fixtures/voice/kb``) the way a turn runs: rewrite, gate
    (``abstain.signal``; the combined model fitted on the clinic fixture ``voice.queries``), retrieve, ask the LLM
    at ``url`` (None: down), verify, fall back (``select.design``'s scorer). Returns ``(final row of
    `rag.answer.decide`, the answer row, the gate score, {doc: text})``."""
    from rag import abstain
    from rag.rewrite import rewrite
    from rag.search import DEFAULT_KB

    settings = config.answer_settings(p, tau)
    index, kb = PassageIndex.from_folder(DEFAULT_KB, config.hybrid_config(p)), load_kb(DEFAULT_KB)
    rules = config.rewrite_rules(p, index.passages)
    fixture = load_queries(p["voice"]["queries"])
    texts = {**rewrite_queries(fixture, rules), "cli": rewrite(question, None, rules)}
    vectors = embed_texts(texts)
    feats = abstain.features(index, texts, vectors, p["retrieval"]["stopwords"] or ())
    signal = p["abstain"]["signal"]
    model = abstain.fit_combined([feats[q["id"]] for q in fixture], [q["answerable"] for q in fixture],
                                 int(p["abstain"]["seed"])) if signal == "combined" else None
    score = abstain.signal_scores(signal, {"cli": feats["cli"]}, model)["cli"]
    row = answer_row("cli", texts["cli"], index, vectors["cli"], score, settings, kb, url)
    scorer = load_scorer(p["select"]["design"], p["select"]["model_dir"])
    return decide(row, kb, vectors["cli"], settings, config.verify_rules(p), scorer=scorer), row, score, kb


def run_chain(kb_folder: str | Path, queries_path: str | Path, p: Mapping) -> dict:
    """evaluate -> threshold -> answer -> final on any KB folder and queries file; all metrics.

    Raises rag.io.InputError for bad inputs, ValueError / KeyError / TypeError for bad params
    (`rag.config.check`, `rag.selection.load_scorer` for ``select``) and rag.gate.ThresholdError when no tau
    separates the questions, all before any LLM call.
    """
    config.check(p)
    scorer = load_scorer(p["select"]["design"], p["select"]["model_dir"])  # model_dir: relative to the cwd
    queries = load_queries(queries_path)
    index = PassageIndex.from_folder(kb_folder, config.hybrid_config(p))
    kb = load_kb(kb_folder)
    per_query, retrieval = step_evaluate(index, queries, p)
    tau = step_threshold(per_query, p)
    with llm_url(p) as url:
        answers = step_answer(index, queries, kb, p, tau["tau"], url, {r["id"]: r["score"] for r in per_query})
    final_rows, final = step_final(answers, queries, kb, p, tau["tau"], scorer=scorer)
    return {"retrieval": retrieval, "threshold": tau, "final": final, "latency": latency_metrics(answers),
            "answers": final_rows}
