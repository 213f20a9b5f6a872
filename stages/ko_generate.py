"""Stage ko_generate: grounded Korean answers on sampled test questions -> metrics/ko/generation.{json,md}.

Reads params ``ko.*`` (data_dir, metrics_dir, squad_path, index_title), ``ko_gen.*`` and ``llm.*``
; data/ko/passages.jsonl, queries.jsonl, qrels.json and the gold
answer texts from the KorQuAD JSON (rag.bench.squad.load_answers). ``ko_gen.sample`` test questions drawn with
``ko_gen.seed``; retriever: BM25 over Kiwi content morphemes (k1 ``ko_gen.bm25_k1``) on every passage.
Conditions: gold_included (normal index) and gold_excluded (BM25 rebuilt without the question's gold
passage). Grid: ``ko_gen.grid`` = {prompt: [top_k, ...]}. Per question, calls run prompt -> condition ->
top_k ascending on one fresh server, so llama.cpp's prompt cache reuses the shared prefix (the order is
fixed, so runs repeat). Each passage is shown as at most ``ko_gen.passage_max_chars`` characters of its
sentences that share most question morphemes (rag.ko.answer.focus). Writes data/ko/generation.jsonl
(one row per call; KorQuAD text, git-ignored) and
metrics/ko/generation.json/.md (numbers only).
"""
from __future__ import annotations

import json
import random
import time
from pathlib import Path

from common import main, params

from rag.ko import tokenize as korean
from rag.io import InputError, read_jsonl, write_json, write_jsonl, write_text
from rag.ko.answer import KoSettings, answer_ko, focus, score_rows
from rag.voice.pipeline import llm_url
from rag.retrieval.indexes import BM25Index
from rag.bench.squad import load_answers, passage_text

CONDITIONS = ("gold_included", "gold_excluded")


def settings(g: dict, llm: dict, prompt: str) -> KoSettings:
    return KoSettings(prompt=prompt, max_len=int(g["max_len"]), max_tokens=int(g["max_tokens"]),
                      timeout_s=float(g["timeout_s"]), temperature=float(llm["temperature"]),
                      seed=int(llm["seed"]), model=llm.get("model") or None, min_shared=int(g["min_shared"]))


def table(cells: dict) -> str:
    head = ("| prompt | top_k | condition | n | gold in top_k | raw: abstain | raw: cit. valid | raw: halluc. | "
            "raw: span | raw: no output | final: abstain | final: cit. valid | final: halluc. | final: span | "
            "final: llm/abst/extr/fb |\n" + "|---" * 15 + "|\n")
    lines = []
    for key, c in cells.items():
        r, f, st = c["raw"], c["final"], c["final_status"]
        lines.append(f"| {c['prompt']} | {c['top_k']} | {c['condition']} | {c['n']} | {c['gold_retrieved_rate']:.2f} | "
                     f"{r['abstention_rate']:.2f} | {r['citation_validity']:.2f} | {r['hallucination_rate']:.2f} | "
                     f"{r['span_match_rate']:.2f} | {r['no_output_rate']:.2f} | {f['abstention_rate']:.2f} | "
                     f"{f['citation_validity']:.2f} | {f['hallucination_rate']:.2f} | {f['span_match_rate']:.2f} | "
                     f"{st.get('llm', 0)}/{st.get('abstained', 0)}/{st.get('extractive', 0)}/"
                     f"{st.get('fallback_abstained', 0)} |\n")
    return head + "".join(lines)


