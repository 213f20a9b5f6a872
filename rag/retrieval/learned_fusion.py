"""Choosing fusion settings (per-retriever weights, RRF k, an upstream setting such as BM25 k1) on training
queries by grid search, then applying the chosen setting elsewhere.

Two fusions: weighted RRF (``rag.retrieval.indexes.rrf_fuse``, Cormack et al. 2009), which reads only ranks, and
the convex combination of min-max normalised scores (`fuse_convex`, Bruch, Gai & Ingber 2023), which reads how far
apart the scores are. Scoring is ``rag.eval.metrics.evaluate_run``. Nothing here looks at test queries: callers pass
only training rankings/qrels.
"""
from __future__ import annotations

import itertools
from typing import Hashable, Mapping, Sequence

from rag.eval.metrics import evaluate_run, to_run
from rag.retrieval.indexes import Ranking, min_max, rrf_fuse, weighted_sum

Rankings = Mapping[str, Ranking]  # query id -> ranking (passage index, score), best first


def weight_grid(values: Sequence[float], n: int) -> list[tuple[float, ...]]:
    """All weight vectors of length ``n`` drawn from ``values``, minus the all-zero one, with vectors that
    differ only by a positive factor merged (RRF's order is scale-invariant): each is divided by its maximum.

    Sorted descending (so ``(1, 1, 1)`` and one-retriever vectors like ``(1, 0, 0)`` come early), which fixes
    the tie-break order of `search_fusion`. ``weight_grid([0, 0.5, 1], 2)`` ->
    ``[(1.0, 1.0), (1.0, 0.5), (1.0, 0.0), (0.5, 1.0), (0.0, 1.0)]``. Raises ValueError for a negative value.
    """
    if any(v < 0 for v in values):
        raise ValueError(f"weights must be >= 0, got {list(values)}")
    out = set()
    for w in itertools.product(sorted(set(float(v) for v in values)), repeat=n):
        top = max(w)
        if top > 0:
            out.add(tuple(x / top for x in w))
    return sorted(out, reverse=True)


def fuse(lists: Sequence[Rankings], k: float, weights: Sequence[float], depth: int) -> dict[str, Ranking]:
    """Weighted RRF per query over ``lists`` (each query id -> ranking), cut to ``depth``.

    Lists with weight 0 are left out. Query ids are those of the first list; a list missing a query
    contributes nothing for it.
    """
    used = [(lst, w) for lst, w in zip(lists, weights) if w > 0]
    return {
        qid: rrf_fuse([lst.get(qid, []) for lst, _ in used], k, [w for _, w in used])[:depth]
        for qid in lists[0]
    }


def fuse_convex(lists: Sequence[Rankings], weights: Sequence[float], depth: int) -> dict[str, Ranking]:
    """Convex combination per query over ``lists`` (each query id -> ranking with its retriever's scores), cut to
    ``depth``: score(d) = sum_i w_i * mm_i(d), mm_i = `min_max` of list i (a list that lacks d adds 0); best first,
    passage index ascending on ties.

    Source: Bruch, Gai & Ingber, "An Analysis of Fusion Functions for Hybrid Retrieval", ACM TOIS 2023 (a convex
    combination tuned on a few queries beats RRF, which throws the scores away). Lists with weight 0 are left out;
    query ids are those of the first list. Raises ValueError when the weights do not match the lists.
    """
    if len(weights) != len(lists):
        raise ValueError(f"{len(lists)} lists but {len(weights)} weights")
    return _weighted_sums(_normalised(lists), weights, depth)


def _normalised(lists: Sequence[Rankings]) -> list[dict[str, dict[int, float]]]:
    """Each list's rankings as `min_max` scores per query."""
    return [{qid: min_max(ranking) for qid, ranking in lst.items()} for lst in lists]


def _weighted_sums(normalised: Sequence[Mapping[str, Mapping[int, float]]], weights: Sequence[float],
                   depth: int) -> dict[str, Ranking]:
    """`fuse_convex` over lists already normalised by `_normalised` (the grid search normalises once)."""
    return {qid: weighted_sum([lst.get(qid, {}) for lst in normalised], weights)[:depth] for qid in normalised[0]}


def search_fusion(
    lists_by_setting: Mapping[Hashable, Sequence[Rankings]],
    qrels: Mapping[str, Mapping[str, int]],
    passage_ids: Sequence[str],
    weights: Sequence[tuple[float, ...]],
    k_grid: Sequence[float],
    depth: int,
    objective: str = "ndcg@10",
    fusion: str = "rrf",
) -> tuple[dict, list[dict]]:
    """Grid search of (setting, RRF k, weights) maximising ``objective`` (a key of ``evaluate_run``'s result,
    e.g. ``"ndcg@10"``) on the given (training) queries; ``fusion`` ``"rrf"`` (`fuse`) or ``"convex"``
    (`fuse_convex`, which has no k: ``k_grid`` is ignored and ``rrf_k`` is None).

    lists_by_setting: upstream setting (e.g. BM25 k1) -> one rankings dict per retriever, same order as each
    weight vector. Candidates are tried in the order setting (mapping order), k, weights; a later candidate
    wins only with a strictly higher objective, so ties go to the earlier one.
    Returns ``(best, table)``: ``best`` = ``{"setting", "rrf_k", "weights", objective: value}`` and ``table``
    one such dict per candidate. Raises ValueError for an objective ``evaluate_run`` does not produce or another
    fusion.
    """
    name, _, cut = objective.partition("@")
    if name not in ("recall", "mrr", "ndcg", "hit") or not cut.isdigit():
        raise ValueError(f"objective must look like 'ndcg@10', got {objective!r}")
    if fusion not in ("rrf", "convex"):
        raise ValueError(f"fusion must be 'rrf' or 'convex', got {fusion!r}")
    cut_k = int(cut)
    table: list[dict] = []
    best: dict | None = None
    for setting, lists in lists_by_setting.items():
        normalised = _normalised(lists) if fusion == "convex" else None
        for k in (k_grid if fusion == "rrf" else [None]):
            for w in weights:
                if len(w) != len(lists):
                    raise ValueError(f"{len(lists)} lists but {len(w)} weights")
                fused = (fuse(lists, k, w, min(depth, cut_k)) if fusion == "rrf"
                         else _weighted_sums(normalised, w, min(depth, cut_k)))
                value = evaluate_run(qrels, to_run(fused, list(passage_ids)), ks=(cut_k,))[objective]
                row = {"setting": setting, "rrf_k": k, "weights": list(w), objective: value}
                table.append(row)
                if best is None or value > best[objective]:
                    best = row
    if best is None:
        raise ValueError("empty grid")
    return best, table
