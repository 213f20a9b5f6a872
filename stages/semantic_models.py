"""Stage semantic_models (issue 19, part 3; FROZEN: needs the .[llm] extra, `make llm`): RAGAS faithfulness and
answer relevancy of the replies of each packaged model weaker than the judge (``semantic.generators``: the
Qwen2.5-Coder-0.5B), judged as stage semantic judges the shipped SmolLM2's (`semantic.judge_items`: Qwen2.5-Coder-1.5B,
cold server, temperature 0, schema-bound JSON). The 1.5B's own replies are not judged: no stronger model ships in a
package, and a judge grading itself says little.

Each generator answers ``semantic.generator_sets`` (names of stage selection's sets, `selection_sets.set_sources`)
through the chain as stage selection_llm runs it (shipped gate applied unchanged, ``answer.mode`` as in params, the
vet KB with the clinic's tables off), on its own cold server (prompt cache off) with no turn deadline
(`common.without_deadline`: the model's answers are judged, not how many arrive in 3 s).
Writes metrics/voice/semantic_models.json (per generator and set: `semantic.summary`, every judged answer) and
semantic_models.md (beside the SmolLM2 rows of metrics/voice/semantic.json for the same sets). ~15 s a judged
answer and ~5 s a reply on 2 cores.
"""
import copy
import json
import os
import time

from common import VOICE_METRICS, main, params, params_error, without_deadline
from selection_sets import selection_answers, set_sources
from semantic import judge_items, reply_items, summary
from rag.bench.compare import markdown_table
from rag.io import write_json, write_text
from rag.voice.pipeline import llm_url


def replies_of(p: dict, generator: str, sets: list[str]) -> list[dict]:
    """``generator``'s replies on ``sets``: answer rows tagged ``generator`` and ``set``."""
    pm = copy.deepcopy(without_deadline(p))
    pm["llm"].update(url="", local_model=generator, cache_ram_mib=0)
    skip = tuple(n for n in set_sources(pm) if n not in sets)
    with llm_url(pm, print) as url:
        if url is None:
            raise RuntimeError(f"semantic_models: the server for {generator} did not start (see above)")
        answers = selection_answers(pm, url, skip=skip)[2]
    return [{"generator": generator, "set": name, **r} for name in sets for r in answers[name]]


def run():
    t0 = time.perf_counter()
    p = params()
    s = p["semantic"]
    known = set(set_sources(p))
    unknown = [n for n in s["generator_sets"] if n not in known]
    if unknown:
        raise params_error(f"semantic.generator_sets: {unknown} are not sets of stage selection ({sorted(known)})")
    if s["judge"] in s["generators"]:
        raise params_error(f"semantic.generators: {s['judge']} is the judge; it would grade itself")
    load = os.getloadavg()
    replies = [r for g in s["generators"] for r in replies_of(p, g, list(s["generator_sets"]))]
    print(f"semantic_models: {len(replies)} replies ({time.perf_counter() - t0:.0f} s)", flush=True)
    items = []
    for g in s["generators"]:
        mine = [r for r in replies if r["generator"] == g]
        items += [{**item, "generator": g} for item in reply_items(p, mine)]
    judge_items(items, p, t0)
    runs = {g: {n: summary([r for r in items if r["generator"] == g and r["set"] == n]) for n in s["generator_sets"]}
            | {"all": summary([r for r in items if r["generator"] == g])} for g in s["generators"]}
    out = {"judge": s["judge"], "threads": int(s["threads"]), "loadavg_1_5_15": [round(x, 2) for x in load],
           "pass_faithfulness": s["pass_faithfulness"], "pass_relevancy": s["pass_relevancy"],
           "sets": list(s["generator_sets"]), "runs": runs, "answers": items,
           "runtime_s": round(time.perf_counter() - t0, 1)}
    write_report(out, json.loads((VOICE_METRICS / "semantic.json").read_text()))


def write_report(out: dict, shipped: dict) -> None:
    """metrics/voice/semantic_models.json (``out``) and .md: per generator and set, with the shipped generator's rows
    of stage semantic (``shipped``, semantic.json) for the same sets."""
    def ci(m, key):
        return "-" if m[key] is None else f"{m[key]:.2f} [{m[key + '_ci'][0]:.2f}, {m[key + '_ci'][1]:.2f}]"

    def row(g, n, m):
        return [g, n, m["replies"], m["refusals"] + m["errors"], m["judged"], m["judge_failed"], ci(m, "faithfulness"),
                ci(m, "relevancy"), m["rule_supported"], m["rule_right"], m["semantic_pass"], m["agree"]]

    write_json(VOICE_METRICS / "semantic_models.json", out)
    table = [row(shipped["generator"], n, shipped["sets"][n]) for n in out["sets"] if n in shipped["sets"]]
    table += [row(g, n, m) for g, sets in out["runs"].items() for n, m in sets.items()]
    disagree = [[x["generator"], x["set"], x["id"], x["question"][:60], x["answer"][:70], f"{x['faithfulness']:.2f}",
                 f"{x['relevancy']:.2f}", "right" if x["right"] else "wrong", "pass" if x["semantic_pass"] else "fail"]
                for x in out["answers"] if x["skipped"] is None and x.get("relevancy") is not None
                and x.get("faithfulness") is not None and x["semantic_pass"] != x["right"]]
    write_text(VOICE_METRICS / "semantic_models.md",
               f"RAGAS faithfulness and answer relevancy (rag.eval.semantic) of each packaged model weaker than the "
               f"judge ({out['judge']}, cold server, {out['threads']} threads, temperature 0, load average "
               f"{out['loadavg_1_5_15'][0]} at the start); the shipped generator's rows are stage semantic's (its own "
               f"run). Replies with no turn deadline. Semantic pass: faithfulness >= "
               f"{out['pass_faithfulness']} and relevancy >= {out['pass_relevancy']}; rule: supported (verbatim in the "
               f"cited document) and right (every fact said). Refusals and errors are counted apart, never judged. "
               f"[95 % bootstrap CI]. Runtime {out['runtime_s']:.0f} s.\n\n"
               + markdown_table(["generator", "set", "replies", "refused or error", "judged", "judge failed",
                                 "faithfulness", "answer relevancy", "rule supported", "rule right", "semantic pass",
                                 "semantic pass = rule right"], table)
               + "\nWhere the semantic check and the rule metric (right) disagree:\n\n"
               + markdown_table(["generator", "set", "id", "question", "answer", "faithfulness", "relevancy", "rule",
                                 "semantic"], disagree))
    print(open(VOICE_METRICS / "semantic_models.md").read())


if __name__ == "__main__":
    main(run)
