"""Stage selection: what each answer-selection design (`select.design` values, `rag.voice.selection`) says, per set.

Sets: the clinic fixture (its tables on: the KB they were written for), the held-out vet KB clean and noisy (tables
off: `verify.slots` and `verify.answer_types` are the clinic's), and the near-miss sets (`select.near_miss`, typed
and recogniser forms: every question must be refused). The gate is the clinic's (`abstain.signal` fitted on the
clinic fixture: the shipped models/gate.json), applied unchanged. LLM off: the extractive pick speaks; LLM on
(clinic only): the answer stage's LLM replies judged by each design. For the learned designs, every ``min_score`` of
``select.min_score_grid`` too (selection.md): the whole trade-off between refusing near misses and answering. HeySQuAD rows (report half) come from the
fit_selection stage (the cross design's from train_cross, in models/selection-cross.json). Writes metrics/voice/selection.json (headline) and selection.md.
"""
import json
import time

from common import GATE_PATH, ROOT, VOICE_DATA, VOICE_METRICS, answer_scorer, main, params, tables_off
from rag.voice import selection
from rag.retrieval.chunk import load_kb
from rag.voice.quarantine import allowed
from rag.bench.compare import markdown_table
from rag.eval.evaluate import embed_texts
from rag.io import read_jsonl, write_json, write_text
from rag.voice.gate import Gate
from rag.voice.pipeline import gate_function, step_answer, step_final
from rag.voice.queries import load_queries, rewrite_queries
from rag import config
from rag.retrieval.search import PassageIndex
from rag.retrieval.sentences import SentenceIndex

KEYS = ("factual_accuracy", "grounded_wrong_said", "answerable_refused", "refusal_recall", "unsupported_said")


def typed(queries):
    """The near-miss questions as typed (the text the recogniser heard)."""
    return [{**q, "asr": q["spoken"]} for q in queries]


def run():
    t0 = time.perf_counter()
    p = params()
    a, s = p["abstain"], p["select"]
    gate = Gate.load(GATE_PATH)
    tau = gate.tau
    hc = config.hybrid_config(p)
    clinic_q = load_queries(ROOT / p["voice"]["queries"])
    kbs = {"clinic": p["voice"]["kb"], "vet": a["transfer_kb"]}
    index = {n: PassageIndex.from_folder(ROOT / kb, hc, allowed(p)) for n, kb in kbs.items()}
    docs = {n: load_kb(ROOT / kb, allowed(p)) for n, kb in kbs.items()}
    sentences = {n: SentenceIndex.build(d) for n, d in docs.items()}
    gates = {n: gate_function(gate, index[n], p) for n in kbs}
    runs = {  # name: (kb, params, questions)
        "clinic": ("clinic", p, clinic_q),
        "vet_clean": ("vet", tables_off(p), load_queries(ROOT / a["transfer_queries"]["clean"])),
        "vet_noisy": ("vet", tables_off(p), load_queries(ROOT / a["transfer_queries"]["noisy"])),
        "near_miss_clinic_typed": ("clinic", p, typed(load_queries(ROOT / s["near_miss"]["clinic"]))),
        "near_miss_clinic_asr": ("clinic", p, load_queries(ROOT / s["near_miss"]["clinic"])),
        "near_miss_vet_typed": ("vet", tables_off(p), typed(load_queries(ROOT / s["near_miss"]["vet_clean"]))),
        "near_miss_vet_clean": ("vet", tables_off(p), load_queries(ROOT / s["near_miss"]["vet_clean"])),
        "near_miss_vet_noisy": ("vet", tables_off(p), load_queries(ROOT / s["near_miss"]["vet_noisy"])),
    }
    answers = {}
    for name, (kb, q_p, qs) in runs.items():
        ts = rewrite_queries(qs, config.rewrite_rules(q_p, index[kb].passages))
        vs = embed_texts(ts)
        scores = {qid: gates[kb](ts[qid], vs[qid]) for qid in ts}
        answers[name] = step_answer(index[kb], qs, docs[kb], q_p, tau, None, scores)
    llm_answers = read_jsonl(VOICE_DATA / "answers.jsonl", required=("id", "query", "gated", "error"))
    out, sweep = {}, {}
    for design in selection.DESIGNS:
        scorer = answer_scorer(p, design)
        res = {}
        for name, (kb, q_p, qs) in runs.items():
            m = step_final(answers[name], qs, docs[kb], q_p, tau, sentences[kb], scorer)[1]
            res[name] = ({"refused": m["refusal_recall"], "said": len(qs) - m["n_refused"]}
                         if name.startswith("near_miss") else {k: m[k] for k in KEYS})
        m = step_final(llm_answers, clinic_q, docs["clinic"], p, tau, sentences["clinic"], scorer)[1]
        res["clinic_llm_on"] = {k: m[k] for k in KEYS} | {"n_llm": m["n_llm"]}
        out[design] = res
        if scorer is not None:  # the whole trade-off: every min_score of the grid on every set
            shipped, sweep[design] = scorer.min_score, {}
            for t in s["min_score_grid"]:
                scorer.min_score = float(t)
                sweep[design][f"{t:.2f}"] = {name: step_final(answers[name], qs, docs[kb], q_p, tau, sentences[kb],
                                                              scorer)[1] for name, (kb, q_p, qs) in runs.items()}
            scorer.min_score = shipped
    hs = json.loads((ROOT / p["heysquad"]["metrics_dir"] / "selection.json").read_text())
    cross = json.loads((ROOT / s["model_dir"] / "selection-cross.json").read_text())["heysquad_report_half"]
    for design in selection.DESIGNS:
        out[design]["heysquad_report_half"] = {f: (cross[f] if design == "cross" else r["report"][design])["hit"]
                                               for f, r in hs["results"].items()}
    out["chosen"] = s["design"]
    write_json(VOICE_METRICS / "selection.json", out)
    sweep_rows = [[d, t, *(f"{r[n]['factual_accuracy']:.3f} / {r[n]['grounded_wrong_said']} / {r[n]['answerable_refused']}"
                           for n in ("clinic", "vet_clean", "vet_noisy")),
                   *(f"{r[n]['refusal_recall']:.3f}" for n in runs if n.startswith("near_miss"))]
                  for d, by_t in sweep.items() for t, r in by_t.items()]
    rows = [[d, n, *(r.get(k, "") for k in ("factual_accuracy", "grounded_wrong_said", "answerable_refused",
                                           "refused"))]
            for d in selection.DESIGNS for n, r in out[d].items() if n != "heysquad_report_half"]
    write_text(VOICE_METRICS / "selection.md",
               "Answer selection per design (LLM off unless named; vet and HeySQuAD never tuned on; tables off on "
               "the vet KB)\n\n" + markdown_table(["design", "set", "factual accuracy", "grounded wrong said",
                                                   "answerable refused", "near miss refused"], rows)
               + "\nHeySQuAD pick hit rate, report half (odd articles), retrieved passages:\n\n"
               + markdown_table(["design", *hs["results"]],
                                [[d, *out[d]["heysquad_report_half"].values()] for d in selection.DESIGNS])
               + "\nEvery min_score of `select.min_score_grid` (accuracy / grounded wrong said / answerable refused; "
                 "near misses refused):\n\n"
               + markdown_table(["design", "min_score", "clinic", "vet clean", "vet noisy",
                                 *(n.removeprefix("near_miss_") for n in runs if n.startswith("near_miss"))], sweep_rows))
    print(open(VOICE_METRICS / "selection.md").read())
    print(f"selection: {time.perf_counter() - t0:.0f} s")


main(run)
