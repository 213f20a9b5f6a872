"""Stage finetune_eval (issue 14): the committed fine-tuned MiniLM (``finetune.model``, stage finetune) against the
packaged all-MiniLM-L6-v2, and both against multilingual-e5-small: the packaged weights (`rag.retrieval.e5.BASE_MODEL`)
and the committed English fine-tunes (``finetune_e5.model``, stage finetune_e5; ``finetune_e5_l6_distilled.model``,
e5-small cut to 6 of its 12 layers and taught by the former, stage finetune_e5_l6_distilled) and MiniLM taught to rank as
the 12-layer fine-tune does (``finetune_score_distill.model``, stage finetune_score_distill), and the 6-layer cut taught
the 12-layer fine-tune's query vectors (``finetune_e5_l6_query.model``, stage finetune_e5_l6_query), served for the
questions with the 12-layer fine-tune embedding the passages, and the 12-layer fine-tune's int8 copy for the questions
(``finetune_e5_q8.model``, stage finetune_e5_q8) with its float16 file embedding the passages; all served by onnxruntime with no PyTorch. Each committed encoder is checked against the sha256 its training stage recorded.

Sets: HeySQuAD's report half (odd articles, never trained on; typed / human / machine, raw), and two KBs the
training never saw: the clinic fixture and the held-out vet KB (clean and noisy pocketsphinx transcripts, raw and
rewritten). Modes dense and hybrid_phonetic; on HeySQuAD also hybrid_phonetic's lists fused by the convex combination of
min-max scores, weights chosen on the train half (``finetune.convex_weight_grid``, `rag.train.evaluate.convex_hybrid`),
for the packaged MiniLM and the 12-layer fine-tuned e5, on the raw transcripts and as the voice chain rewrites them (``rewrite``). Also one query's embedding time (ms, p50 / p95 over the clinic
questions, 5 rounds of each model in turn: `timing.one_query_ms`). Writes ``finetune.metrics_dir``/eval.json and eval.md.
"""
import json
from pathlib import Path

from common import ROOT, check_weight_grid, committed, main, params
from rag import config
from rag.bench.compare import markdown_table
from rag.bench.heysquad import as_passages, read_prepared
from rag.train.evaluate import convex_hybrid, report_half
from rag.eval.evaluate import doc_runs, embed_texts, retrieval_metrics
from rag.io import write_json, write_text
from rag.retrieval.chunk import chunk_folder
from rag.retrieval.e5 import BASE_MODEL, E5Embedder, E5Side
from rag.retrieval.embed import MiniLMEmbedder
from rag.retrieval.search import PassageIndex
from rag.voice.quarantine import allowed
from rag.voice.queries import load_queries, raw_queries, rewrite_queries
from timing import one_query_ms

MODES = ("dense", "hybrid_phonetic")
METRICS = ("recall@1", "recall@3", "mrr@10")


def kb_sets(p):
    a = p["abstain"]
    return {"clinic": (p["voice"]["kb"], p["voice"]["queries"]),
            "vet_clean": (a["transfer_kb"], a["transfer_queries"]["clean"]),
            "vet_noisy": (a["transfer_kb"], a["transfer_queries"]["noisy"])}


def kb_metrics(p, embedder, passage_embedder) -> dict:
    """``{set: {form: {mode: recall@1/3, mrr@10}}}`` on the clinic and vet KBs, the questions embedded by ``embedder``
    and the passages by ``passage_embedder``."""
    hc, out, indexes = config.hybrid_config(p), {}, {}
    for name, (kb, qpath) in kb_sets(p).items():
        if kb not in indexes:
            passages = chunk_folder(ROOT / kb, allowed(p))
            indexes[kb] = PassageIndex(passages, passage_embedder.embed([x.text for x in passages]), hc)
        index, queries = indexes[kb], load_queries(ROOT / qpath)
        rules = config.rewrite_rules(p, index.passages)
        out[name] = {}
        for form, texts in (("raw", raw_queries(queries)), ("rewritten", rewrite_queries(queries, rules))):
            vectors = embed_texts(texts, embedder)
            out[name][form] = {mode: {m: v for m, v in retrieval_metrics(
                queries, doc_runs(index, texts, mode, vectors), ks=(1, 3, 10)).items() if m in METRICS}
                for mode in MODES}
    return out


