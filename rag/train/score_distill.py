"""Training rows for distilling a retriever's *scores* into another encoder (Hofstätter et al. 2020, "Improving
Efficient Neural Ranking Models with Cross-Architecture Knowledge Distillation"; sentence-transformers'
DistillKLDivLoss): each (query, positive paragraph) row gains the teacher's hardest wrong paragraphs and the
teacher's cosine of the query to every one of them, so the student learns the teacher's ranking, not its vectors:
the two encoders need not share a vector space, a tokenizer or a size (the served all-MiniLM-L6-v2 learns from the
12-layer fine-tuned e5-small). Pure numpy; the teacher is any object with ``embed_queries`` / ``embed_passages``.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np


def held_out_articles(passages: Sequence[Mapping], every: int) -> set[int]:
    """The even (training-half) articles of ``passages`` (rows with ``article``) in ascending order, every
    ``every``-th from the first: whole articles kept out of training to choose an epoch on (early stopping).
    Raises ValueError for every < 2."""
    if every < 2:
        raise ValueError(f"every must be >= 2, got {every}")
    return set(sorted({int(p["article"]) for p in passages if int(p["article"]) % 2 == 0})[::every])


def teacher_rows(rows: Sequence[Mapping], paragraphs: Sequence[str], teacher, n_negatives: int) -> list[dict]:
    """``rows`` (``query``, ``positive`` texts; e.g. `rag.train.pairs.training_pairs`) each with ``negatives``: the
    ``n_negatives`` paragraphs of ``paragraphs`` other than the positive that ``teacher`` ranks highest for the query
    (cosine, ties to the earlier paragraph), and ``label``: the teacher's cosines [positive, negative 1, ...]
    (n_negatives + 1 floats), the targets of a score-distillation loss. ``paragraphs`` are the texts a row may draw
    negatives from (the training half's only). Raises ValueError for n_negatives < 1 or more than ``paragraphs`` can
    give, and for a row whose positive is not among ``paragraphs`` (naming its ``id``)."""
    if not 1 <= n_negatives < len(paragraphs):
        raise ValueError(f"n_negatives must be in [1, {len(paragraphs) - 1}], got {n_negatives}")
    where = {text: i for i, text in enumerate(paragraphs)}
    missing = next((r for r in rows if r["positive"] not in where), None)
    if missing is not None:
        raise ValueError(f"row {missing.get('id', '?')}: its positive paragraph is not among the paragraphs")
    scores = teacher.embed_queries([r["query"] for r in rows]) @ teacher.embed_passages(list(paragraphs)).T
    out = []
    for row, s in zip(rows, scores):
        gold = where[row["positive"]]
        wrong = [int(j) for j in np.argsort(-s, kind="stable") if j != gold][:n_negatives]
        out.append({**row, "negatives": [paragraphs[j] for j in wrong],
                    "label": [round(float(s[gold]), 6), *(round(float(s[j]), 6) for j in wrong)]})
    return out
