"""Stage fit_selection (frozen; refit with `dvc repro -f fit_selection`): learn which retrieved sentence answers a
question (`rag.voice.selection`) on half of HeySQuAD; the models are shipped in models/, so the voice track needs no HeySQuAD.

HeySQuAD's 16 articles are split by article: even-numbered articles train (and choose ``min_score``), odd ones
report. Every question in its three forms (typed / human ASR / machine ASR, rewritten as in the voice track) gets
the sentences of its top ``retrieval.k`` passages as candidates; a candidate is positive when it is in the gold
paragraph and holds a gold answer span (the same string in another paragraph is left out of training). Near-miss
negatives (SQuAD 2.0): each question with its rarest key word that the gold paragraph holds swapped
(`rag.voice.selection.swap_key_term`), searched again; none of its candidates answers. Half the swaps (a seeded coin)
take a rare word of another article, half a word the KB never uses (from the MiniLM tokenizer's vocabulary): a
caller's near miss names something the KB lacks ("rabies shot"), which a recogniser's garbled word also is.
``min_score`` is chosen on the same training half (`rag.voice.selection.choose_min_score`).
Writes the models (``select.model_dir``/selection-{design}.json, committed), every (question, candidate, label) to
``select.pairs`` (the cross-encoder's training data, stage train_cross) and metrics/heysquad/selection.json:
pick hit rate per form and split for the rules pick and each design, near-miss refused, ~4 min.
"""
import json
import random
import time

import numpy as np

from common import ROOT, heysquad_index, main, params
from rag import config
from rag.voice import selection
from rag.voice.answer import pick_sentence, retrieve
from rag.eval.evaluate import embed_texts
from rag.bench.heysquad import SOURCES, as_transcripts
from rag.io import write_json, write_jsonl
from rag.voice.queries import rewrite_queries
from rag.retrieval.indexes import word_tokens
from rag.retrieval.sentences import SentenceIndex


def groups_of(queries, texts, vectors, index, sentences, settings, rules, hybrid, near_miss):
    """One row per question: its candidates' features, labels, training mask and the rules pick."""
    out = []
    for q in queries:
        if q["id"] not in texts:
            continue
        text, v = texts[q["id"]], vectors[q["id"]]
        docs = retrieve(index, text, v, settings)[1]
        cands, x = selection.candidate_features(text, v, docs, sentences)
        if not cands:
            continue
        gold, answers = q["relevant"][0], [a.lower() for a in q["answers"]]
        holds = np.array([any(a in s.lower() for a in answers) for s, _, _ in cands])
        in_gold = np.array([d == gold for _, d, _ in cands])
        y = np.zeros(len(cands), bool) if near_miss else holds & in_gold
        keep = np.ones(len(cands), bool) if near_miss else ~(holds & ~in_gold)
        rules_pick = pick_sentence(text, v, [s for s, _, _ in cands], np.stack([c[2] for c in cands]), rules,
                                   settings.mode, hybrid)
        out.append({"id": q["id"], "x": x, "y": y, "keep": keep, "rules": rules_pick, "near_miss": near_miss,
                    "query": text, "sentences": [c for c, _, _ in cands]})
    return out


def report(groups, scorer):
    """hit (answerable: the pick holds the answer), said / near-miss refused at min_score."""
    ans = [g for g in groups if not g["near_miss"]]
    nm = [g for g in groups if g["near_miss"]]
    if scorer is None:
        return {"hit": round(float(np.mean([g["y"][g["rules"]] for g in ans])), 6), "questions": len(ans)}
    best = [scorer.probabilities(g["x"]) for g in groups]
    picks = {id(g): (int(np.argmax(b)), float(b.max())) for g, b in zip(groups, best)}
    said = [g for g in ans if picks[id(g)][1] >= scorer.min_score]
    return {"questions": len(ans), "hit": round(float(np.mean([g["y"][picks[id(g)][0]] for g in ans])), 6),
            "answerable_said": round(len(said) / len(ans), 6),
            "right_of_said": round(float(np.mean([g["y"][picks[id(g)][0]] for g in said])), 6) if said else 0.0,
            "near_miss": len(nm),
            "near_miss_refused": round(float(np.mean([picks[id(g)][1] < scorer.min_score for g in nm])), 6)}


