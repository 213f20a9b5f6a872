"""Stage heysquad_eval: {typed, human, machine} x {raw, rewritten} x {dense, bm25, hybrid} on HeySQuAD.

Also ``fusion_by_half``: hybrid_phonetic on the rewritten questions, fused by RRF and by the convex combination
(``retrieval.convex_weights``), on each half by article (train: even articles, where the convex weights were chosen;
report: odd), whatever ``retrieval.fusion`` the chain uses (issue 14).

Reads ``{heysquad.data_dir}``/passages.jsonl, queries.jsonl, embed.npy and params ``rewrite``, ``retrieval``.
Writes ``{heysquad.metrics_dir}``/retrieval.json (sizes; ``metrics[source][form][mode]`` = recall@1/5/10,
mrr@10, ndcg@10, paragraph level; ``asr_penalty[spoken][form][mode]`` = (typed - spoken) / typed of
MRR@10) and retrieval.md (both as Markdown tables), and the headline summary.json (recall@1 and MRR@10 of
``retrieval.mode`` on the raw questions, per source).
"""
import time
from dataclasses import replace

from common import ROOT, heysquad_index, main, params
from rag import config
from rag.bench.compare import evaluate_matrix, markdown_table, select
from rag.bench.heysquad import SOURCES, article_split, as_transcripts, asr_penalty
from rag.io import write_json, write_text
from rag.voice.queries import raw_queries, rewrite_queries

COLUMNS = ["recall@1", "recall@5", "recall@10", "mrr@10", "ndcg@10"]
SPOKEN = ("human", "machine")


def run():
    p = params()
    h = p["heysquad"]
    t0 = time.perf_counter()
    passages, queries, index = heysquad_index(p, "answerable")
    rules = config.rewrite_rules(p, index.passages)
    half, shipped = article_split(passages, queries), index.config
    matrix, by_half = {}, {}
    for source in SOURCES:
        spoken = as_transcripts(queries, source)
        forms = {"raw": raw_queries(spoken), "rewritten": rewrite_queries(spoken, rules)}
        matrix[source] = select(evaluate_matrix(index, queries, forms, ks=(1, 5, 10)), COLUMNS)
        for fusion in ("rrf", "convex"):
            index.config = replace(shipped, fusion=fusion)
            by_half.setdefault(source, {})[fusion] = {part: select(evaluate_matrix(
                index, [q for q in queries if half[q["id"]] == part],
                {part: {i: t for i, t in forms["rewritten"].items() if half[i] == part}}, ("hybrid_phonetic",),
                ks=(1, 3, 10)), ["recall@1", "recall@3", "mrr@10"])[part]["hybrid_phonetic"]
                for part in ("train", "report")}
        index.config = shipped
    penalty = {s: asr_penalty(matrix, s) for s in SPOKEN}
    write_json(ROOT / h["metrics_dir"] / "retrieval.json", {
        "passages": len(passages), "questions": len(queries), "sample_passages": h["sample_passages"],
        "metrics": matrix, "asr_penalty_mrr@10": penalty, "fusion_by_half": by_half})
    mode = p["retrieval"]["mode"]
    write_json(ROOT / h["metrics_dir"] / "summary.json", {  # headline for dvc exp show: retrieval.mode, raw
        "mode": mode, **{source: {k.replace("@", "_at_"): matrix[source]["raw"][mode][k] for k in ("recall@1", "mrr@10")}
                         for source in SOURCES}})
    r = p["retrieval"]
    caption = (f"HeySQuAD dev-common: {len(queries)} questions, {len(passages)} paragraphs (paragraph level). "
               f"Hybrid: RRF k={r['rrf_k']}, depth {r['depth']}, weights dense {r['weight_dense']} / "
               f"BM25 {r['weight_bm25']}, stopwords {'on' if r['use_stopwords'] else 'off'}.\n\n")
    rows = [[source, form, mode, *(m[c] for c in COLUMNS)]
            for source, by_form in matrix.items() for form, by_mode in by_form.items()
            for mode, m in by_mode.items()]
    pen_rows = [[s, form, mode, f"{100 * v:.1f} %"] for s in SPOKEN for form, by_mode in penalty[s].items()
                for mode, v in by_mode.items()]
    write_text(ROOT / h["metrics_dir"] / "retrieval.md", caption
               + markdown_table(["questions", "query", "mode", "R@1", "R@5", "R@10", "MRR@10", "nDCG@10"], rows)
               + "\nASR penalty: MRR@10 drop from typed to spoken questions, (typed - spoken) / typed.\n\n"
               + markdown_table(["spoken", "query", "mode", "MRR@10 drop"], pen_rows)
               + f"\nhybrid_phonetic on the rewritten questions per half by article, RRF vs the convex combination "
               + f"(weights dense / BM25 / phonetic {r['convex_weights']}, chosen on the train half; the chain uses "
               + f"`retrieval.fusion` = {r['fusion']}):\n\n"
               + markdown_table(["questions", "fusion", "half", "R@1", "R@3", "MRR@10"],
                                [[s, f, part, *m.values()] for s, by_f in by_half.items() for f, parts in by_f.items()
                                 for part, m in parts.items()]))
    print(f"heysquad_eval: {len(queries)} questions x {len(SOURCES)} sources x 2 forms x 3 modes, "
          f"{time.perf_counter() - t0:.1f} s")


main(run)
