"""Stage ko_prepare: KorQuAD 1.0 dev (SQuAD JSON) -> BEIR-style passages/queries/qrels + an article split.

Reads params ``ko.*``. Writes, under
``ko.data_dir``: passages.jsonl, queries.jsonl (with ``split``), qrels.json, split.json; under
``ko.metrics_dir``: dataset.json (sizes), question_lengths.csv and questions_per_article.csv (plot data for
eval-set checks). Only counts and indices reach metrics/ (the licence forbids redistributing derived text).
"""
from __future__ import annotations

import collections
import time
from pathlib import Path

from common import main, params
from rag.io import write_json, write_jsonl, write_text
from rag.bench.squad import load_squad, split_articles, split_queries


def run() -> None:
    p = params()["ko"]
    t0 = time.perf_counter()

    ds = load_squad(p["squad_path"], dedupe_passages=p["dedupe_passages"])
    train_a, test_a = split_articles(len(ds.articles), p["test_fraction"], p["seed"])
    train_q, test_q = split_queries(ds.queries, test_a)
    test_set = set(test_a)
    split_of = {a: ("test" if a in test_set else "train") for a in range(len(ds.articles))}

    data = Path(p["data_dir"])
    write_jsonl(data / "passages.jsonl", ds.passages)
    write_jsonl(data / "queries.jsonl", [{**q, "split": split_of[q["article"]]} for q in ds.queries])
    write_json(data / "qrels.json", ds.qrels)
    write_json(data / "split.json", {"seed": p["seed"], "test_fraction": p["test_fraction"],
                                     "train_articles": train_a, "test_articles": test_a, "aliases": ds.aliases})

    metrics = Path(p["metrics_dir"])
    passages_per_article = collections.Counter(x["article"] for x in ds.passages)
    questions_per_article = collections.Counter(q["article"] for q in ds.queries)
    write_text(metrics / "questions_per_article.csv",
               "article,split,passages,questions\n"
               + "".join(f"{a},{split_of[a]},{passages_per_article[a]},{questions_per_article[a]}\n"
                         for a in range(len(ds.articles))))
    width = int(p["length_bin"])
    hist = collections.Counter((split_of[q["article"]], len(q["text"]) // width * width) for q in ds.queries)
    write_text(metrics / "question_lengths.csv",
               "split,length_chars,questions\n"
               + "".join(f"{s},{b},{hist[s, b]}\n" for s, b in sorted(hist)))

    def side(queries, articles):
        return {"articles": len(articles), "queries": len(queries),
                "passages": sum(passages_per_article[a] for a in articles),
                "query_chars_mean": round(sum(len(q["text"]) for q in queries) / len(queries), 2)}

    write_json(metrics / "dataset.json", {
        "source": str(p["squad_path"]),
        "passages_in_file": sum(passages_per_article.values()) + len(ds.aliases),
        "passages_indexed": len(ds.passages),
        "duplicate_passages_merged": ds.aliases,
        "queries": len(ds.queries),
        "train": side(train_q, train_a),
        "test": side(test_q, test_a),
    })
    print(f"ko_prepare: {len(ds.passages)} passages ({len(ds.aliases)} duplicates merged), "
          f"train {len(train_q)} / test {len(test_q)} queries, "
          f"{len(train_a)} / {len(test_a)} articles, {time.perf_counter() - t0:.1f} s")


main(run)
