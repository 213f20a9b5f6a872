"""Abstention signals: how answerable a question looks to the retriever, higher = more answerable.

Each signal is a function of (query text, its (384,) unit MiniLM vector, a PassageIndex) -> float.
The seed's signal is ``top1`` (the best passage's cosine, as `rag.eval.evaluate.top1_cosine`); the
others look at agreement between retrievers, lexical coverage and score shape, and ``combined`` is
a logistic regression over all of them. Pure library: the caller passes params (stopwords, seed).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import numpy as np

from rag.retrieval.indexes import word_tokens
from rag.retrieval.search import PassageIndex, doc_ranking

SIGNALS = ("top1", "agreement", "coverage", "margin", "hybrid")  # the features of ``combined``
ALL_SIGNALS = SIGNALS + ("combined",)


def top1(index: PassageIndex, query: str, vector: np.ndarray) -> float:
    """Cosine (unit vectors, in [-1, 1]) of the best passage: the seed's signal."""
    return index.dense.best(vector)


def agreement(index: PassageIndex, query: str, vector: np.ndarray, k: int = 3) -> float:
    """Overlap of the dense and BM25 top-``k`` DOCUMENTS, |D ∩ B| / k, in [0, 1].

    BM25 keeps only candidates above ``bm25_floor``, so a query with no word in the KB scores 0.
    """
    dense = [d for d, _ in doc_ranking(index.passages, index.ranking(query, "dense", vector))[:k]]
    bm25 = [d for d, _ in doc_ranking(index.passages, index.ranking(query, "bm25"))[:k]]
    return len(set(dense) & set(bm25)) / k


def coverage_of(query: str, passage: str, stopwords: Iterable[str]) -> float:
    """Fraction of the query's distinct content words (``\\w+`` lower-cased, minus ``stopwords``)
    that occur in ``passage``; 0.0 when the query has no content word."""
    words = set(word_tokens(query, stopwords))
    if not words:
        return 0.0
    return len(words & set(word_tokens(passage, stopwords))) / len(words)


def coverage(index: PassageIndex, query: str, vector: np.ndarray, stopwords: Iterable[str] = ()) -> float:
    """`coverage_of` the query in its top-1 DENSE passage, in [0, 1]."""
    best = index.dense_ranking(vector, 1)[0][0]
    return coverage_of(query, index.passages[best].text, stopwords)


def margin(index: PassageIndex, query: str, vector: np.ndarray) -> float:
    """Top-1 minus top-2 cosine over DOCUMENTS (each document at its best passage), so that two
    passages of the same document do not count as a tie; 0.0 for a one-document KB."""
    docs = doc_ranking(index.passages, index.ranking(query, "dense", vector))
    return float(docs[0][1] - docs[1][1]) if len(docs) > 1 else 0.0


def hybrid(index: PassageIndex, query: str, vector: np.ndarray) -> float:
    """Top-1 RRF score of the hybrid ranking (at most (w_dense + w_bm25) / (rrf_k + 1)); RRF whatever
    ``retrieval.fusion`` ranks with, since the shipped gate was fitted on RRF scores."""
    return float(index.ranking(query, "hybrid", vector, fusion="rrf")[0][1])


def features(index: PassageIndex, texts: Mapping[str, str], vectors: Mapping[str, np.ndarray],
             stopwords: Iterable[str] = ()) -> dict[str, dict[str, float]]:
    """``{query_id: {signal: value}}`` for every signal in `SIGNALS`."""
    stop = frozenset(stopwords)
    out = {}
    for qid, text in texts.items():
        v = vectors[qid]
        out[qid] = {"top1": top1(index, text, v), "agreement": agreement(index, text, v),
                    "coverage": coverage(index, text, v, stop), "margin": margin(index, text, v),
                    "hybrid": hybrid(index, text, v)}
    return out


