"""Stage ko_retrieval: every Korean retriever on the test-split queries -> metrics/ko/retrieval.{json,md}.

Reads params ``ko.*`` and, from ``ko.data_dir``: passages.jsonl,
queries.jsonl, qrels.json, {name}_passages.npy, {name}_queries.npy, {name}_meta.json for each name of ``DENSE``
(stages ko_embed, ko_embed_e5). Search space: every (deduplicated) passage. Rows: BM25 per tokenizer (k1/b from params), the dense
retrievers (USE; multilingual-e5-small, packaged and fine-tuned on the train split, stages ko_finetune /
ko_embed_e5), the fixed RRF fusions of ``ko.fusions``,
BM25 kiwi/bigram with k1 chosen on train, and ``learned_rrf`` (BM25 k1, RRF k and weights chosen on the
TRAIN split only, by ``ko.learned.objective``) with one more learned row per ``ko.learned.compare`` entry (name ->
members; e5_finetuned was trained on the train split, so its weight there is chosen on questions it has seen: a
biased choice that can cost the test score but cannot inflate it), and one row per ``ko.learned.convex`` entry: the
convex combination of min-max normalised scores (`rag.retrieval.learned_fusion.fuse_convex`, Bruch et al. 2023),
BM25 k1 and weights (``convex_weight_grid``) chosen on the train split the same way; ``learned_rrf_convex_grid``:
RRF of ``ko.learned.retrievers`` on that same finer grid (is a convex gain the fusion's or the grid's?);
``paired_vs_rrf``: each convex row minus the learned RRF row of the same members per test question (mean, 95 %
bootstrap interval, questions better / worse). Writes metrics/ko/retrieval.json (test metrics per row,
tokenizer name+version, the learned choice), metrics/ko/retrieval.md, metrics/ko/fusion_grid.csv (train grid),
and the headline metrics/ko/summary.json (recall@1, nDCG@10 of learned_rrf, of each compared learned row and of the
best single retriever).
"""
from __future__ import annotations

import json
import random
import time
from pathlib import Path

import numpy as np

from common import check_weight_grid, main, params, params_error
from rag.ko import tokenize as korean
from rag.io import InputError, read_jsonl, write_json, write_text
from rag.retrieval.learned_fusion import fuse, fuse_convex, search_fusion, weight_grid
from rag.eval.intervals import bootstrap_interval
from rag.eval.metrics import evaluate_run, to_run
from rag.retrieval.indexes import BM25Index, DenseIndex
from rag.bench.squad import passage_text

DENSE = ("use", "e5", "e5_finetuned")   # dense retrievers: {name}_passages.npy / _queries.npy / _meta.json


def memo(tokenize):
    """Cache a tokenizer's output per text (kiwi is the slow one; indexes are rebuilt per k1)."""
    cache: dict[str, list[str]] = {}

    def cached(text: str) -> list[str]:
        if text not in cache:
            cache[text] = tokenize(text)
        return cache[text]

    return cached