def run() -> None:
    p = params()
    ko, g = p["ko"], p["ko_gen"]
    t_start = time.perf_counter()
    data, out = Path(ko["data_dir"]), Path(ko["metrics_dir"])
    passages = read_jsonl(data / "passages.jsonl", required=["_id", "title", "text"])
    queries = read_jsonl(data / "queries.jsonl", required=["_id", "text", "split"])
    qrels = json.loads((data / "qrels.json").read_text(encoding="utf-8"))
    golds = load_answers(ko["squad_path"])
    test = [q for q in queries if q["split"] == "test"]
    if not 0 < int(g["sample"]) <= len(test):
        raise InputError(f"params: ko_gen.sample must be in 1..{len(test)}, got {g['sample']}")
    order = {q["_id"]: i for i, q in enumerate(test)}
    sample = sorted(random.Random(int(g["seed"])).sample(test, int(g["sample"])), key=lambda q: order[q["_id"]])

    texts = [passage_text(x, ko["index_title"]) for x in passages]
    tokens = dict(zip(texts, korean.kiwi_tokens_batch(texts)))

    def tokenize(text: str) -> list[str]:  # passages pre-tokenized once; questions on demand
        return tokens[text] if text in tokens else korean.kiwi_tokens(text)

    k1, b = float(g["bm25_k1"]), float(ko["bm25_b"])
    full = BM25Index(texts, tokenize, k1=k1, b=b)
    depth = max(k for ks in g["grid"].values() for k in ks)
    cap = int(g["passage_max_chars"])
    pid_row = {x["_id"]: i for i, x in enumerate(passages)}

    llm = {**p["llm"], "n_ctx": int(g["n_ctx"]), "threads": int(g["threads"]), "n_parallel": 1}
    rows, cells_rows = [], {}
    call_ms = []
    with llm_url({"llm": llm}) as url:
        for qi, q in enumerate(sample):
            gold_ids = set(qrels[q["_id"]])
            keep = [i for i, x in enumerate(passages) if x["_id"] not in gold_ids]
            excl = BM25Index([texts[i] for i in keep], tokenize, k1=k1, b=b)
            ranked = {"gold_included": [i for i, _ in full.top_k(q["text"], depth)],
                      "gold_excluded": [keep[i] for i, _ in excl.top_k(q["text"], depth)]}
            for prompt, ks in g["grid"].items():
                s = settings(g, p["llm"], prompt)
                for cond in CONDITIONS:
                    for k in sorted(ks):
                        idx = ranked[cond][:k]
                        ptexts = [focus(q["text"], passages[i]["text"], cap) for i in idx]
                        res = answer_ko(url, q["text"], ptexts, s)
                        if res["total_ms"] is not None:
                            call_ms.append(res["total_ms"])
                        row = {"id": q["_id"], "prompt": prompt, "condition": cond, "k": k,
                               "gold_excluded": cond == "gold_excluded",
                               "retrieved": [passages[i]["_id"] for i in idx],
                               "gold_retrieved": any(pid_row[x] in idx for x in gold_ids),
                               "question": q["text"], "golds": golds.get(q["_id"], []), "passages": ptexts,
                               **res}
                        rows.append(row)
                        cells_rows.setdefault((prompt, k, cond), []).append(row)
            print(f"  question {qi + 1}/{len(sample)}: {time.perf_counter() - t_start:.0f} s", flush=True)

    cells = {}
    for (prompt, k, cond), rs in cells_rows.items():
        m = score_rows(rs)
        cells[f"{prompt}/k={k}/{cond}"] = {"prompt": prompt, "top_k": k, "condition": cond,
                                           "gold_retrieved_rate": round(sum(r["gold_retrieved"] for r in rs) / len(rs), 4),
                                           **m}
    runtime = round(time.perf_counter() - t_start, 1)
    calls = [x for x in call_ms if x is not None]
    meta = {"questions": len(sample), "seed": g["seed"], "calls": len(rows), "runtime_s": runtime,
            "llm_call_ms_mean": round(sum(calls) / len(calls), 1) if calls else 0.0,
            "llm": p["llm"]["url"] or f"packaged {p['llm']['local_model']} (llama.cpp, local; rag.llm.registry)",
            "retriever": f"BM25 (k1={k1}, b={b}) over {korean.tokenizer_version('kiwi')}, "
                         f"index_title={ko['index_title']}, all {len(passages)} passages",
            "passage_max_chars": cap, "max_len": g["max_len"], "grid": g["grid"]}
    write_jsonl(data / "generation.jsonl", [{k: v for k, v in r.items() if k != "passages"} for r in rows])
    write_json(out / "generation.json", {**meta, "cells": cells})
    write_text(out / "generation.md",
               f"Grounded Korean answers, KorQuAD 1.0 dev test split: {len(sample)} sampled questions "
               f"(seed {g['seed']}), {meta['llm']}; retriever {meta['retriever']}. Rates over all n questions "
               f"of a cell (never NaN). raw = the model's JSON; final = after verifier + extractive fallback. "
               f"In gold_excluded a correct system abstains (abstain = 1.00, halluc. = 0.00). "
               f"final status counts: verified llm / llm abstained / extractive / fallback abstained. "
               f"Runtime {runtime} s, {len(rows)} calls.\n\n" + table(cells))
    print(f"ko_generate: {len(sample)} questions, {len(rows)} calls, {runtime} s")
    print(table(cells))


main(run)
