"""Stage fit_selection (frozen; refit with `dvc unfreeze fit_selection && dvc repro fit_selection`, then
`dvc freeze fit_selection`): learn which retrieved sentence answers a question (`rag.voice.selection`) on half of
HeySQuAD and on the clinic; the models are shipped in models/, so the voice track needs no HeySQuAD.

HeySQuAD's 16 articles are split by article: even-numbered articles train, odd ones
report. Every question in its three forms (typed / human ASR / machine ASR, rewritten as in the voice track) gets
the sentences of its top ``retrieval.k`` passages as candidates; a candidate is positive when it is in the gold
paragraph and holds a gold answer span (the same string in another paragraph is left out of training). Near-miss
negatives (SQuAD 2.0): each question with its rarest key word that the gold paragraph holds swapped
(`rag.voice.selection.swap_key_term`), searched again; none of its candidates answers. Half the swaps (a seeded coin)
take a rare word of another article, half a word the KB never uses (from the MiniLM tokenizer's vocabulary): a
caller's near miss names something the KB lacks ("rabies shot"), which a recogniser's garbled word also is.
The clinic's labelled questions join the training data (``select.clinic_share`` of the weight; HeySQuAD has no
yes/no or office-FAQ questions): the fixture questions, the dialogue turns' standalone forms and the clinic near
misses, each typed and as the recogniser heard it; a candidate is positive when it is in a relevant document and holds
every fact. ``min_score`` is chosen on the clinic (`rag.voice.selection.choose_min_score`, the FAQ domain it serves)
from out-of-fold scores: two models, each fitted without one half of the clinic's documents, score the other half.
The vet KB is never read here.
Writes the models (``select.model_dir``/selection-{design}.json, committed), every (question, candidate, label) to
``select.pairs`` (the cross-encoder's training data, stage train_cross) and metrics/heysquad/selection.json:
pick hit rate per form and split for the rules pick and each design, near-miss refused, and the same on the
clinic out of fold (``clinic_out_of_fold``; the rules pick with the clinic's tables off, as on a new KB), ~5 min.

``--variant SECTION`` (stage fit_selection_e5_fourth) measures another chain, nothing written to models/ or
``select.pairs``: the section's ``embed_model`` and ``retrieval`` keys over params' (the HeySQuAD paragraphs embedded
again by that encoder), the same fits and report written to ``heysquad.metrics_dir``/``metrics_file``.
"""
import json
import random
import time

import numpy as np

from common import ROOT, args, heysquad_index, main, params, params_error, tables_off
from rag import config
from rag.eval.scoring import has_facts
from rag.io import read_jsonl
from rag.retrieval.chunk import load_kb
from rag.retrieval.search import PassageIndex
from rag.voice.quarantine import allowed
from rag.voice.queries import load_queries
from rag.voice import selection
from rag.voice.answer import pick_sentence, retrieve
from rag.eval.evaluate import embed_texts
from rag.bench.heysquad import SOURCES, article_split, as_transcripts
from rag.io import sha256_of, write_json, write_jsonl
from rag.retrieval.e5 import cosines_of
from rag.voice.queries import rewrite_queries
from rag.retrieval.indexes import word_tokens
from rag.retrieval.sentences import SentenceIndex


