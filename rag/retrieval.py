"""Retrieval primitives shared by both tracks: ranking, BM25, dense cosine search, RRF fusion.

A *ranking* here is a list of ``(passage_index, score)`` sorted by score descending, ties broken
by the lower passage index, so every run is reproducible.
"""
from __future__ import annotations

import re
from typing import Callable, Iterable, Sequence

import numpy as np
from rank_bm25 import BM25Okapi

Tokenizer = Callable[[str], list[str]]
Ranking = list[tuple[int, float]]

_WORD = re.compile(r"\w+")


def word_tokens(text: str, stopwords: Iterable[str] = (), min_len: int = 1) -> list[str]:
    """Lower-case word tokens (``\\w+``), minus ``stopwords`` and tokens shorter than ``min_len``."""
    stop = stopwords if isinstance(stopwords, (set, frozenset)) else set(stopwords)
    return [t for t in _WORD.findall(text.lower()) if len(t) >= min_len and t not in stop]


def rank(scores: np.ndarray, k: int | None = None) -> Ranking:
    """Top-``k`` of a 1-D score array as ``(index, score)``: score descending, index ascending on ties.

    ``k=None`` ranks everything. Raises ValueError for ``k < 1``.
    """
    scores = np.asarray(scores, dtype=np.float64)
    if k is not None and k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    order = np.lexsort((np.arange(len(scores)), -scores))
    if k is not None:
        order = order[:k]
    return [(int(i), float(scores[i])) for i in order]


class DenseIndex:
    """Exact cosine search over L2-normalised passage vectors.

    ``vectors``: (n, d) float32, rows of unit length. Scores are cosines in [-1, 1].
    """

    def __init__(self, vectors: np.ndarray):
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or len(vectors) == 0:
            raise ValueError(f"expected a non-empty (n, d) matrix, got shape {vectors.shape}")
        self.vectors = vectors

    def get_scores(self, query_vector: np.ndarray) -> np.ndarray:
        """Cosine of the (d,) unit query vector with every passage: (n,) float32."""
        return self.vectors @ np.asarray(query_vector, dtype=np.float32)

    def top_k(self, query_vector: np.ndarray, k: int) -> Ranking:
        """The ``k`` most similar passages as ``(index, cosine)``."""
        return rank(self.get_scores(query_vector), k)


class BM25Index:
    """Okapi BM25 (Robertson & Zaragoza 2009) via ``rank_bm25.BM25Okapi``, with a pluggable tokenizer.

    ``k1`` (term-frequency saturation) and ``b`` (length normalisation) default to rank_bm25's 1.5 / 0.75.
    Raises ValueError for an empty passage list.
    """

    def __init__(self, passages: Sequence[str], tokenize: Tokenizer = word_tokens, k1: float = 1.5, b: float = 0.75):
        if not passages:
            raise ValueError("BM25Index needs at least one passage")
        self.tokenize = tokenize
        docs = [tokenize(p) for p in passages]
        # rank_bm25 divides by the mean length: keep a placeholder token for empty passages.
        self._bm25 = BM25Okapi([d or ["\x00"] for d in docs], k1=k1, b=b)
        self.vocabulary = frozenset(t for d in docs for t in d)

    def get_scores(self, query: str) -> np.ndarray:
        """BM25 score of ``query`` against every passage: (n,) float64, >= 0 for n >= 3."""
        return self._bm25.get_scores(self.tokenize(query))

    def top_k(self, query: str, k: int) -> Ranking:
        """The ``k`` best passages as ``(index, bm25 score)``."""
        return rank(self.get_scores(query), k)


def rrf_fuse(rankings: Sequence[Ranking], k: int = 60, weights: Sequence[float] | None = None) -> Ranking:
    """Reciprocal Rank Fusion (Cormack, Clarke & Buettcher, SIGIR 2009) over the union of candidates.

    score(d) = sum_i w_i / (k + rank_i(d)), rank from 1; a list that lacks d adds nothing.
    Returns every candidate of every list as ``(index, rrf score)``, best first.
    """
    weights = [1.0] * len(rankings) if weights is None else list(weights)
    if len(weights) != len(rankings):
        raise ValueError(f"{len(rankings)} rankings but {len(weights)} weights")
    fused: dict[int, float] = {}
    for ranking, w in zip(rankings, weights):
        for r, (idx, _) in enumerate(ranking, 1):
            fused[idx] = fused.get(idx, 0.0) + w / (k + r)
    return sorted(fused.items(), key=lambda item: (-item[1], item[0]))
