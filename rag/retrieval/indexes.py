"""Retrieval primitives shared by both tracks: ranking, BM25, dense cosine search, RRF fusion.

A *ranking* here is a list of ``(passage_index, score)`` sorted by score descending, ties broken
by the lower passage index, so every run is reproducible.
"""
from __future__ import annotations

import functools
import math
import re
from typing import Callable, Collection, Iterable, Mapping, Sequence

from pathlib import Path

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
    if k is not None and k < len(scores):  # partition first (O(n)); ties at the k-th score all compete
        kth = np.partition(scores, len(scores) - k)[len(scores) - k]
        candidates = np.flatnonzero(scores >= kth)
        order = candidates[np.lexsort((candidates, -scores[candidates]))][:k]
    else:
        order = np.lexsort((np.arange(len(scores)), -scores))
    return [(int(i), float(scores[i])) for i in order]


def best_sentence_ranking(owner: np.ndarray, sentence_vectors: np.ndarray, query_vector: np.ndarray, n: int,
                          k: int | None = None) -> Ranking:
    """Passages by the best cosine of any of their sentences with the (d,) unit query vector, as `rank` orders them
    (top ``k``; None: all). owner: (m,) int, the passage index of each sentence; sentence_vectors: (m, d) unit rows;
    n: the number of passages (one without a sentence scores -inf, last)."""
    best = np.full(n, -np.inf)
    np.maximum.at(best, owner, np.asarray(sentence_vectors, dtype=np.float32) @ np.asarray(query_vector, np.float32))
    return rank(best, k)


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

    def top_k(self, query_vector: np.ndarray, k: int | None = None) -> Ranking:
        """The ``k`` most similar passages as ``(index, cosine)`` (None: all, best first)."""
        return rank(self.get_scores(query_vector), k)

    def best(self, query_vector: np.ndarray) -> float:
        """The highest cosine of any passage with the (d,) unit query vector."""
        return float(self.get_scores(query_vector).max())


