"""Stage ko_support: chooses ``ko_gen.min_question_share`` on the TRAIN split -> metrics/ko/question_share.{json,md}.

The Korean verifier (`rag.ko.answer.sentence_support`) says an answer only when one cited sentence holds it and at
least ``min_question_share`` of the question's key terms; the extractive fallback obeys the same bar. For
``ko_support.sample`` train-split questions (drawn with ``ko_support.seed``): *supported* = the `question_share` of
the gold passage's sentence holding a gold answer (the best such sentence); *unsupported* = that of the best
sentence among the ``ko_support.top_k`` BM25 passages (kiwi, k1 ``ko_gen.bm25_k1``) when the gold passage is left
out, each shown as the model sees it (`rag.ko.answer.focus`, ``ko_gen.passage_max_chars``): the sentence a model
copies from when the passages lack the answer. The value of ``ko_support.grid`` with the best Youden J is
reported as ``chosen`` (`rag.ko.answer.choose_question_share`), beside ``shipped`` (params); the test split is
never read. No LLM.
"""
from __future__ import annotations

import random
import time
from pathlib import Path

from common import main, params
from ko_runs import korquad

from rag.bench.squad import passage_text
from rag.io import write_json, write_text
from rag.ko import tokenize as korean
from rag.ko.answer import choose_question_share, focus, question_share, span_match, split_sentences_ko
from rag.retrieval.indexes import BM25Index


def run() -> None:
    t0 = time.perf_counter()
    p = params()
    ko, g, c = p["ko"], p["ko_gen"], p["ko_support"]
    passages, queries, qrels, golds = korquad(ko)
    train = [q for q in queries if q["split"] == "train"]
    sample = random.Random(int(c["seed"])).sample(train, min(int(c["sample"]), len(train)))
    texts = [passage_text(x, ko["index_title"]) for x in passages]
    tokens = dict(zip(texts, korean.kiwi_tokens_batch(texts)))

    def tokenize(text: str) -> list[str]:
        return tokens[text] if text in tokens else korean.kiwi_tokens(text)

    k1, b, k, cap = float(g["bm25_k1"]), float(ko["bm25_b"]), int(c["top_k"]), int(g["passage_max_chars"])
    supported, unsupported = [], []
    for q in sample:
        gold_ids = set(qrels[q["_id"]])
        holding = [s for x in passages if x["_id"] in gold_ids for s in split_sentences_ko(x["text"])
                   if span_match(s, golds.get(q["_id"], []))]
        if holding:  # a gold span across a sentence boundary has no supporting sentence: left out
            supported.append(max(question_share(q["text"], s)[1] for s in holding))
        keep = [i for i, x in enumerate(passages) if x["_id"] not in gold_ids]
        top = BM25Index([texts[i] for i in keep], tokenize, k1=k1, b=b).top_k(q["text"], k)
        shown = [s for i, _ in top for s in split_sentences_ko(focus(q["text"], passages[keep[i]]["text"], cap))]
        unsupported.append(max((question_share(q["text"], s)[1] for s in shown), default=0.0))
    chosen, table = choose_question_share(supported, unsupported, c["grid"])
    out = {"split": "train", "questions": len(sample), "supported_n": len(supported),
           "unsupported_n": len(unsupported), "seed": c["seed"], "top_k": k, "chosen": chosen,
           "shipped": float(g["min_question_share"]), "table": table,
           "runtime_s": round(time.perf_counter() - t0, 1)}
    write_json(Path(ko["metrics_dir"]) / "question_share.json", out)
    lines = "".join(f"| {r['min_question_share']:.2f} | {r['supported_kept']:.3f} | {r['unsupported_kept']:.3f} | "
                    f"{r['j']:.3f} |\n" for r in table)
    write_text(Path(ko["metrics_dir"]) / "question_share.md",
               f"Korean sentence support on {len(sample)} TRAIN-split questions (seed {c['seed']}): share of "
               f"sentences kept at each min_question_share. supported = the gold answer's sentence "
               f"({len(supported)} questions), unsupported = the best sentence of the top {k} BM25 passages "
               f"without the gold passage ({len(unsupported)}). Chosen (best J = kept - leaked): {chosen}; "
               f"shipped (params ko_gen.min_question_share): {out['shipped']}.\n\n"
               "| min_question_share | supported kept | unsupported kept | J |\n|---|---|---|---|\n" + lines)
    print(f"ko_support: chosen {chosen}, shipped {out['shipped']}, {out['runtime_s']} s")


main(run)
