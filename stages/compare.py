"""Stage compare: every retrieval mode x query form on the clinic fixtures, in one run.

Writes metrics/voice/compare.json (``{form: {mode: recall@1/3/5, mrr@10, ndcg@10}}``, answerable queries),
compare.md (the same as a Markdown table), recall_at_k.csv (recall@1..10 per variant, plot data) and
scores.json (per-query gate score by class with tau, plot data: per_query.jsonl signals through models/gate.json).
"""

from common import ROOT, VOICE_DATA, VOICE_METRICS, gate_scores, main, params, voice_index
from rag import config
from rag.bench.compare import csv_text, evaluate_matrix, markdown_table, recall_curves, score_points, select
from rag.io import read_jsonl, write_json, write_text
from rag.voice.queries import load_queries, raw_queries, rewrite_queries

COLUMNS = ["recall@1", "recall@3", "recall@5", "mrr@10", "ndcg@10"]


def run():
    p = params()
    queries = load_queries(ROOT / p["voice"]["queries"])
    index = voice_index(p)
    forms = {"raw": raw_queries(queries),
             "rewritten": rewrite_queries(queries, config.rewrite_rules(p, index.passages))}
    matrix = evaluate_matrix(index, queries, forms)
    table = select(matrix, COLUMNS)
    write_json(VOICE_METRICS / "compare.json", table)
    r = p["retrieval"]
    caption = (f"Clinic fixtures, {sum(q['answerable'] for q in queries)} answerable questions (document level). "
               f"Hybrid: RRF k={r['rrf_k']}, depth {r['depth']}, weights dense {r['weight_dense']} / "
               f"BM25 {r['weight_bm25']}, stopwords {'on' if r['use_stopwords'] else 'off'}.\n\n")
    write_text(VOICE_METRICS / "compare.md", caption + markdown_table(
        ["mode", "query", "R@1", "R@3", "R@5", "MRR@10", "nDCG@10"],
        [[mode, form, *(m[c] for c in COLUMNS)] for form, by_mode in table.items() for mode, m in by_mode.items()]))
    write_text(VOICE_METRICS / "recall_at_k.csv", csv_text(recall_curves(matrix)))
    per_query = read_jsonl(VOICE_DATA / "per_query.jsonl", required=("id", "answerable", "signals"))
    gate, scores = gate_scores(per_query)
    write_json(VOICE_METRICS / "scores.json", score_points([{**r, "score": scores[r["id"]]} for r in per_query], gate.tau))


main(run)
