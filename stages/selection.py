"""Stage selection: what each answer-selection design (`select.design` values, `rag.voice.selection`) says, per set.

Sets (`selection_sets.selection_answers`): the clinic fixture (its tables on: the KB they were written for), the
second and third choose KBs (Harbor Dental, Riverside Hair Studio; tables off), the held-out vet KB clean and noisy
(tables off: `verify.slots` and `verify.answer_types` are the clinic's), and the near-miss sets (`select.near_miss`, typed and recogniser forms:
every question must be refused). The gate is the clinic's (the shipped models/gate.json), applied unchanged. LLM
off: the extractive pick speaks. LLM on (``*_llm_on``): the LLM's replies of the answer stage (clinic) and of stage
selection_llm (every other set), judged by the design itself, or under ``rules`` by ``select.judge``;
``rules_llm_on_by_judge`` has the rules pick under each judge. For the learned designs, every ``min_score`` of
``select.min_score_grid`` too (selection.md): the whole trade-off between refusing near misses and answering; and
(``min_score_on_choose_kbs``) the grid value each thresholded design takes on the two choose KBs
(`selection_sets.min_score_on_choose_sets`), with the vet sets at it. HeySQuAD rows (report half) come from the
fit_selection stage (the cross design's from train_cross, in models/selection-cross.json). Writes
metrics/voice/selection.json (headline) and selection.md.
"""
import json
import time

from common import GATE_PATH, ROOT, VOICE_DATA, VOICE_METRICS, answer_judge, answer_scorer, main, params
from selection_sets import CHOOSE_SETS, REPORT_SETS, choose_utility, min_score_on_choose_sets, selection_answers
from rag.voice import selection
from rag.bench.compare import markdown_table
from rag.io import read_jsonl, write_json, write_text
from rag.voice.gate import Gate
from rag.voice.pipeline import step_final
from rag.retrieval.sentences import SentenceIndex

KEYS = ("factual_accuracy", "grounded_wrong_said", "answerable_refused", "refusal_recall", "unsupported_said")
def llm_answers(sets: dict) -> dict:
    """``{set: answer rows}`` with the LLM on: the clinic's from the answer stage (answers.jsonl), the others from
    stage selection_llm (selection_llm.jsonl, each row tagged with its ``set``)."""
    out = {name: [] for name in sets}
    for r in read_jsonl(VOICE_DATA / "selection_llm.jsonl", required=("set", "id", "query", "gated", "error")):
        out[r.pop("set")].append(r)
    out["clinic"] = read_jsonl(VOICE_DATA / "answers.jsonl", required=("id", "query", "gated", "error"))
    return out


