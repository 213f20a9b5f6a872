"""Retrieval evaluation of the voice track: document-level runs of raw and rewritten queries."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from rag.eval.metrics import evaluate_run
from rag.retrieval.search import PassageIndex, doc_ranking


def doc_runs(index: PassageIndex, texts: Mapping[str, str], mode: str, vectors: Mapping[str, np.ndarray],
             depth: int = 10) -> dict[str, list[tuple[str, float]]]:
    """``{query_id: [(doc, score), ...]}``: each query's top-``depth`` documents in ``mode``.

    vectors: ``{query_id: (384,) unit query embedding}`` (unused by bm25).
    """
    return {qid: doc_ranking(index.passages, index.ranking(text, mode, vectors.get(qid)))[:depth]
            for qid, text in texts.items()}


def embed_texts(texts: Mapping[str, str], embedder=None) -> dict[str, np.ndarray]:
    """Embed every query text in one batch: ``{query_id: (384,) float32 unit vector}``.

    embedder: a `rag.retrieval.embed.MiniLMEmbedder` or an e5 side (default: the process-wide encoder's query side,
    `rag.retrieval.embed.query_embedder`)."""
    from rag.retrieval.embed import query_embedder

    ids = list(texts)
    matrix = (embedder or query_embedder()).embed([texts[i] for i in ids]) if ids else np.zeros((0, 384), np.float32)
    return dict(zip(ids, matrix))


def top1_cosine(index: PassageIndex, vectors: Mapping[str, np.ndarray]) -> dict[str, float]:
    """``{query_id: cosine of the best passage}``: the seed's abstention signal."""
    return {qid: index.dense.best(v) for qid, v in vectors.items()}


def retrieval_metrics(queries: Sequence[dict], runs: Mapping[str, list[tuple[str, float]]],
                      ks: Sequence[int] = (1, 3, 5, 10)) -> dict[str, float]:
    """recall/MRR/nDCG/Hit at ``ks`` over the ANSWERABLE queries, relevance = gold document names."""
    qrels = {q["id"]: {d: 1 for d in q["relevant"]} for q in queries if q["answerable"]}
    # Scores become reversed positions so the ranking's own order (ties included) is evaluated.
    run = {qid: {d: float(len(r) - i) for i, (d, _) in enumerate(r)} for qid, r in runs.items()}
    return {k: round(v, 6) for k, v in evaluate_run(qrels, run, ks).items()}
