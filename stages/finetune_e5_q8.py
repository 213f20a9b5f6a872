"""Stage finetune_e5_q8 (frozen; issue 14, session 55): the question side of stage finetune_e5's encoder
(``finetune_e5.model``, float16-stored weights, fp32 arithmetic) with int8 MatMul weights, one scale per output column,
and integer arithmetic (`rag.train.finetune.int8_weights`: onnxruntime's ``quantize_dynamic``), written to
``finetune_e5_q8.model``. Served for the caller's question only; the KB's passages stay embedded by
``finetune_e5.model`` (once, offline), so only the question pays the rounding.

Records how much of the encoder the copy keeps: the mean and least cosine of its query vectors to the float16 file's
on the training half's human-ASR questions (even articles), and of its passage vectors on the training half's
paragraphs (for the record: the passages are not served from it). Retrieval and latency are scored by stage
finetune_eval. Needs onnx (``make train``); ~1 min. Refit: ``dvc unfreeze finetune_e5_q8 && dvc repro finetune_e5_q8``
(then ``frozen: true`` back by hand). Writes ``finetune.metrics_dir``/e5_q8.json (``shipped``: path, sha256, seed).
"""
import json
import shutil
import tempfile
from pathlib import Path

from common import ROOT, main, params
from rag.io import sha256_of, write_json


def run():
    from rag.bench.heysquad import article_split, read_prepared
    from rag.retrieval.e5 import E5Embedder, read_e5
    from rag.train.finetune import int8_weights

    p = params()
    f, metrics_dir = p["finetune_e5_q8"], ROOT / p["finetune"]["metrics_dir"]
    source = ROOT / p["finetune_e5"]["model"]
    shipped = json.loads((metrics_dir / "e5.json").read_text(encoding="utf-8"))["shipped"]
    if sha256_of(source) != shipped["sha256"]:
        raise RuntimeError(f"{p['finetune_e5']['model']}: sha256 differs from {metrics_dir}/e5.json shipped.sha256")
    passages, queries = read_prepared(ROOT / p["heysquad"]["data_dir"])
    split = article_split(passages, queries)
    train = [q for q in queries if split[q["id"]] == "train"]
    asked = {x for q in train for x in q["relevant"]}
    texts = ([q["human"] for q in train], sorted(r["text"] for r in passages if r["_id"] in asked))
    e5 = read_e5()
    out = ROOT / f["model"]
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder) / "q8.onnx"
        int8_weights(source, tmp)
        ref, q8 = E5Embedder(source, e5, threads=f["threads"]), E5Embedder(tmp, e5, threads=f["threads"])
        cos_q = (ref.embed_queries(texts[0]) * q8.embed_queries(texts[0])).sum(1)
        cos_p = (ref.embed_passages(texts[1]) * q8.embed_passages(texts[1])).sum(1)
        shutil.copyfile(tmp, out.with_suffix(".tmp"))
    out.with_suffix(".tmp").replace(out)
    results = {"shipped": {"path": f["model"], "sha256": sha256_of(out), "seed": shipped["seed"], "kind": "int8",
                           "source": p["finetune_e5"]["model"], "source_sha256": shipped["sha256"]},
               "bytes": out.stat().st_size,
               "fidelity": {"queries_mean": round(float(cos_q.mean()), 6), "queries_min": round(float(cos_q.min()), 6),
                            "passages_mean": round(float(cos_p.mean()), 6), "n_queries": len(cos_q),
                            "n_passages": len(cos_p), "set": "HeySQuAD training half (even articles): human-ASR questions, "
                                                             "their paragraphs"}}
    write_json(metrics_dir / "e5_q8.json", results)
    print(json.dumps(results, indent=1))


main(run)