def run():
    p = params()
    f = p["finetune"]
    check_weight_grid(f["convex_weight_grid"], "finetune.convex_weight_grid")
    path, shipped = committed(p, "finetune", "train.json")
    e5_path, e5_shipped = committed(p, "finetune_e5", "e5.json")
    l6_path, l6_shipped = committed(p, "finetune_e5_l6_distilled", p["finetune_e5_l6_distilled"]["metrics_file"])
    sd_path, sd_shipped = committed(p, "finetune_score_distill", "score_distill.json")
    lq_path, lq_shipped = committed(p, "finetune_e5_l6_query", p["finetune_e5_l6_query"]["metrics_file"])
    q8_path, q8_shipped = committed(p, "finetune_e5_q8", "e5_q8.json")
    l10_path, l10_shipped = committed(p, "finetune_e5_l10_query", p["finetune_e5_l10_query"]["metrics_file"])
    sentence_path, sentence_shipped = committed(p, "finetune_e5_sentences", "e5_sentences.json")
    e5 = E5Embedder(BASE_MODEL, threads=f["threads"])
    e5_tuned = E5Embedder(e5_path, e5.e5, threads=f["threads"])
    l6_tuned = E5Embedder(l6_path, e5.e5, threads=f["threads"])
    l6_query = E5Embedder(lq_path, e5.e5, threads=f["threads"])
    q8_query = E5Embedder(q8_path, e5.e5, threads=f["threads"])
    l10_query = E5Embedder(l10_path, e5.e5, threads=f["threads"])
    sentence_e5 = E5Embedder(sentence_path, e5.e5, threads=f["threads"])
    embedders = {"packaged": MiniLMEmbedder(threads=f["threads"]),
                 "finetuned": MiniLMEmbedder(threads=f["threads"], model=path, sha256=shipped["sha256"]),
                 "e5": E5Side(e5, "query"), "e5_finetuned": E5Side(e5_tuned, "query"),
                 "e5_l6_distilled": E5Side(l6_tuned, "query"),
                 "score_distilled": MiniLMEmbedder(threads=f["threads"], model=sd_path, sha256=sd_shipped["sha256"]),
                 "e5_l6_query": E5Side(l6_query, "query"), "e5_q8_query": E5Side(q8_query, "query"),
                 "e5_l10_query": E5Side(l10_query, "query")}
    passage_side = {"e5": E5Side(e5, "passage"), "e5_finetuned": E5Side(e5_tuned, "passage"),
                    "e5_l6_distilled": E5Side(l6_tuned, "passage"),
                    "e5_l6_query": E5Side(e5_tuned, "passage"),
                    "e5_q8_query": E5Side(e5_tuned, "passage"),
                    "e5_l10_query": E5Side(e5_tuned, "passage")}  # MiniLM: both alike; a query side: the 12-layer float16
    results = {"model": f["model"], "sha256": shipped["sha256"], "seed": shipped["seed"],
               "e5_model": e5_shipped["path"], "e5_sha256": e5_shipped["sha256"], "e5_seed": e5_shipped["seed"],
               "e5_l6_model": l6_shipped["path"], "e5_l6_sha256": l6_shipped["sha256"], "e5_l6_seed": l6_shipped["seed"],
               "score_distilled_model": sd_shipped["path"], "score_distilled_sha256": sd_shipped["sha256"],
               "score_distilled_seed": sd_shipped["seed"],
               "e5_l6_query_model": lq_shipped["path"], "e5_l6_query_sha256": lq_shipped["sha256"],
               "e5_l6_query_seed": lq_shipped["seed"],
               "e5_q8_query_model": q8_shipped["path"], "e5_q8_query_sha256": q8_shipped["sha256"],
               "e5_l10_query_model": l10_shipped["path"], "e5_l10_query_sha256": l10_shipped["sha256"],
               "e5_l10_query_seed": l10_shipped["seed"],
               "sentence_model": sentence_shipped["path"], "sentence_sha256": sentence_shipped["sha256"],
               "sets": {}}
    for name, e in embedders.items():
        pe = passage_side.get(name, e)
        results["sets"][name] = {"heysquad_report": report_half(ROOT / p["heysquad"]["data_dir"], config.hybrid_config(p),
                                                                e, passage_embedder=pe),
                                 **kb_metrics(p, e, pe)}
    rules = config.rewrite_rules(p, as_passages(read_prepared(ROOT / p["heysquad"]["data_dir"])[0]))
    for key, texts_of in (("convex_hybrid", raw_queries),
                          ("convex_hybrid_rewritten", lambda qs: rewrite_queries(qs, rules))):
        results[key] = {name: convex_hybrid(ROOT / p["heysquad"]["data_dir"], config.hybrid_config(p), embedders[name],
                                            passage_side.get(name, embedders[name]), f["convex_weight_grid"],
                                            texts_of=texts_of)
                        for name in ("packaged", "e5_finetuned", "e5_l6_query", "e5_q8_query")}
    fourth = {   # a fourth list: paragraphs by their best sentence, under the answer-sentence e5 (session 56: a second
                 # question embedding) or under the dense list's own encoder (session 57: the same question vector)
        "e5_q8_query": ("e5_q8_query", (E5Side(sentence_e5, "query"), E5Side(sentence_e5, "passage"))),
        "e5_q8_query_own": ("e5_q8_query", (embedders["e5_q8_query"], passage_side["e5_q8_query"])),
        "e5_l10_query_own": ("e5_l10_query", (embedders["e5_l10_query"], passage_side["e5_l10_query"]))}
    results["convex_hybrid_rewritten_sentences"] = {
        key: convex_hybrid(ROOT / p["heysquad"]["data_dir"], config.hybrid_config(p), embedders[name],
                           passage_side[name], f["convex_weight_grid"], texts_of=lambda qs: rewrite_queries(qs, rules),
                           sentence_sides=sides)
        for key, (name, sides) in fourth.items()}
    clinic = [q["asr"] for q in load_queries(ROOT / p["voice"]["queries"])]
    results["query_embed_ms"] = one_query_ms({n: e.embed_one for n, e in embedders.items()}, clinic)
    write_json(ROOT / f["metrics_dir"] / "eval.json", results)
    write_text(ROOT / f["metrics_dir"] / "eval.md", markdown(results))
    print(markdown(results))


