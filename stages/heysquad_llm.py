"""Stage heysquad_llm (issue 12, part 3; FROZEN: needs the .[llm] extra, `make repro` does not rerun it): a sample of
HeySQuAD's report half (odd articles, never used to choose anything) through each local model
(``heysquad_llm.models``, rag.llm.registry names) in each answer mode, beside the same questions with the LLM off.

Per question: the recogniser transcript (``heysquad_llm.forms``) rewritten as in the voice track, the top
``retrieval.k`` passages, one schema-bound LLM call (`rag.voice.answer.answer_row`; no gate: HeySQuAD has none
fitted and every question is answerable), then what the chain says (`rag.voice.answer.decide`: verifier,
``select.judge``, the rules pick as fallback). LLM off is the same row with the model unreachable. A said answer is
right when it holds one of SQuAD's gold answer spans (case-insensitive). A cold server per model and mode, prompt
cache off, the load average (1, 5, 15 min) recorded at each start.
Writes metrics/heysquad/llm.json and llm.md.
"""
import dataclasses
import itertools
import os
import random
import time
from collections import Counter

import numpy as np

from common import ROOT, heysquad_index, main, params, without_deadline
from rag import config
from rag.bench.compare import markdown_table
from rag.bench.heysquad import article_split, as_transcripts
from rag.bench.latency import summary
from rag.eval.evaluate import embed_texts
from rag.io import write_json, write_text
from rag.llm.server import LocalServer
from rag.retrieval.sentences import SentenceIndex
from rag.voice.answer import answer_row, decide
from rag.voice.pipeline import load_judge
from rag.voice.queries import rewrite_queries


def holds_answer(said: dict, answers: list[str]) -> bool:
    """Whether what is said (a `decide` row) is no refusal and holds one of the gold answer spans."""
    return said["status"] != "refused" and any(a.lower() in said["say"].lower() for a in answers)


def run():
    t0 = time.perf_counter()
    p = params()
    h = p["heysquad_llm"]
    passages, queries, index = heysquad_index(p, "answers")
    kb = {r["_id"]: r["text"] for r in passages}
    split = article_split(passages, queries)
    report = sorted(q["id"] for q in queries if split[q["id"]] == "report")
    sample = set(random.Random(int(h["seed"])).sample(report, int(h["n"])))
    qs = [q for q in queries if q["id"] in sample]
    rules, judge = config.verify_rules(p), load_judge(p)
    sentences = SentenceIndex.build(kb)
    rewrite = config.rewrite_rules(p, index.passages)
    out = {"models": list(h["models"]), "n": len(qs), "seed": int(h["seed"]), "threads": int(h["threads"]),
           "select_judge": p["select"]["judge"], "results": {}}
    rows = []
    for form in h["forms"]:
        texts = rewrite_queries(as_transcripts(qs, form), rewrite)
        vectors = embed_texts(texts)
        for model, mode in itertools.product(h["models"], h["modes"]):
            settings = dataclasses.replace(config.answer_settings(without_deadline(p), 0.0), answer_mode=mode)
            load = os.getloadavg()
            with LocalServer(n_ctx=int(p["llm"]["n_ctx"]), threads=int(h["threads"]), model=model,
                             cache_ram_mib=0) as server:
                start = time.perf_counter()
                llm_rows = [answer_row(q["id"], texts[q["id"]], index, vectors[q["id"]], 1.0, settings, kb, server.url)
                            for q in qs if q["id"] in texts]
                wall = time.perf_counter() - start
            on, off = [], []
            for r in llm_rows:
                v = vectors[r["id"]]
                on.append(decide(r, kb, v, settings, rules, sentences, judge=judge))
                off.append(decide({**r, "error": "unreachable"}, kb, v, settings, rules, sentences, judge=judge))
            gold = {q["id"]: q["answers"] for q in qs}
            kept = [s for s in on if s["status"] == "llm"]
            res = {"questions": len(on),
                   "llm_off_right": round(float(np.mean([holds_answer(s, gold[s["id"]]) for s in off])), 6),
                   "llm_on_right": round(float(np.mean([holds_answer(s, gold[s["id"]]) for s in on])), 6),
                   "llm_raw_right": round(float(np.mean([bool(r["answer"]) and any(
                       a.lower() in r["answer"].lower() for a in gold[r["id"]]) for r in llm_rows])), 6),
                   "kept": len(kept), "kept_right": sum(holds_answer(s, gold[s["id"]]) for s in kept),
                   "reasons": dict(sorted(Counter(s["reason"].split(";")[0] for s in on).items())),
                   "llm_errors": sum(bool(r["error"]) for r in llm_rows),
                   "refused_on": sum(s["status"] == "refused" for s in on),
                   "said_wrong_on": sum(s["status"] != "refused" and not holds_answer(s, gold[s["id"]]) for s in on),
                   "first_token_ms": summary([r["first_token_ms"] for r in llm_rows if r["first_token_ms"] is not None]),
                   "total_ms": summary([r["total_ms"] for r in llm_rows if r["total_ms"] is not None]),
                   "wall_s": round(wall, 1), "loadavg_1_5_15": [round(x, 2) for x in load]}
            out["results"][f"{model}/{form}/{mode}"] = res
            rows.append([model, form, mode, res["questions"], res["llm_off_right"], res["llm_on_right"], res["llm_raw_right"],
                         f"{res['kept']} / {res['kept_right']}", res["said_wrong_on"], res["llm_errors"],
                         "{:.0f} / {:.0f} ({:.0f} / {:.0f})".format(res["first_token_ms"]["p50"], res["total_ms"]["p50"],
                                                                 res["first_token_ms"]["p95"], res["total_ms"]["p95"])])
            print(model, form, mode, res, flush=True)
    out["runtime_s"] = round(time.perf_counter() - t0, 1)
    metrics = ROOT / p["heysquad"]["metrics_dir"]
    write_json(metrics / "llm.json", out)
    write_text(metrics / "llm.md",
               f"HeySQuAD report half (odd articles), {len(qs)} questions sampled (seed {h['seed']}), through "
               f"{', '.join(h['models'])} ({h['threads']} threads, prompt cache off, a cold server per model and mode; select.judge "
               f"{p['select']['judge']}) and with the LLM off. Right = what is said holds a gold answer span "
               f"(refusals count as misses); LLM reply right: the model's own answer holds one, whether or not the "
               f"verifier and the judge let it through. Runtime {out['runtime_s']:.0f} s.\n\n"
               + markdown_table(["model", "form", "mode", "questions", "right, LLM off", "right, LLM on",
                                 "LLM reply right (unchecked)", "LLM answers kept / right", "said wrong, LLM on",
                                 "LLM errors", "first token / total p50 (p95) ms"], rows))
    print(open(metrics / "llm.md").read())


if __name__ == "__main__":
    main(run)
