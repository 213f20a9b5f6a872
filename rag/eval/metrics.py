"""Ranking metrics for a run against qrels: recall@k, MRR@k, nDCG@k, Hit@k, computed with ir-measures.

Definitions (per query, then the mean over the evaluated queries), with rel(d) the qrels grade and a passage
relevant when rel(d) > 0:
- recall@k = |relevant in top k| / |relevant|                      (ir-measures ``R@k``)
- mrr@k    = 1 / rank of the first relevant passage in the top k, else 0   (``RR@k``)
- ndcg@k   = DCG@k / ideal DCG@k, DCG = sum rel(d_i) / log2(i + 1)  (``nDCG@k``, trec_eval's linear gain;
  Jaervelin & Kekaelaeinen 2002)
- hit@k    = 1 if any relevant passage is in the top k, else 0      (``Success@k``)

Ties: trec_eval (behind ir-measures' pytrec_eval provider) orders equal scores by passage id *descending*,
while other providers differ. ``evaluate_run`` therefore first turns every query's scores into a strict order:
score descending, then passage id ascending (plain string order), and evaluates that order. Runs built from
``rag.retrieval.indexes.rank`` already have distinct rank positions, so this only matters for exact score ties.
"""
from __future__ import annotations

from typing import Iterable, Mapping

import ir_measures
from ir_measures import RR, R, Success, nDCG

Qrels = Mapping[str, Mapping[str, int]]
Run = Mapping[str, Mapping[str, float]]

_NAMES = {"recall": R, "mrr": RR, "ndcg": nDCG, "hit": Success}


def strict_order(scores: Mapping[str, float]) -> list[str]:
    """Passage ids of one query's run, score descending, passage id ascending on ties."""
    return [pid for pid, _ in sorted(scores.items(), key=lambda item: (-item[1], item[0]))]


def evaluate_run(qrels: Qrels, run: Run, ks: Iterable[int] = (1, 5, 10)) -> dict[str, float]:
    """Mean recall@k, MRR@k, nDCG@k and Hit@k of ``run`` over the queries of ``qrels``.

    qrels: ``{query_id: {passage_id: grade}}``, grade > 0 is relevant; queries with no relevant passage
    are skipped (no metric is defined for them). run: ``{query_id: {passage_id: score}}``, higher is better;
    a qrels query missing from the run (or with an empty run) scores 0 on every metric; run queries that are
    not in qrels are ignored. ks: cutoffs, each >= 1.

    Returns ``{"recall@1": ..., "mrr@1": ..., "ndcg@1": ..., "hit@1": ..., "recall@5": ..., ...}``, floats in
    [0, 1]. Raises ValueError for a cutoff < 1 or when no qrels query has a relevant passage.
    """
    ks = sorted(set(int(k) for k in ks))
    if not ks or ks[0] < 1:
        raise ValueError(f"cutoffs must be >= 1, got {ks}")
    evaluated = {
        qid: {pid: int(g) for pid, g in judged.items()}
        for qid, judged in qrels.items()
        if any(int(g) > 0 for g in judged.values())
    }
    if not evaluated:
        raise ValueError("no query in qrels has a relevant passage")
    ordered_run = {}
    for qid in evaluated:
        scores = run.get(qid) or {}
        order = strict_order(scores)
        # Strictly decreasing integer-valued scores: every provider sees the same order.
        ordered_run[qid] = {pid: float(len(order) - i) for i, pid in enumerate(order)}
    measures = {f"{name}@{k}": measure @ k for k in ks for name, measure in _NAMES.items()}
    by_measure = {m: name for name, m in measures.items()}
    totals = dict.fromkeys(measures, 0.0)
    run_nonempty = {qid: docs for qid, docs in ordered_run.items() if docs}
    if run_nonempty:
        for metric in ir_measures.iter_calc(list(measures.values()), evaluated, run_nonempty):
            if metric.query_id in run_nonempty:
                totals[by_measure[metric.measure]] += float(metric.value)
    n = len(evaluated)
    return {name: totals[name] / n for name in measures}


def to_run(rankings: Mapping[str, list[tuple[int, float]]], passage_ids: list[str]) -> dict[str, dict[str, float]]:
    """Turn ``{query_id: [(passage_index, score), ...]}`` (rag.retrieval.indexes rankings, best first) into a run.

    The run score is the reversed rank position (``len - position``), so the ranking's own order, including
    its tie-breaks, is what gets evaluated. Raises IndexError for a passage index outside ``passage_ids``.
    """
    run = {}
    for qid, ranking in rankings.items():
        n = len(ranking)
        run[qid] = {passage_ids[idx]: float(n - pos) for pos, (idx, _) in enumerate(ranking)}
    return run