@dataclass(frozen=True)
class CombinedModel:
    """The ``combined`` signal: standardise the `SIGNALS` columns (``mean``, ``scale``: 5 floats each), then
    P(answerable) = sigmoid(coef . z + intercept) (L2 logistic regression, sklearn's). Plain numbers, so the
    model ships as JSON (models/gate.json) and applies with numpy alone."""

    mean: tuple[float, ...]
    scale: tuple[float, ...]
    coef: tuple[float, ...]
    intercept: float

    def __post_init__(self):
        for name in ("mean", "scale", "coef"):
            if len(getattr(self, name)) != len(SIGNALS):
                raise ValueError(f"combined model: {name} has {len(getattr(self, name))} values, expected "
                                 f"{len(SIGNALS)} ({', '.join(SIGNALS)})")

    def predict(self, rows: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
        """``{query_id: P(answerable)}`` in [0, 1] for `features` rows."""
        ids = list(rows)
        X = np.array([[rows[q][s] for s in SIGNALS] for q in ids], dtype=np.float64).reshape(len(ids), len(SIGNALS))
        z = (X - np.array(self.mean)) / np.array(self.scale)
        p = 1.0 / (1.0 + np.exp(-(z @ np.array(self.coef) + self.intercept)))
        return dict(zip(ids, (float(x) for x in p)))

    def to_dict(self) -> dict:
        """The model as JSON-ready numbers (keys mean, scale, coef, intercept)."""
        return {"mean": list(self.mean), "scale": list(self.scale), "coef": list(self.coef),
                "intercept": self.intercept}

    @classmethod
    def from_dict(cls, d: Mapping) -> "CombinedModel":
        """Inverse of `to_dict`; raises ValueError/KeyError/TypeError for a wrong shape."""
        return cls(tuple(float(x) for x in d["mean"]), tuple(float(x) for x in d["scale"]),
                   tuple(float(x) for x in d["coef"]), float(d["intercept"]))


def fit_combined(rows: Sequence[Mapping[str, float]], labels: Sequence[bool], random_state: int = 0) -> CombinedModel:
    """Standardise the `SIGNALS` columns, then fit an L2 logistic regression (C=1, sklearn) predicting
    answerable, on exactly ``rows`` (one feature dict per question)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    X = np.array([[r[s] for s in SIGNALS] for r in rows], dtype=np.float64)
    scaler = StandardScaler().fit(X)
    lr = LogisticRegression(random_state=random_state).fit(scaler.transform(X), np.asarray(labels, dtype=bool))
    return CombinedModel(tuple(float(x) for x in scaler.mean_), tuple(float(x) for x in scaler.scale_),
                         tuple(float(x) for x in lr.coef_[0]), float(lr.intercept_[0]))


def signal_scores(signal: str, rows: Mapping[str, Mapping[str, float]], model: CombinedModel | None = None) -> dict[str, float]:
    """``{query_id: score}`` of one signal from `features` rows; ``combined`` needs a `fit_combined`
    model. Raises ValueError for an unknown signal."""
    if signal == "combined":
        if model is None:
            raise ValueError("the combined signal needs a model fitted with fit_combined")
        return model.predict(rows)
    if signal not in SIGNALS:
        raise ValueError(f"unknown abstention signal {signal!r}; expected one of {ALL_SIGNALS}")
    return {q: float(r[signal]) for q, r in rows.items()}


def auroc(scores: Mapping[str, float], answerable: Mapping[str, bool]) -> float:
    """Area under the ROC curve of ``scores`` separating answerable (positive) from unanswerable:
    P(random answerable scores above random unanswerable), ties counting 1/2."""
    from sklearn.metrics import roc_auc_score

    ids = list(scores)
    return float(roc_auc_score([bool(answerable[q]) for q in ids], [scores[q] for q in ids]))


def refusal_metrics(scores: Mapping[str, float], answerable: Mapping[str, bool], tau: float) -> dict:
    """Refuse when score < tau; the refusal is right when the question is unanswerable.

    precision = right refusals / refusals (1.0 when nothing is refused), recall = right refusals /
    unanswerable questions (1.0 when there is none). Returns ``{precision, recall, refused,
    answerable_refused: [ids], unanswerable_answered: [ids]}``.
    """
    refused = {q for q, s in scores.items() if s < tau}
    unans = {q for q in scores if not answerable[q]}
    right = refused & unans
    return {"precision": round(len(right) / len(refused), 6) if refused else 1.0,
            "recall": round(len(right) / len(unans), 6) if unans else 1.0,
            "refused": len(refused),
            "answerable_refused": sorted(refused - unans),
            "unanswerable_answered": sorted(unans - refused)}


def meets_goal(result: Mapping, goal: Mapping) -> bool:
    """``result`` (a `refusal_metrics` dict) reaches ``goal`` {precision, recall, max_answerable_refused}."""
    return (result["precision"] >= goal["precision"] and result["recall"] >= goal["recall"]
            and len(result["answerable_refused"]) <= goal["max_answerable_refused"])


def pick_signal(results: Mapping[str, Mapping[str, Mapping]], judged_on: Sequence[str], goal: Mapping) -> str:
    """The default signal, judged ONLY on the sets ``judged_on`` (the transfer sets).

    ``results``: ``{signal: {set: refusal_metrics + {"auroc"}}}``. Order: most sets meeting
    ``goal``, then the best worst-case min(precision, recall), then the best mean AUROC, then the
    `ALL_SIGNALS` order (so ``top1`` wins ties).
    """
    def key(sig):
        rs = [results[sig][s] for s in judged_on]
        return (-sum(meets_goal(r, goal) for r in rs), -min(min(r["precision"], r["recall"]) for r in rs),
                -float(np.mean([r["auroc"] for r in rs])), ALL_SIGNALS.index(sig) if sig in ALL_SIGNALS else 99)
    return min(results, key=key)