def run() -> None:
    p = params()["ko"]
    for key in ("weight_grid", "convex_weight_grid"):  # before any work
        check_weight_grid(p["learned"][key], f"ko.learned.{key}")
    t_start = time.perf_counter()
    data, out = Path(p["data_dir"]), Path(p["metrics_dir"])
    passages = read_jsonl(data / "passages.jsonl", required=["_id", "title", "text"])
    queries = read_jsonl(data / "queries.jsonl", required=["_id", "text", "split"])
    qrels = json.loads((data / "qrels.json").read_text(encoding="utf-8"))
    vectors = {}
    for name in DENSE:
        pvec, qvec = np.load(data / f"{name}_passages.npy"), np.load(data / f"{name}_queries.npy")
        if pvec.shape[0] != len(passages) or qvec.shape[0] != len(queries):
            raise InputError(f"{data}: {name} vectors {pvec.shape}/{qvec.shape} do not match "
                             f"{len(passages)} passages / {len(queries)} queries: re-run its embedding stage")
        meta = json.loads((data / f"{name}_meta.json").read_text(encoding="utf-8"))
        if meta["index_title"] != p["index_title"]:
            raise InputError(f"{data / f'{name}_meta.json'}: embedded with index_title={meta['index_title']}: "
                             f"re-run its embedding stage")
        vectors[name] = (pvec, qvec, meta)

    pids = [x["_id"] for x in passages]
    texts = [passage_text(x, p["index_title"]) for x in passages]
    qrow = {q["_id"]: i for i, q in enumerate(queries)}
    test = [q for q in queries if q["split"] == "test"]
    train = [q for q in queries if q["split"] == "train"]
    if p["learned"]["train_sample"] and p["learned"]["train_sample"] < len(train):
        train = sorted(random.Random(p["seed"]).sample(train, p["learned"]["train_sample"]), key=lambda q: qrow[q["_id"]])
    qrels_test = {q["_id"]: qrels[q["_id"]] for q in test}
    qrels_train = {q["_id"]: qrels[q["_id"]] for q in train}
    depth, ks = int(p["depth"]), tuple(p["ks"])
    tok = {name: memo(korean.TOKENIZERS[name]) for name in p["tokenizers"]}
    seconds: dict[str, float] = {}

    ranked: dict[tuple, dict] = {}   # (tokenizer, k1, split) -> run: each learned row reuses the BM25 members' runs

    def bm25_rankings(name, k1, qs):
        split = qs[0]["split"] if qs else ""
        if (name, k1, split) not in ranked:
            t0 = time.perf_counter()
            index = BM25Index(texts, tok[name], k1=k1, b=p["bm25_b"])
            ranked[name, k1, split] = {q["_id"]: index.top_k(q["text"], depth) for q in qs}
            key = f"bm25_{name} k1={k1}"
            seconds[key] = seconds.get(key, 0.0) + time.perf_counter() - t0
        return ranked[name, k1, split]

    def dense_rankings(name, qs):
        pvec, qvec, _ = vectors[name]
        index = DenseIndex(pvec)
        return {q["_id"]: index.top_k(qvec[qrow[q["_id"]]], depth) for q in qs}

    # ---- fixed rows, test split
    runs: dict[str, dict] = {}
    info: dict[str, dict] = {}
    for name in p["tokenizers"]:
        runs[f"bm25_{name}"] = bm25_rankings(name, p["bm25_k1"], test)
        info[f"bm25_{name}"] = {"tokenizer": name, "tokenizer_version": korean.tokenizer_version(name),
                                "k1": p["bm25_k1"], "b": p["bm25_b"]}
    for name in DENSE:
        runs[name] = dense_rankings(name, test)
        info[name] = {"tokenizer": "SentencePiece (the model's)", "tokenizer_version": vectors[name][2]["model"]}
    for fname, weights in p["fusions"].items():
        names = list(weights)
        runs[fname] = fuse([runs[n] for n in names], p["rrf_k"], [weights[n] for n in names], depth)
        info[fname] = {"fusion": "rrf", "rrf_k": p["rrf_k"], "depth": depth, "weights": weights}

    # ---- learned on train only: BM25 k1 x RRF k x weights
    lp = p["learned"]
    known = {*DENSE, *(f"bm25_{name}" for name in p["tokenizers"])}
    for name, members in {"ko.learned.retrievers": lp["retrievers"], **{f"ko.learned.compare.{n}": m
                                                                         for n, m in lp["compare"].items()},
                                                                      **{f"ko.learned.convex.{n}": m
                                                                         for n, m in lp["convex"].items()}}.items():
        if unknown := [m for m in members if m not in known]:
            raise params_error(f"{name} names {unknown}, not one of {sorted(known)}")
    grid_seconds = 0.0

    def learned(members: list[str], fusion: str = "rrf", grid=None) -> tuple[dict, dict, list, list]:
        """``fusion`` (RRF, or the convex combination of min-max normalised scores) of ``members`` with BM25 k1, RRF
        k and weights chosen on the train queries: (test run, its info, the train grid's rows, the members' test
        lists)."""
        nonlocal grid_seconds
        dense_train = {m: dense_rankings(m, train) for m in members if m in DENSE}
        lists_by_k1 = {k1: [dense_train[m] if m in DENSE else bm25_rankings(m.removeprefix("bm25_"), k1, train)
                            for m in members] for k1 in lp["bm25_k1_grid"]}
        t0 = time.perf_counter()
        grid = grid or (lp["weight_grid"] if fusion == "rrf" else lp["convex_weight_grid"])
        best, table = search_fusion(lists_by_k1, qrels_train, pids, weight_grid(grid, len(members)),
                                    lp["rrf_k_grid"], depth, lp["objective"], fusion)
        grid_seconds += time.perf_counter() - t0
        k1 = best["setting"]
        test_lists = [runs[m] if m in DENSE else bm25_rankings(m.removeprefix("bm25_"), k1, test) for m in members]
        chosen = {"bm25_k1": k1, "rrf_k": best["rrf_k"], "weights": dict(zip(members, (round(w, 4) for w in best["weights"]))),
                  f"train_{lp['objective']}": round(best[lp["objective"]], 4), "train_queries": len(train),
                  "candidates": len(table)}
        return (fuse(test_lists, best["rrf_k"], best["weights"], depth) if fusion == "rrf"
                else fuse_convex(test_lists, best["weights"], depth),
                {"fusion": f"{fusion}, learned on train", "depth": depth, **chosen}, table, test_lists)

    members = lp["retrievers"]
    runs["learned_rrf"], info["learned_rrf"], table, test_lists = learned(members)
    k1 = info["learned_rrf"]["bm25_k1"]
    for name, others in lp["compare"].items():
        runs[name], info[name], _, _ = learned(others)
    for name, others in lp["convex"].items():
        runs[name], info[name], _, _ = learned(others, "convex")
    # RRF on the convex rows' finer grid: is a convex row's gain the fusion's or the grid's?
    runs["learned_rrf_convex_grid"], info["learned_rrf_convex_grid"], _, _ = learned(members, "rrf", lp["convex_weight_grid"])
    seconds["fusion grid search"] = grid_seconds

    # single BM25 retrievers with k1 chosen on train (one-retriever rows of the same grid), for a fair baseline
    for m in members:
        if m in DENSE:
            continue
        i = members.index(m)
        onehot = [row for row in table if row["weights"][i] == 1.0 and sum(row["weights"]) == 1.0
                  and row["rrf_k"] == lp["rrf_k_grid"][0]]
        pick = max(onehot, key=lambda row: row[lp["objective"]])  # max() keeps the first on ties
        name = f"{m}_k1_train"
        runs[name] = (test_lists[i] if pick["setting"] == k1
                      else bm25_rankings(m.removeprefix("bm25_"), pick["setting"], test))
        info[name] = {**info[m], "k1": pick["setting"], f"train_{lp['objective']}": round(pick[lp["objective"]], 4)}

    # ---- evaluate on test
    results = {}
    for name, rankings in runs.items():
        m = evaluate_run(qrels_test, to_run(rankings, pids), ks)
        results[name] = {**{k: round(v, 4) for k, v in m.items()}, **info[name]}
    best_single = max((n for n in results if not info[n].get("fusion")), key=lambda n: results[n]["ndcg@10"])

    def per_query_ndcg(name):
        run = to_run(runs[name], pids)
        return [evaluate_run({q: qrels_test[q]}, {q: run.get(q, {})}, (10,))["ndcg@10"] for q in sorted(qrels_test)]

    rrf_rows = {tuple(m): n for n, m in {"learned_rrf": members, **lp["compare"]}.items()}
    paired = {}   # each convex row minus the learned RRF row of the same members, per test question
    for name, others in lp["convex"].items():
        if tuple(others) not in rrf_rows:
            continue
        baseline = rrf_rows[tuple(others)]
        diff = [a - b for a, b in zip(per_query_ndcg(name), per_query_ndcg(baseline))]
        paired[name] = {"baseline": baseline, "ndcg@10_minus_baseline": round(float(np.mean(diff)), 4),
                        "interval_95": list(bootstrap_interval(diff, seed=p["seed"])),
                        "questions_better": sum(d > 0 for d in diff), "questions_worse": sum(d < 0 for d in diff)}

    write_json(out / "retrieval.json", {
        "split": "test", "queries": len(test), "passages": len(pids), "train_queries_for_learning": len(train),
        "retrievers": results, "best_single_by_ndcg@10": best_single,
        "paired_vs_rrf": paired,
    })
    write_json(out / "summary.json", {  # headline for dvc exp show: the learned fusion vs the best single retriever
        name: {k.replace("@", "_at_"): results[name][k] for k in ("recall@1", "ndcg@10")}
        for name in ("learned_rrf", *lp["compare"], *lp["convex"], "learned_rrf_convex_grid", best_single)})
    header = "| retriever | R@1 | R@5 | R@10 | MRR@10 | nDCG@10 | notes |\n|---|---|---|---|---|---|---|\n"
    lines = []
    for name, r in results.items():
        note = ", ".join(f"{k}={v}" for k, v in info[name].items() if k not in ("tokenizer_version", "tokenizer") and v is not None)
        lines.append(f"| {name} | {r['recall@1']:.3f} | {r['recall@5']:.3f} | {r['recall@10']:.3f} | "
                     f"{r['mrr@10']:.3f} | {r['ndcg@10']:.3f} | {note} |\n")
    write_text(out / "retrieval.md",
               f"KorQuAD 1.0 dev, test split: {len(test)} queries, {len(pids)} passages searched; "
               f"one relevant passage per query, so Hit@k = R@k.\n\n" + header + "".join(lines))
    write_text(out / "fusion_grid.csv",
               f"bm25_k1,rrf_k,{','.join('w_' + m for m in members)},train_{lp['objective']}\n"
               + "".join(f"{r['setting']},{r['rrf_k']},{','.join(str(w) for w in r['weights'])},"
                         f"{r[lp['objective']]:.4f}\n" for r in table))
    for k, v in seconds.items():
        print(f"  {k}: {v:.1f} s")
    print(f"ko_retrieval: {len(test)} test / {len(train)} train queries, learned {info['learned_rrf']}, "
          f"total {time.perf_counter() - t_start:.1f} s")
    print(header + "".join(lines))


main(run)
