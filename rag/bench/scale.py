"""How the dense index scales (issue 16): exact search vs faiss HNSW on a structured stand-in for a large KB.

Real embeddings stop at a few hundred passages here, so larger KBs are *paraphrase variants*: each synthetic
passage is a real passage vector (an anchor) plus Gaussian noise, re-normalised, so that it stays close to its
anchor (cosine ~``1 / sqrt(1 + noise**2 * d)``) and the set keeps the real vectors' cluster structure. Uniform random
vectors are HNSW's worst case and unlike any embedding set (recall@10 <= 0.15 was measured on them): never
benchmark on them. Queries are drawn the same way (held out), as a question sits near its passage.
"""
from __future__ import annotations

import time

import numpy as np

from rag.bench.latency import summary
from rag.retrieval.indexes import DenseIndex, HNSWIndex


def paraphrase_variants(anchors: np.ndarray, n: int, noise: float, seed: int = 0) -> np.ndarray:
    """(n, d) float32 unit vectors: anchors (m, d, unit rows) chosen uniformly (seeded) plus N(0, noise**2) per
    dimension, re-normalised."""
    rng = np.random.default_rng(seed)
    x = anchors[rng.integers(0, len(anchors), n)] + noise * rng.standard_normal((n, anchors.shape[1]))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _timed(fn, queries: np.ndarray) -> tuple[list, dict]:
    out, ms = [], []
    for q in queries:
        t0 = time.perf_counter()
        out.append(fn(q))
        ms.append((time.perf_counter() - t0) * 1000.0)
    return out, summary(ms)


def compare(vectors: np.ndarray, queries: np.ndarray, m: int, ef_construction: int, ef_searches, k: int = 10) -> dict:
    """Exact vs HNSW on one passage set: ``{"n", "exact": {query p50/p95 ms, bytes}, "hnsw": {build_s, bytes,
    "ef_search": {ef: {p50, p95, recall_at_10}}}}``. recall@k: the share of exact search's top-k that HNSW finds
    (per query, averaged); bytes: the index's memory (exact: the float32 matrix; HNSW: faiss's serialised size)."""
    import faiss

    exact = DenseIndex(vectors)
    truth, t_exact = _timed(lambda q: {i for i, _ in exact.top_k(q, k)}, queries)
    t0 = time.perf_counter()
    ann = HNSWIndex(vectors, m, ef_construction, max(ef_searches))
    build_s = time.perf_counter() - t0
    out = {"n": len(vectors), "exact": {"p50_ms": t_exact["p50"], "p95_ms": t_exact["p95"],
                                        "bytes": int(vectors.nbytes)},
           "hnsw": {"m": m, "ef_construction": ef_construction, "build_s": round(build_s, 2),
                    "bytes": int(len(faiss.serialize_index(ann.index))), "ef_search": {}}}
    for ef in ef_searches:
        ann.index.hnsw.efSearch, ann.ef_search = int(ef), int(ef)
        found, t = _timed(lambda q: {i for i, _ in ann.top_k(q, k)}, queries)
        recall = float(np.mean([len(f & g) / k for f, g in zip(found, truth)]))
        out["hnsw"]["ef_search"][str(ef)] = {"p50_ms": t["p50"], "p95_ms": t["p95"], "recall_at_10": round(recall, 4)}
    return out


def pgvector_rows(url: str, vectors: np.ndarray, queries: np.ndarray, ef_search: int, k: int = 10) -> dict:
    """pgvector's HNSW (`rag.retrieval.pgvector`) on the same passage set: load + index build seconds, the graph's
    on-disk bytes, query p50/p95 ms (one query at a time, over a Unix socket) and recall@k against exact search."""
    from rag.retrieval.chunk import Passage
    from rag.retrieval.pgvector import PgVectorStore

    store = PgVectorStore(url)
    try:
        t0 = time.perf_counter()
        store.load("scale", [Passage(str(i), str(i), "") for i in range(len(vectors))], vectors)
        load_s = time.perf_counter() - t0
        dense, size = store.dense("scale", ef_search), store.hnsw_bytes("scale")
        truth = [{i for i, _ in DenseIndex(vectors).top_k(q, k)} for q in queries]
        found, t = _timed(lambda q: {i for i, _ in dense.top_k(q, k)}, queries)
    finally:
        store.close()
    return {"ef_search": ef_search, "load_and_build_s": round(load_s, 2), "bytes": size, "p50_ms": t["p50"], "p95_ms": t["p95"],
            "recall_at_10": round(float(np.mean([len(f & g) / k for f, g in zip(found, truth)])), 4)}