def run():
    t0 = time.perf_counter()
    p = params()
    s = p["select"]
    tau = Gate.load(GATE_PATH).tau
    kbs, runs, answers = selection_answers(p, None)
    docs = {n: d for n, (_, d) in kbs.items()}
    sentences = {n: SentenceIndex.build(d) for n, d in docs.items()}
    llm = llm_answers(runs)

    def said(rows, name, scorer, judge=None):
        """What is said on set ``name`` for ``rows``: its KEYS (near misses: refused share and how many said)."""
        kb, q_p, qs = runs[name]
        m = step_final(rows, qs, docs[kb], q_p, tau, sentences[kb], scorer, judge)[1]
        return ({"refused": m["refusal_recall"], "said": len(qs) - m["n_refused"], "n_llm": m["n_llm"]}
                if name.startswith("near_miss") else {k: m[k] for k in KEYS} | {"n_llm": m["n_llm"]})

    answer_judge(p)  # a bad select.judge is one error naming the key
    judges = {d: answer_scorer(p, d) for d in selection.DESIGNS}
    # the rules pick with the LLM on, each design as select.judge (rules: the verifier alone)
    by_judge = {j: {name: said(llm[name], name, None, judges[j]) for name in runs} for j in selection.DESIGNS}
    out, sweep = {"rules_llm_on_by_judge": by_judge, "min_score_on_choose_kbs": {}}, {}
    for design in selection.DESIGNS:
        scorer = judges[design]
        res = {name: said(answers[name], name, scorer) for name in runs}
        # LLM on: a learned design judges the LLM answers itself; rules leaves it to select.judge
        res |= {f"{name}_llm_on": (by_judge[s["judge"]][name] if scorer is None else said(llm[name], name, scorer))
                for name in runs}
        out[design] = res
        if scorer is not None:  # the whole trade-off: every min_score of the grid on every set
            shipped, sweep[design] = scorer.min_score, {}
            for t in s["min_score_grid"]:
                scorer.min_score = float(t)
                sweep[design][f"{t:.2f}"] = {name: said(answers[name], name, scorer) for name in runs}
            scorer.min_score = shipped
            if design not in selection.THRESHOLDED:
                continue
            best, u = min_score_on_choose_sets(sweep[design], runs)
            out["min_score_on_choose_kbs"][design] = {
                "shipped": shipped, "shipped_utility": choose_utility(res, runs), "chosen": float(best),
                "utility": u[best], "utility_by_min_score": u,
                "report_shipped": {n: res[n] for n in REPORT_SETS},
                "report_chosen": {n: sweep[design][best][n] for n in REPORT_SETS}}
    hs = json.loads((ROOT / p["heysquad"]["metrics_dir"] / "selection.json").read_text())
    cross = json.loads((ROOT / s["model_dir"] / "selection-cross.json").read_text())["heysquad_report_half"]
    for design in selection.DESIGNS:
        out[design]["heysquad_report_half"] = {f: (cross[f] if design == "cross" else r["report"][design])["hit"]
                                               for f, r in hs["results"].items()}
    out["chosen"], out["judge"] = s["design"], s["judge"]
    write_json(VOICE_METRICS / "selection.json", out)
    sweep_rows = [[d, t, *(f"{r[n]['factual_accuracy']:.3f} / {r[n]['grounded_wrong_said']} / {r[n]['answerable_refused']}"
                           for n in ("clinic", "dental", "salon", "vet_clean", "vet_noisy")),
                   *(f"{r[n]['refused']:.3f}" for n in runs if n.startswith("near_miss"))]
                  for d, by_t in sweep.items() for t, r in by_t.items()]
    cols = ("factual_accuracy", "grounded_wrong_said", "answerable_refused", "refused", "n_llm")
    rows = [[d, n, *(r.get(k, "") for k in cols)]
            for d in selection.DESIGNS for n, r in out[d].items() if n != "heysquad_report_half"]
    judge_rows = [[j, n, *(r.get(k, "") for k in cols)] for j, by_set in out["rules_llm_on_by_judge"].items()
                  for n, r in by_set.items()]
    write_text(VOICE_METRICS / "selection.md",
               "Answer selection per design (LLM off unless named; vet and HeySQuAD never tuned on; tables off on "
               "the dental, salon and vet KBs)\n\n" + markdown_table(["design", "set", "factual accuracy", "grounded wrong said",
                                                   "answerable refused", "near miss refused", "LLM answers said"],
                                                  rows)
               + f"\nThe rules pick with the LLM on, each design as `select.judge` (rules: the verifier alone; shipped: "
                 f"{s['judge']}):\n\n"
               + markdown_table(["judge", "set", "factual accuracy", "grounded wrong said", "answerable refused",
                                 "near miss refused", "LLM answers said"], judge_rows)
               + "\nHeySQuAD pick hit rate, report half (odd articles), retrieved passages:\n\n"
               + markdown_table(["design", *hs["results"]],
                                [[d, *out[d]["heysquad_report_half"].values()] for d in selection.DESIGNS])
               + "\nEvery min_score of `select.min_score_grid` (accuracy / grounded wrong said / answerable refused; "
                 "near misses refused):\n\n"
               + markdown_table(["design", "min_score", "clinic", "dental", "salon", "vet clean", "vet noisy",
                                 *(n.removeprefix("near_miss_") for n in runs if n.startswith("near_miss"))], sweep_rows)
               + "\nEach learned design's min_score chosen from the grid on the two choose KBs' recogniser sets "
                 f"({', '.join(CHOOSE_SETS)}; utility: right said - grounded wrong said - near misses said; ties: the "
                 "lower value), and the vet sets at it (report only):\n\n"
               + markdown_table(["design", "min_score", "choose utility", "vet clean", "vet noisy",
                                 "vet near misses refused typed / clean / noisy"],
                                [[d, f"{c[v]:.3f} ({v})", c[u],
                                  *(f"{c[k][n]['factual_accuracy']:.3f} / {c[k][n]['grounded_wrong_said']} / "
                                    f"{c[k][n]['answerable_refused']}" for n in REPORT_SETS[:2]),
                                  " / ".join(f"{c[k][n]['refused']:.3f}" for n in REPORT_SETS[2:])]
                                 for d, c in out["min_score_on_choose_kbs"].items()
                                 for v, u, k in (("shipped", "shipped_utility", "report_shipped"),
                                                 ("chosen", "utility", "report_chosen"))]))
    print(open(VOICE_METRICS / "selection.md").read())
    print(f"selection: {time.perf_counter() - t0:.0f} s")


main(run)
