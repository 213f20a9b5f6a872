"""Stage ko_generate: grounded Korean answers on sampled test questions -> metrics/ko/generation.{json,md}.

Reads params ``ko.*`` (data_dir, metrics_dir, squad_path, index_title, bm25_b), ``ko_gen.*`` and ``llm.*``;
data/ko/passages.jsonl, queries.jsonl, qrels.json and the gold answer texts from the KorQuAD JSON
(rag.bench.squad.load_answers). The grid (``ko_gen.grid``, ``ko_gen.sample`` questions, both conditions) is
`ko_runs.generate` on the default LLM (``llm``, with ``ko_gen.threads`` and ``ko_gen.n_ctx``). Writes
data/ko/generation.jsonl (one row per call; KorQuAD text, git-ignored) and metrics/ko/generation.json/.md
(numbers only). The packaged models compared on a larger sample: stage ko_generate_models.
"""
from __future__ import annotations

from pathlib import Path

from common import main, params
from ko_runs import generate, table, without_passages

from rag.io import write_json, write_jsonl, write_text


def run() -> None:
    p = params()
    ko, g = p["ko"], p["ko_gen"]
    llm = {**p["llm"], "n_ctx": int(g["n_ctx"]), "threads": int(g["threads"]), "n_parallel": 1}
    rows, cells, meta = generate(p, g, llm)
    write_jsonl(Path(ko["data_dir"]) / "generation.jsonl", without_passages(rows))
    write_json(Path(ko["metrics_dir"]) / "generation.json", {**meta, "cells": cells})
    write_text(Path(ko["metrics_dir"]) / "generation.md",
               f"Grounded Korean answers, KorQuAD 1.0 dev test split: {meta['questions']} sampled questions "
               f"(seed {g['seed']}), {meta['llm']}; retriever {meta['retriever']}. Rates over all n questions "
               f"of a cell (never NaN); [95 % CI] = percentile bootstrap over the cell's questions. raw = the "
               f"model's JSON; final = after verifier + extractive fallback. "
               f"In gold_excluded a correct system abstains (abstain = 1.00, halluc. = 0.00). "
               f"final status counts: verified llm / llm abstained / extractive / fallback abstained. "
               f"Runtime {meta['runtime_s']} s, {meta['calls']} calls.\n\n" + table(cells))
    print(f"ko_generate: {meta['questions']} questions, {meta['calls']} calls, {meta['runtime_s']} s")
    print(table(cells))


main(run)