def groups_of(queries, texts, vectors, index, sentences, settings, rules, hybrid, near_miss, e5):
    """One row per question: its candidates' features, labels, training mask and the rules pick. A question holds
    ``answers`` (HeySQuAD: any gold span in the gold paragraph) or ``facts`` (the clinic: every fact, in a relevant
    document); an unanswerable one has no positive. ``e5``: the `E5Cosines` of the e5_cosine feature."""
    out = []
    for q in queries:
        if q["id"] not in texts:
            continue
        text, v = texts[q["id"]], vectors[q["id"]]
        docs = retrieve(index, text, v, settings)[1]
        cands, x = selection.candidate_features(text, v, docs, sentences, e5)
        if not cands:
            continue
        if "facts" in q:
            holds = np.array([has_facts(s, q["facts"]) for s, _, _ in cands])
        else:
            answers = [a.lower() for a in q["answers"]]
            holds = np.array([any(a in s.lower() for a in answers) for s, _, _ in cands])
        in_gold = np.array([d in q["relevant"][:1 if "answers" in q else None] for _, d, _ in cands])
        refuse = near_miss or not q.get("answerable", True)
        y = np.zeros(len(cands), bool) if refuse else holds & in_gold
        keep = np.ones(len(cands), bool) if refuse else ~(holds & ~in_gold)
        rules_pick = pick_sentence(text, v, [s for s, _, _ in cands], np.stack([c[2] for c in cands]), rules,
                                   settings.mode, settings.sentence_hybrid)
        out.append({"id": q["id"], "x": x, "y": y, "keep": keep, "rules": rules_pick, "near_miss": refuse,
                    "query": text, "sentences": [c for c, _, _ in cands],
                    "near": q.get("near") or (q["relevant"] or [""])[0]})
    return out


def clinic_groups(p, settings, rules, hybrid, e5):
    """The clinic's labelled questions as training groups (`groups_of`), each typed and as heard: the fixture
    questions (follow-ups rewritten against their context), the dialogue turns' standalone forms and the near misses."""
    v, s = p["voice"], p["select"]
    index = PassageIndex.from_folder(ROOT / v["kb"], hybrid, allowed(p))
    sentences = SentenceIndex.build(load_kb(ROOT / v["kb"], allowed(p)))
    rewrite = config.rewrite_rules(p, index.passages)
    fixture = load_queries(ROOT / v["queries"])
    dialogues = [{**t, "context": None} for t in read_jsonl(ROOT / s["clinic_dialogues"],
                                                               required=("id", "kb", "standalone", "standalone_asr"))
                 if t["kb"] == "clinic"]
    near = load_queries(ROOT / s["near_miss"]["clinic"])
    forms = {"fixture_asr": fixture, "fixture_typed": [{**q, "asr": q["spoken"]} for q in fixture],
             "dialogue_asr": [{**t, "asr": t["standalone_asr"]} for t in dialogues],
             "dialogue_typed": [{**t, "asr": t["standalone"]} for t in dialogues],
             "near_miss_asr": near, "near_miss_typed": [{**q, "asr": q["spoken"]} for q in near]}
    out = []
    for form, qs in forms.items():
        texts = rewrite_queries(qs, rewrite)
        for g in groups_of(qs, texts, embed_texts(texts), index, sentences, settings, rules, hybrid,
                           form.startswith("near_miss"), e5):
            out.append({**g, "form": form})
    return out


def report(groups, scorer, probabilities=None):
    """hit (answerable: the pick holds the answer), said / near-miss refused at min_score; ``probabilities``: each
    group's candidate scores when not ``scorer``'s own (out-of-fold)."""
    ans = [g for g in groups if not g["near_miss"]]
    nm = [g for g in groups if g["near_miss"]]
    if scorer is None:
        return {"hit": round(float(np.mean([g["y"][g["rules"]] for g in ans])), 6), "questions": len(ans)}
    best = probabilities or [scorer.probabilities(g["x"]) for g in groups]
    picks = {id(g): (int(np.argmax(b)), float(b.max())) for g, b in zip(groups, best)}
    said = [g for g in ans if picks[id(g)][1] >= scorer.min_score]
    return {"questions": len(ans), "hit": round(float(np.mean([g["y"][picks[id(g)][0]] for g in ans])), 6),
            "answerable_said": round(len(said) / len(ans), 6),
            "right_of_said": round(float(np.mean([g["y"][picks[id(g)][0]] for g in said])), 6) if said else 0.0,
            "near_miss": len(nm),
            "near_miss_refused": round(float(np.mean([picks[id(g)][1] < scorer.min_score for g in nm])), 6)}