NAMES = {"packaged": "packaged", "finetuned": "fine-tuned", "e5": "e5-small", "e5_finetuned": "e5 fine-tuned",
         "e5_l6_distilled": "e5 6-layer distilled", "score_distilled": "MiniLM ranking-distilled",
         "e5_l6_query": "e5 6-layer query student", "e5_q8_query": "e5 fine-tuned, int8 questions",
         "e5_l10_query": "e5 10-layer query student, int8"}
FOURTH = {"e5_q8_query": "e5 fine-tuned, int8 questions; sentences by the answer-sentence e5",
          "e5_q8_query_own": "e5 fine-tuned, int8 questions; sentences by its own vectors",
          "e5_l10_query_own": "e5 10-layer query student, int8; sentences by the teacher's vectors"}


def markdown(r) -> str:
    s = r["sets"]
    cells = [(f"HeySQuAD report, {form}", "raw", mode, [s[n]["heysquad_report"][form][mode] for n in NAMES])
             for form in ("typed", "human", "machine") for mode in MODES]
    cells += [(name, form, mode, [s[n][name][form][mode] for n in NAMES])
              for name in ("clinic", "vet_clean", "vet_noisy") for form in ("raw", "rewritten") for mode in MODES]
    rows = [[name, form, mode, *(x["mrr@10"] for x in xs), *(x["recall@1"] for x in xs)] for name, form, mode, xs in cells]
    ms = r["query_embed_ms"]
    fusions = ("rrf", "rrf_tuned", "convex")
    convex = [[NAMES[n], questions, c["weights"]["rrf_tuned"], c["weights"]["convex"],
               " / ".join(str(c["train_mrr@10"][f]) for f in fusions),
               *(" / ".join(str(c["report_mrr@10"][form][f]) for f in fusions) for form in ("typed", "human", "machine"))]
              for key, questions in (("convex_hybrid", "raw"), ("convex_hybrid_rewritten", "rewritten"))
              for n, c in r[key].items()]
    fourth = [[FOURTH[n], "rewritten", c["weights"]["rrf_tuned"], c["weights"]["convex"],
               " / ".join(str(c["train_mrr@10"][f]) for f in fusions),
               *(" / ".join(str(c["report_mrr@10"][form][f]) for f in fusions) for form in ("typed", "human", "machine"))]
              for n, c in r["convex_hybrid_rewritten_sentences"].items()]
    return (f"Fine-tuned MiniLM (`{r['model']}`, seed {r['seed']}) vs the packaged one, and multilingual-e5-small: "
            f"the packaged weights and fine-tuned on English (`{r['e5_model']}`, seed {r['e5_seed']}; cut to 6 layers and "
            f"distilled from it, "
            f"`{r['e5_l6_model']}`, seed {r['e5_l6_seed']}); MiniLM taught to rank as it does, `{r['score_distilled_model']}`, "
            f"seed {r['score_distilled_seed']}; the 6-layer cut taught its query vectors, `{r['e5_l6_query_model']}`, "
            f"seed {r['e5_l6_query_seed']}, questions only: its passages are the 12-layer fine-tune's; the 12-layer "
            f"fine-tune with int8 weights for the questions, `{r['e5_q8_query_model']}`, its float16 file for the "
            f"passages; the 12-layer fine-tune cut to 10 layers and taught its query vectors, int8, "
            f"`{r['e5_l10_query_model']}`, seed {r['e5_l10_query_seed']}, the 12-layer float16 file for the passages). "
            f"Query embedding p50 "
            + ", ".join(f"{ms[n]['p50']} ms {label}" for n, label in NAMES.items()) + " (one run: 5 rounds, each model all clinic questions in turn).\n\n"
            + markdown_table(["set", "query", "mode", *(f"MRR@10 {label}" for label in NAMES.values()),
                              *(f"R@1 {label}" for label in NAMES.values())], rows)
            + "\n\nhybrid_phonetic's lists fused by RRF as configured / RRF with tuned weights / the convex combination of "
              "min-max scores; weights (dense, BM25, phonetic) chosen from the same grid on the train half's human-ASR "
              "questions by MRR@10; HeySQuAD, raw transcripts and as the voice chain rewrites them, MRR@10:\n\n"
            + markdown_table(["dense", "questions", "RRF tuned weights", "convex weights", "train human", "report typed",
                              "report human", "report machine"], convex)
            + f"\n\nThe same with a fourth list: paragraphs by the best cosine of any of their sentences, under the "
              f"answer-sentence e5 (session 56: `{r['sentence_model']}`, stage finetune_e5_sentences, also trained on "
              f"the train half; a second question embedding) or under the dense list's own encoder (session 57: the "
              f"same question vector, the passage side's vectors of the sentences); weights (dense, BM25, phonetic, "
              f"sentences), RRF as configured with 1 for the fourth:\n\n"
            + markdown_table(["dense", "questions", "RRF tuned weights", "convex weights", "train human", "report typed",
                              "report human", "report machine"], fourth))


main(run)