def run():
    t0 = time.perf_counter()
    p = params()
    s = p["select"]
    passages, queries, index = heysquad_index(p, "answers")
    settings, rules, hybrid = config.answer_settings(p, 0.0), config.verify_rules(p), config.hybrid_config(p)
    kb = {r["_id"]: r["text"] for r in passages}
    article = {r["_id"]: r["article"] for r in passages}
    split = {q["id"]: "train" if article[q["relevant"][0]] % 2 == 0 else "report" for q in queries}
    sentences = SentenceIndex.build(kb)
    stats = sentences.stats
    words_of = {}
    for d, text in kb.items():
        words_of.setdefault(article[d], set()).update(w for w in word_tokens(text, selection.STOPWORDS) if w.isalpha())
    rng = random.Random(int(s["seed"]))
    kb_words = set().union(*words_of.values())
    unseen = sorted(w for w in json.loads((ROOT / "models" / "all-MiniLM-L6-v2.tokenizer.json").read_text())["model"]["vocab"]
                    if w.isalpha() and w.islower() and len(w) > 4 and w not in kb_words)
    swaps = {}
    for q in queries:  # the swap word: rare (<= 2 sentences) and from another article, or never in the KB
        a = article[q["relevant"][0]]
        pool = unseen if rng.random() < 0.5 else sorted(
            w for b, ws in words_of.items() if b != a for w in ws if len(w) > 4 and stats.df.get(selection._stem(w), 0) <= 2)
        swaps[q["id"]] = selection.swap_key_term(q["typed"], kb[q["relevant"][0]], pool, stats, rng)
    print(f"fit_selection: sentences and swaps {time.perf_counter() - t0:.0f} s", flush=True)
    groups = {}
    rewrite = config.rewrite_rules(p, index.passages)
    for source in SOURCES:
        texts = rewrite_queries(as_transcripts(queries, source), rewrite)
        near = {qid: t for qid, t in ((qid, selection.replace_word(texts[qid], *swaps[qid]) if swaps[qid] else None)
                                      for qid in texts) if t}
        for kind, ts in (("answerable", texts), ("near_miss", near)):
            groups[(source, kind)] = groups_of(queries, ts, embed_texts(ts), index, sentences, settings, rules,
                                               hybrid, kind == "near_miss")
        print(f"fit_selection: {source} {time.perf_counter() - t0:.0f} s", flush=True)
    write_jsonl(ROOT / s["pairs"], ({"split": split[g["id"]], "form": source, "near_miss": g["near_miss"], "id": g["id"],
                                     "query": g["query"], "sentence": c, "label": bool(y_), "keep": bool(k)}
                                    for (source, _), gs in groups.items() for g in gs
                                    for c, y_, k in zip(g["sentences"], g["y"], g["keep"])))
    train = [g for gs in groups.values() for g in gs if split[g["id"]] == "train"]
    x = np.vstack([g["x"][g["keep"]] for g in train])
    y = np.concatenate([g["y"][g["keep"]] for g in train])
    scorers = {}
    for design in ("linear", "mlp"):  # the cross design is stage train_cross's
        m = selection.fit(x, y, design, int(s["seed"]))
        best = [m.probabilities(g["x"]) for g in train]
        m.min_score = round(selection.choose_min_score([b.max() for b in best],
                                                       [bool(g["y"][int(np.argmax(b))]) for g, b in zip(train, best)],
                                                       [not g["near_miss"] for g in train]), 6)
        m.meta = {"trained_on": "HeySQuAD dev-common, even articles, typed + human + machine, with near misses",
                  "candidates": len(y), "positives": int(y.sum())}
        m.save(ROOT / s["model_dir"] / f"selection-{design}.json")
        scorers[design] = m
    out = {"split": "train = even articles (fit and min_score), report = odd articles",
           "min_score": {d: m.min_score for d, m in scorers.items()}, "results": {}}
    for (source, kind), gs in groups.items():
        if kind == "near_miss":
            continue
        for part in ("train", "report"):
            both = [g for g in gs + groups[(source, "near_miss")] if split[g["id"]] == part]
            out["results"].setdefault(source, {})[part] = {
                d: report(both, scorers.get(d)) for d in ("rules", *scorers)}
    out["runtime_s"] = round(time.perf_counter() - t0, 1)
    write_json(ROOT / p["heysquad"]["metrics_dir"] / "selection.json", out)
    for source, parts in out["results"].items():
        print(source, {d: r["hit"] for d, r in parts["report"].items()})


main(run)