def with_variant(p: dict) -> tuple[dict, str | None]:
    """``(params, variant)``: with ``--variant SECTION``, ``p`` with that section's ``embed_model`` as ``embed.model``
    (made the process-wide encoder) and its ``retrieval`` keys over ``retrieval``'s, checked like params.yaml; else
    ``p`` unchanged and None. InputError naming the params file for a missing section or a bad value."""
    from rag.retrieval.embed import use_encoder

    variant = args().variant
    if variant is None:
        return p, None
    v = p.get(variant)
    if not isinstance(v, dict) or not {"embed_model", "retrieval", "metrics_file"} <= set(v):
        raise params_error(f"--variant {variant}: needs a section with embed_model, retrieval and metrics_file")
    unknown = sorted(set(v["retrieval"]) - set(p["retrieval"]))
    if unknown:
        raise params_error(f"{variant}.retrieval: no such retrieval keys {unknown}")
    q = {**p, "embed": {**p["embed"], "model": v["embed_model"]}, "retrieval": {**p["retrieval"], **v["retrieval"]}}
    try:
        config.check(q)
        use_encoder(config.encoder(q, ROOT))
    except (KeyError, ValueError, TypeError) as e:
        raise params_error(f"{variant}: {e}") from None
    return q, variant


def run():
    t0 = time.perf_counter()
    p, variant = with_variant(params())
    s = p["select"]
    e5_path = ROOT / s["model_dir"] / s["e5_model"]
    e5_sha256 = sha256_of(e5_path)
    e5 = cosines_of(e5_path, e5_sha256)
    passages, queries, index = heysquad_index(p, "answers")
    if variant:   # embed.npy is the default encoder's: the paragraphs again, by the variant's
        from rag.retrieval.embed import passage_embedder

        index = PassageIndex(index.passages, passage_embedder().embed([x.text for x in index.passages]), index.config)
    settings, rules, hybrid = config.answer_settings(p, 0.0), config.verify_rules(p), config.hybrid_config(p)
    kb = {r["_id"]: r["text"] for r in passages}
    article = {r["_id"]: r["article"] for r in passages}
    split = article_split(passages, queries)
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
                                               hybrid, kind == "near_miss", e5)
        print(f"fit_selection: {source} {time.perf_counter() - t0:.0f} s", flush=True)
    if not variant:
        write_jsonl(ROOT / s["pairs"], ({"split": split[g["id"]], "form": source, "near_miss": g["near_miss"],
                                         "id": g["id"], "query": g["query"], "sentence": c, "label": bool(y_),
                                         "keep": bool(k)}
                                        for (source, _), gs in groups.items() for g in gs
                                        for c, y_, k in zip(g["sentences"], g["y"], g["keep"])))
    train = [g for gs in groups.values() for g in gs if split[g["id"]] == "train"]
    clinic = clinic_groups(p, settings, config.verify_rules(tables_off(p)), hybrid, e5)  # rules pick as on a new KB
    clinic_docs = sorted({g["near"] for g in clinic})
    fold = {d: i % 2 for i, d in enumerate(clinic_docs)}  # the clinic's documents in two halves
    print(f"fit_selection: clinic {len(clinic)} groups ({sum(not g['near_miss'] for g in clinic)} answerable), "
          f"{time.perf_counter() - t0:.0f} s", flush=True)

    def fitted(design, clinic_part):
        """``design`` fitted on the HeySQuAD training half plus ``clinic_part`` (``select.clinic_share`` of the weight)."""
        x = np.vstack([g["x"][g["keep"]] for g in train + clinic_part])
        y = np.concatenate([g["y"][g["keep"]] for g in train + clinic_part])
        n_h = sum(int(g["keep"].sum()) for g in train)
        share = float(s["clinic_share"]) if clinic_part else 0.0
        w = np.concatenate([np.full(n_h, 1.0 - share), np.full(len(y) - n_h, share * n_h / max(len(y) - n_h, 1))])
        return selection.fit(x, y, design, int(s["seed"]), w / w.mean()), len(y), int(y.sum())

    def fitted_listwise(clinic_part):
        """``listwise`` fitted on the HeySQuAD training half's questions plus ``clinic_part``'s, the clinic's
        questions together holding ``select.clinic_share`` of the weight (`rag.voice.selection.fit_listwise`)."""
        gs = [g for g in train + clinic_part if not g["near_miss"] and g["y"][g["keep"]].any()]
        ours = {id(g) for g in clinic_part}
        n_c = sum(id(g) in ours for g in gs)
        share = float(s["clinic_share"]) if n_c else 0.0
        w = [share * (len(gs) - n_c) / n_c if id(g) in ours else 1.0 - share for g in gs]
        m = selection.fit_listwise([(g["x"][g["keep"]], g["y"][g["keep"]]) for g in gs], w, float(s["listwise_l2"]))
        return m, sum(int(g["keep"].sum()) for g in gs), sum(int(g["y"][g["keep"]].sum()) for g in gs)

    scorers, out_of_fold = {}, {}
    for design in ("linear", "mlp", "listwise"):  # the cross design is stage train_cross's
        fit = fitted_listwise if design == "listwise" else (lambda part, d=design: fitted(d, part))
        m, n, pos = fit(clinic)
        held = {k: fit([g for g in clinic if fold[g["near"]] != k])[0] for k in (0, 1)}
        best = [held[fold[g["near"]]].probabilities(g["x"]) for g in clinic]  # out-of-fold: never its own fit
        if design != "listwise":  # listwise ranks only: min_score 0, the gate and answer.min_sentence_cosine refuse
            m.min_score = round(selection.choose_min_score(
                [b.max() for b in best], [bool(g["y"][int(np.argmax(b))]) for g, b in zip(clinic, best)],
                [not g["near_miss"] for g in clinic]), 6)
        m.meta = {"trained_on": "HeySQuAD dev-common, even articles, typed + human + machine"
                                + (", with near misses" if design != "listwise" else " (questions with a right candidate)")
                                + f"; the clinic's labelled questions ({s['clinic_share']} of the weight)",
                  "min_score_chosen_on": ("none: it ranks only" if design == "listwise" else
                                          "the clinic's questions and near misses, out-of-fold (two halves by document)"),
                  "candidates": n, "positives": pos}
        m.e5_model, m.e5_sha256 = s["e5_model"], e5_sha256
        if not variant:
            m.save(ROOT / s["model_dir"] / f"selection-{design}.json")
        scorers[design], out_of_fold[design] = m, report(clinic, m, best)
    out = {"split": "train = even articles (fit), report = odd articles; min_score chosen on the clinic",
           "e5_model": s["e5_model"],
           "min_score": {d: m.min_score for d, m in scorers.items()}, "results": {},
           "clinic_out_of_fold": {"rules_tables_off": report(clinic, None), **out_of_fold}}
    for (source, kind), gs in groups.items():
        if kind == "near_miss":
            continue
        for part in ("train", "report"):
            both = [g for g in gs + groups[(source, "near_miss")] if split[g["id"]] == part]
            out["results"].setdefault(source, {})[part] = {
                d: report(both, scorers.get(d)) for d in ("rules", *scorers)}
    out["runtime_s"] = round(time.perf_counter() - t0, 1)
    if variant:
        out["variant"] = {"section": variant, "embed.model": p["embed"]["model"],
                          "retrieval": {k: p["retrieval"][k] for k in p[variant]["retrieval"]}}
    write_json(ROOT / p["heysquad"]["metrics_dir"] / (p[variant]["metrics_file"] if variant else "selection.json"), out)
    for source, parts in out["results"].items():
        print(source, {d: r["hit"] for d, r in parts["report"].items()})
    print("clinic, out of fold:", out["clinic_out_of_fold"])


main(run, options=lambda ap: ap.add_argument(
    "--variant", default=None, metavar="SECTION",
    help="measure only, nothing written to models/ or select.pairs: a params section giving embed_model, retrieval "
         "keys over params' and metrics_file (in heysquad.metrics_dir)"))