class HNSWIndex:
    """Approximate cosine search: a faiss HNSW graph (Malkov & Yashunin 2018, "Efficient and robust approximate
    nearest neighbor search using Hierarchical Navigable Small World graphs") over L2-normalised vectors with
    inner-product distance, so scores are cosines in [-1, 1], as `DenseIndex`'s.

    vectors: (n, d) float32 unit rows (or ``index``: a built faiss index, e.g. from `load`); m: graph links per
    node; ef_construction: candidates kept while building; ef_search: candidates kept per query (recall vs time;
    a ranking never holds more than this many passages).
    """

    def __init__(self, vectors: np.ndarray | None = None, m: int = 16, ef_construction: int = 80,
                 ef_search: int = 64, index=None):
        import faiss

        if index is None:
            vectors = np.ascontiguousarray(vectors, dtype=np.float32)
            if vectors.ndim != 2 or len(vectors) == 0:
                raise ValueError(f"expected a non-empty (n, d) matrix, got shape {vectors.shape}")
            index = faiss.IndexHNSWFlat(vectors.shape[1], int(m), faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efConstruction = int(ef_construction)
            index.add(vectors)
        index.hnsw.efSearch = int(ef_search)
        self.index, self.ef_search = index, int(ef_search)

    def top_k(self, query_vector: np.ndarray, k: int | None = None) -> Ranking:
        """The (about) ``k`` most similar passages as ``(index, cosine)``, best first; k None or above
        ``ef_search``: ``ef_search`` of them."""
        k = min(k or self.ef_search, self.ef_search, self.index.ntotal)
        scores, ids = self.index.search(np.asarray(query_vector, dtype=np.float32).reshape(1, -1), k)
        return [(int(i), float(s)) for i, s in zip(ids[0], scores[0]) if i >= 0]

    def best(self, query_vector: np.ndarray) -> float:
        """The highest cosine the graph search finds (approximate)."""
        return self.top_k(query_vector, 1)[0][1]

    def save(self, path: str | Path) -> None:
        """Write the index (faiss's own format) atomically: a temporary file, then a rename."""
        import faiss

        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        faiss.write_index(self.index, str(tmp))
        tmp.replace(path)

    @classmethod
    def load(cls, path: str | Path, ef_search: int = 64) -> "HNSWIndex":
        """An index `save` wrote; InputError naming the file when it is not one."""
        import faiss

        from rag.io import InputError

        try:
            index = faiss.read_index(str(path))
        except RuntimeError as e:
            raise InputError(f"{path}: not a faiss index ({str(e).splitlines()[0]})") from None
        if not hasattr(index, "hnsw"):
            raise InputError(f"{path}: a faiss index, but not an HNSW one")
        return cls(index=index, ef_search=ef_search)


BM25_ENGINES = ("rank_bm25", "bm25s")


class BM25Index:
    """Okapi BM25 (Robertson & Zaragoza 2009) with a pluggable tokenizer, on one of `BM25_ENGINES`:
    ``rank_bm25`` (``BM25Okapi``: every passage scored per query, the default, right for small KBs) or ``bm25s``
    (Lù 2024: scores precomputed into a sparse matrix, Lucene's variant: IDF ln(1 + (N - n + 0.5) / (n + 0.5)), no
    (k1 + 1) factor; ~77x faster at 100k passages in stage scale_bench, and the top 10 agree 98 %).

    ``k1`` (term-frequency saturation) and ``b`` (length normalisation) default to 1.5 / 0.75.
    Raises ValueError for an empty passage list or an unknown engine.
    """

    def __init__(self, passages: Sequence[str], tokenize: Tokenizer = word_tokens, k1: float = 1.5, b: float = 0.75,
                 engine: str = "rank_bm25"):
        if not passages:
            raise ValueError("BM25Index needs at least one passage")
        if engine not in BM25_ENGINES:
            raise ValueError(f"BM25 engine must be one of {BM25_ENGINES}, got {engine!r}")
        self.tokenize, self.engine, self.n = tokenize, engine, len(passages)
        docs = [tokenize(p) for p in passages]
        self.vocabulary = frozenset(t for d in docs for t in d)
        # Both divide by the mean length (and bm25s needs a word): a placeholder token for empty passages, never
        # in a query (queries are matched against the vocabulary above).
        docs = [d or ["\x00"] for d in docs]
        if engine == "bm25s":
            import bm25s

            self._sparse = bm25s.BM25(k1=k1, b=b)
            self._sparse.index(docs, show_progress=False)
            self._doc_tokens = [frozenset(d) for d in docs]
        else:
            self._bm25 = BM25Okapi(docs, k1=k1, b=b)
            self._doc_tokens = self._bm25.doc_freqs

    @functools.cached_property
    def postings(self) -> dict[str, frozenset[int]]:
        """``{token: indices of the passages holding it}``; its size is the token's document frequency."""
        holders: dict[str, set[int]] = {}
        for i, tokens in enumerate(self._doc_tokens):
            for t in tokens:
                holders.setdefault(t, set()).add(i)
        return {t: frozenset(ix) for t, ix in holders.items()}

    def get_scores(self, query: str) -> np.ndarray:
        """BM25 score of ``query`` against every passage: (n,) float64, >= 0 for n >= 3 (0 where no query token
        occurs)."""
        tokens = self.tokenize(query)
        if self.engine == "bm25s":
            known = [t for t in tokens if t in self.vocabulary]
            return self._sparse.get_scores(known).astype(np.float64) if known else np.zeros(self.n)
        return self._bm25.get_scores(tokens)

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


def min_max(ranking: Ranking) -> dict[int, float]:
    """``{passage index: score}`` of a ranking rescaled to [0, 1] over its own items: (s - min) / (max - min), the
    "MM" normalisation of Bruch, Gai & Ingber (ACM TOIS 2023); a ranking whose scores are all equal gives each item 1."""
    if not ranking:
        return {}
    scores = [s for _, s in ranking]
    low, span = min(scores), max(scores) - min(scores)
    return {i: (s - low) / span if span > 0 else 1.0 for i, s in ranking}


def weighted_sum(normalised: Sequence[Mapping[int, float]], weights: Sequence[float]) -> Ranking:
    """sum_i w_i * normalised_i(d) over the union of candidates (a list that lacks d adds 0; weight-0 lists are left
    out), best first, passage index ascending on ties."""
    fused: dict[int, float] = {}
    for scores, w in zip(normalised, weights):
        if w > 0:
            for i, s in scores.items():
                fused[i] = fused.get(i, 0.0) + w * s
    return sorted(fused.items(), key=lambda item: (-item[1], item[0]))


def fusion_weights(v, name: str, n: int | None = None) -> tuple[float, ...]:
    """``v`` as fusion weights (`rrf_fuse`, `convex_fuse`): a non-empty list or tuple of finite numbers >= 0, one of
    them above 0, of length ``n`` when given, as floats; ValueError naming ``name`` (the params key, e.g.
    ``retrieval.convex_weights``) otherwise."""
    ok = (isinstance(v, (list, tuple)) and v and (n is None or len(v) == n)
          and all(not isinstance(x, bool) and isinstance(x, (int, float)) and math.isfinite(x) and x >= 0 for x in v)
          and max(v) > 0)
    if not ok:
        raise ValueError(f"{name} must list {n or 'some'} weights >= 0, one of them above 0, got {v!r}")
    return tuple(float(x) for x in v)


def convex_fuse(rankings: Sequence[Ranking], weights: Sequence[float]) -> Ranking:
    """The convex combination of min-max normalised scores (Bruch, Gai & Ingber, "An Analysis of Fusion Functions for
    Hybrid Retrieval", ACM TOIS 2023): score(d) = sum_i w_i * `min_max`(ranking_i)(d), in [0, sum(w)]. Unlike RRF it
    reads how far apart each retriever's scores are, so each list must carry its retriever's own scores (cosine,
    BM25). Returns every candidate of every list as ``(index, fused score)``, best first. Raises ValueError when the
    weights do not match the rankings."""
    if len(weights) != len(rankings):
        raise ValueError(f"{len(rankings)} rankings but {len(weights)} weights")
    return weighted_sum([min_max(r) for r in rankings], weights)


# A phone number or code: 3-digit groups joined by up to three of space, hyphen (or a Unicode dash), slash, dot or
# brackets to a last group of 3 or more
# digits ("555-0177", "(555) 0177", "800-555-0199", and "555 0177" as the rewrite writes a spoken one), or one run of
# 5 or more digits ("90210"). Not a year range ("2001-2006"), a list ("41 43 47"), a date ("9 2004") or a price
# ("$1,200.50", "$120").
# ASCII digits only: the rewrite has already folded full-width ones (NFKC); other scripts' digits are no identifier.
_IDENTIFIER = re.compile(r"(?<![0-9])(?:(?:[0-9]{3}[ \-/().\u2010-\u2015\u2212]{1,3})+[0-9]{3,}|[0-9]{5,})(?![0-9])")


def identifiers(text: str) -> set[str]:
    """The phone numbers and codes a text names (`_IDENTIFIER`), as digit strings: "Call 555-0177." and the
    rewritten "what is 555 0177" both give ``{"5550177"}``; "$120", "1990", "7:30", "2001-2006" none.
    A question quoting one is about the passage (`promote_quoted`) and the sentence (`rag.voice.answer.quoted`)
    naming it."""
    return {re.sub(r"[^0-9]", "", m.group()) for m in _IDENTIFIER.finditer(text)}


def same_number(a: str, b: str) -> bool:
    """Whether two `identifiers` (digit strings) are one number: equal, or the longer ends with the shorter and the
    shorter has at least 7 digits (a country or area code written once and not the other time: "18005550123" and
    "8005550123", "15555550177" and "5550177"; "1770" and "55501770" are not)."""
    short, long = sorted((a, b), key=len)
    return a == b or (len(short) >= 7 and long.endswith(short))


def promote_quoted(ranking: Ranking, quoted: Collection[str], named_by: Mapping[str, Collection[int]]) -> Ranking:
    """A passage that alone names a phone number or code the query quotes goes first.

    ``quoted``: the query's `identifiers`; ``named_by``: each identifier -> the passages naming it. When exactly one
    passage names any of them (`same_number`) it takes first place with the first score (inserted if the ranking
    lacked it: written without separators, "5550177" shares no BM25 token with "555-0177"; score 0.0 in an empty
    ranking); everything else keeps its order. Otherwise ``ranking`` is returned unchanged (no such passage, or
    several: the ranking decides among them).
    """
    hits = {i for q in quoted for ident, passages in named_by.items() if same_number(q, ident) for i in passages}
    if len(hits) != 1:
        return ranking
    top = hits.pop()
    if ranking and ranking[0][0] == top:
        return ranking
    return [(top, ranking[0][1] if ranking else 0.0)] + [(i, s) for i, s in ranking if i != top]


def promote_exact_hit(fused: Ranking, lexical: Sequence[Ranking], query_tokens: Iterable[str],
                      postings: Mapping[str, Collection[int]]) -> Ranking:
    """Exact-match override ("lexical hit promotion"): keep a unique exact hit first after fusion.

    RRF only sees ranks, so a passage that the lexical lists rank first because it alone holds an
    exact query token (a phone number, a code) can sink below passages the dense list likes:
    "what is 555-0177" was BM25's and the phonetic list's rank 1 but fourth after fusion. Hybrid
    engines give such hits a fixed override (an exact-match or "pinned" boost) instead of their
    rank-fused score; this is the smallest form of that.

    Rule: passage p goes to first place when EVERY ranking of ``lexical`` (BM25, plus the phonetic
    list in hybrid_phonetic) is non-empty and has p at rank 1, and one of ``query_tokens`` (the
    BM25 tokens of the query) contains a digit and occurs in p and in no other passage
    (``postings[token] == {p}``: document frequency 1). A df-1 word without a digit does not count:
    a misheard word can be unique to a wrong passage, a misheard number rarely matches a whole
    number of the KB. p takes the first score (a tie, so the top score a gate reads is unchanged);
    everything else keeps its RRF order. Otherwise ``fused`` is returned unchanged.
    """
    tops = {r[0][0] if r else None for r in lexical}
    if len(tops) != 1 or None in tops or not fused:
        return fused
    top = tops.pop()
    if fused[0][0] == top or not any(any(c.isdigit() for c in t) and set(postings.get(t, ())) == {top}
                                     for t in query_tokens):
        return fused
    return [(top, fused[0][1])] + [(i, s) for i, s in fused if i != top]
