"""Stage semantic (issue 19, part 3; FROZEN: needs the .[llm] extra, `make llm`): RAGAS faithfulness and answer
relevancy (`rag.eval.semantic`) of the answers the shipped generator wrote, judged by a stronger packaged model.

Also judged: what the caller hears with the LLM off (sets ``said_*``: the extractive pick, from
`rag.voice.pipeline.run_chain` on the clinic and vet sets), the answers the rule metrics of final.json / vet.json
score.

Generator: the shipped default (``llm.local_model``, SmolLM2-135M) as the chain ran it: its replies on the clinic
(data/voice/answers.jsonl, stage answer), the vet and near-miss sets (data/voice/selection_llm.jsonl, stage
selection_llm) and the Korean generation sample (data/ko/generation.jsonl, stage ko_generate; raw JSON answers).
Judge: ``semantic.judge`` (Qwen2.5-Coder-1.5B) on a cold local server, temperature 0, schema-bound JSON. Context:
the texts of the documents (Korean: passages) the generator was given. Korean rows keep ids and scores only
(KorQuAD's licence: no derived copies in git). Question: the words the caller said
(``spoken``; Korean: the KorQuAD question). Relevancy embeddings: all-MiniLM-L6-v2 for English, USE multilingual
(`rag.ko.dense`) for Korean. Replies that are refusals (source "none", the Korean abstention
sentence) or errors are counted apart, never judged, never NaN.

Rule metrics beside them, per judged answer: ``right`` (English: every fact of the question said, and the
question answerable; Korean: the gold span in the answer) and ``supported`` (English: the answer is verbatim in
the document it cites; Korean: not a hallucination by `rag.ko.answer.hallucinated`). A judged answer passes the
semantic check when faithfulness >= ``semantic.pass_faithfulness`` and relevancy >= ``semantic.pass_relevancy``
(fixed before the run). Writes metrics/voice/semantic.json and semantic.md: means with 95 % bootstrap intervals
per set, point-biserial correlations with the rule metrics, and every answer where the two disagree.
"""
import copy
import os
import time

from common import GATE_PATH, ROOT, VOICE_DATA, VOICE_METRICS, main, params
from selection_sets import kb_folders, set_sources
from rag.bench.compare import markdown_table
from rag.eval.intervals import bootstrap_interval
from rag.eval.scoring import has_facts
from rag.eval.semantic import answer_relevancy, faithfulness
from rag.io import read_jsonl, write_json, write_text
from rag.ko.answer import hallucinated, is_abstention, parse_raw, span_match
from rag.ko.dense import embed as ko_embed
from rag.llm.client import ask
from rag.llm.server import LocalServer, free_port
from rag.retrieval.chunk import load_kb
from rag.retrieval.embed import query_embedder
from rag.voice.gate import Gate
from rag.voice.pipeline import run_chain
from rag.voice.queries import load_queries
from rag.voice.quarantine import allowed


def english_item(name: str, q: dict, answer: str, skipped: str | None, docs: dict, retrieved: list[str],
                 source: str | None) -> dict:
    """One English answer to judge: the caller's words (``spoken``), the documents the chain retrieved as the
    context, and the rule metrics: ``right`` (answerable, every fact said), ``supported`` (verbatim in ``source``)."""
    return {"set": name, "id": q["id"], "question": q["spoken"], "answer": answer, "skipped": skipped,
            "context": "\n".join(f"[{d}] {docs[d]}" for d in retrieved),
            "right": bool(answer) and q["answerable"] and has_facts(answer, q["facts"]),
            "supported": bool(answer) and " ".join(answer.split()) in " ".join(docs.get(source or "", "").split())}


def english_items(p: dict) -> list[dict]:
    """Every English reply of the shipped generator (stages answer and selection_llm) as `reply_items`."""
    replies = [{"set": "clinic", **r} for r in read_jsonl(VOICE_DATA / "answers.jsonl")]
    return reply_items(p, replies + read_jsonl(VOICE_DATA / "selection_llm.jsonl"))


def reply_items(p: dict, replies: list[dict]) -> list[dict]:
    """LLM replies (answer rows of `rag.voice.answer.answer_row`, each with the ``set`` of `set_sources` it answers)
    as items to judge: ``{set, id, question, answer, context, right, supported}`` (answer "" for a refusal or an
    error: ``skipped`` says which)."""
    sources = set_sources(p)
    kbs = {n: load_kb(ROOT / folder, allowed(p)) for n, folder in kb_folders(p).items()}
    questions = {name: {q["id"]: q for q in load_queries(path)} for name, (_, _, path, _) in sources.items()}
    out = []
    for r in replies:
        q, docs = questions[r["set"]][r["id"]], kbs[sources[r["set"]][0]]
        answer = r["answer"] if r["error"] is None and r["source"] != "none" else ""
        skipped = None if answer else ("error" if r["error"] else "refusal")
        out.append(english_item(r["set"], q, answer, skipped, docs, r["retrieved"], r["source"]))
    return out


def said_items(p: dict) -> list[dict]:
    """What the caller hears with the LLM off (the extractive pick or the refusal, `rag.voice.pipeline.run_chain`,
    shipped gate and ``select`` as in params) on the clinic and vet sets, in the form of `english_items`; set
    ``said_<name>``."""
    gate = Gate.load(GATE_PATH)
    out = []
    for name, (kb_name, q_p, path, _) in set_sources(p).items():
        if name.startswith("near_miss"):
            continue
        q_p = copy.deepcopy(q_p)
        q_p["llm"]["url"] = f"http://127.0.0.1:{free_port()}"  # nothing listens: the chain with the LLM down
        folder = ROOT / kb_folders(p)[kb_name]
        docs = load_kb(folder, allowed(p))
        questions = {q["id"]: q for q in load_queries(path)}
        for r in run_chain(folder, path, q_p, gate)["answers"]:
            answer = r["say"] if r["status"] != "refused" else ""
            out.append(english_item(f"said_{name}", questions[r["id"]], answer, None if answer else "refusal", docs,
                                    [d for d, _ in r["retrieved"]], r["source"]))
    return out


def korean_items(p: dict) -> list[dict]:
    """The Korean sample's replies (raw, before the verifier) in the same form; set ``ko_<prompt>_k<k>_<condition>``."""
    ko = p["ko"]
    passages = {x["_id"]: x["text"] for x in read_jsonl(ROOT / ko["data_dir"] / "passages.jsonl")}
    out = []
    for r in read_jsonl(ROOT / ko["data_dir"] / "generation.jsonl"):
        texts = [passages[i] for i in r["retrieved"]]
        answer, citations = parse_raw(r["raw"]) if r["error"] is None else (None, None)
        ok = answer is not None and not is_abstention(answer)
        out.append({"set": f"ko_{r['prompt']}_k{r['k']}_{r['condition']}", "id": r["id"], "question": r["question"],
                    "answer": answer if ok else "", "skipped": None if ok else ("error" if answer is None else "refusal"),
                    "context": "\n".join(f"[{i + 1}] {t}" for i, t in enumerate(texts)),
                    "right": ok and span_match(answer, r["golds"]),
                    "supported": ok and not hallucinated(answer, citations, texts, r["gold_excluded"])})
    return out


def correlation(xs: list[float], ys: list[bool]) -> float | None:
    """Pearson r of a score with a 0/1 rule metric (the point-biserial correlation); None (never NaN) when fewer
    than 3 pairs or either side is constant."""
    from scipy.stats import pearsonr

    if len(xs) < 3 or len(set(xs)) < 2 or len(set(ys)) < 2:
        return None
    return round(float(pearsonr(xs, [float(y) for y in ys]).statistic), 4)


def summary(rows: list[dict]) -> dict:
    """Counts, mean scores with 95 % bootstrap intervals, and the agreement with the rule metrics of one set's rows."""
    judged = [r for r in rows if r["skipped"] is None and r["faithfulness"] is not None and r["relevancy"] is not None]
    f, a = [r["faithfulness"] for r in judged], [r["relevancy"] for r in judged]
    return {"replies": len(rows), "refusals": sum(r["skipped"] == "refusal" for r in rows),
            "errors": sum(r["skipped"] == "error" for r in rows),
            "judge_failed": sum(r["skipped"] is None for r in rows) - len(judged), "judged": len(judged),
            "faithfulness": round(sum(f) / len(f), 4) if f else None, "faithfulness_ci": bootstrap_interval(f),
            "relevancy": round(sum(a) / len(a), 4) if a else None, "relevancy_ci": bootstrap_interval(a),
            "rule_right": sum(r["right"] for r in judged), "rule_supported": sum(r["supported"] for r in judged),
            "semantic_pass": sum(r["semantic_pass"] for r in judged),
            "r_faithfulness_supported": correlation(f, [r["supported"] for r in judged]),
            "r_relevancy_right": correlation(a, [r["right"] for r in judged]),
            "agree": sum(r["semantic_pass"] == r["right"] for r in judged)}


def judge_items(items: list[dict], p: dict, t0: float) -> None:
    """Judge every item not ``skipped`` in place (``faithfulness``, ``statements``, ``verdicts``, ``relevancy``,
    ``questions``, ``judge_error``) with ``semantic.judge`` on a cold local server (prompt cache off), then set each
    item's ``semantic_pass`` and drop its ``context`` (Korean rows: ids and scores only). Prints one line an item."""
    s = p["semantic"]
    embed = {"en": query_embedder().embed, "ko": ko_embed}  # MiniLM is English-only: USE multilingual for Korean
    with LocalServer(model=s["judge"], threads=int(s["threads"]), n_ctx=int(s["n_ctx"]), cache_ram_mib=0).start() as server:
        def judge(messages, schema):
            return ask(server.url, messages, schema, max_tokens=int(s["max_tokens"]), timeout_s=float(s["timeout_s"]),
                       temperature=0.0, seed=int(p["llm"]["seed"]))

        todo = [r for r in items if r["skipped"] is None]
        for i, r in enumerate(todo):
            fa = faithfulness(judge, r["question"], r["answer"], r["context"], int(s["max_statements"]))
            ar = answer_relevancy(judge, embed["ko" if r["set"].startswith("ko_") else "en"], r["question"],
                                  r["answer"], int(s["n_questions"]))
            r.update(faithfulness=fa.score, statements=fa.parts, verdicts=fa.verdicts, relevancy=ar.score,
                     questions=ar.parts, judge_error=fa.error or ar.error)
            print(f"[{i + 1}/{len(todo)}] {r['set']} {r['id']} faithfulness {fa.score} relevancy {ar.score} "
                  f"{fa.error or ar.error or ''} ({time.perf_counter() - t0:.0f} s)", flush=True)
    for r in items:
        judged = r["skipped"] is None and r.get("faithfulness") is not None and r.get("relevancy") is not None
        r["semantic_pass"] = judged and (r["faithfulness"] >= float(s["pass_faithfulness"])
                                         and r["relevancy"] >= float(s["pass_relevancy"]))
        r.pop("context")
        if r["set"].startswith("ko_"):  # KorQuAD's licence allows no derived copies in git: ids and scores only
            for k in ("question", "answer", "statements", "questions"):
                r.pop(k, None)


def run():
    t0 = time.perf_counter()
    p = params()
    s = p["semantic"]
    items = english_items(p) + said_items(p) + korean_items(p)
    load = os.getloadavg()
    judge_items(items, p, t0)
    sets = list(dict.fromkeys(r["set"] for r in items))
    english = [r for r in items if not r["set"].startswith(("ko_", "said_"))]
    said = [r for r in items if r["set"].startswith("said_")]
    korean = [r for r in items if r["set"].startswith("ko_")]
    out = {"judge": s["judge"], "generator": p["llm"]["local_model"], "threads": int(s["threads"]),
           "loadavg_1_5_15": [round(x, 2) for x in load], "pass_faithfulness": s["pass_faithfulness"],
           "pass_relevancy": s["pass_relevancy"],
           "sets": {n: summary([r for r in items if r["set"] == n]) for n in sets},
           "all_english": summary(english), "all_said": summary(said), "all_korean": summary(korean),
           "answers": items, "runtime_s": round(time.perf_counter() - t0, 1)}
    write_report(out)


def write_report(out: dict) -> None:
    """metrics/voice/semantic.json (``out``) and semantic.md: the per-set table and the disagreements."""
    def ci(m, key):
        return "-" if m[key] is None else f"{m[key]:.2f} [{m[key + '_ci'][0]:.2f}, {m[key + '_ci'][1]:.2f}]"

    def r(x):
        return "-" if x is None else f"{x:.2f}"

    items = out["answers"]
    write_json(VOICE_METRICS / "semantic.json", out)
    table = [[n, m["replies"], m["refusals"] + m["errors"], m["judged"], m["judge_failed"],
              ci(m, "faithfulness"), ci(m, "relevancy"), m["rule_supported"], m["rule_right"], m["semantic_pass"],
              m["agree"], r(m["r_faithfulness_supported"]), r(m["r_relevancy_right"])]
             for n, m in [*out["sets"].items(), ("all English LLM replies", out["all_english"]),
                          ("all said, LLM off", out["all_said"]), ("all Korean", out["all_korean"])]]
    disagree = [[x["set"], x["id"], x.get("question", "(KorQuAD)")[:60], x.get("answer", "(KorQuAD)")[:70],
                 f"{x['faithfulness']:.2f}", f"{x['relevancy']:.2f}",
                 "right" if x["right"] else "wrong", "pass" if x["semantic_pass"] else "fail"]
                for x in items if x["skipped"] is None and x.get("relevancy") is not None
                and x.get("faithfulness") is not None and x["semantic_pass"] != x["right"]]
    write_text(VOICE_METRICS / "semantic.md",
               f"RAGAS faithfulness and answer relevancy (rag.eval.semantic) of the shipped generator's replies "
               f"({out['generator']}), judged by {out['judge']} on a cold local server ({out['threads']} threads, "
               f"temperature 0, load average {out['loadavg_1_5_15'][0]} at the start). Semantic pass: faithfulness >= "
               f"{out['pass_faithfulness']} and relevancy >= {out['pass_relevancy']}; rule: supported (verbatim in "
               f"the cited document; Korean: not hallucinated) and right (every fact / the gold span). r: "
               f"point-biserial correlation over the judged answers (- when too few or constant). Refusals and "
               f"errors are counted apart, never judged. [95 % bootstrap CI]. Runtime {out['runtime_s']:.0f} s.\n\n"
               + markdown_table(["set", "replies", "refused or error", "judged", "judge failed",
                                 "faithfulness", "answer relevancy", "rule supported", "rule right",
                                 "semantic pass", "semantic pass = rule right", "r(faithfulness, supported)",
                                 "r(relevancy, right)"], table)
               + "\nWhere the semantic check and the rule metric (right) disagree:\n\n"
               + markdown_table(["set", "id", "question", "answer", "faithfulness", "relevancy", "rule", "semantic"],
                                disagree))
    print(open(VOICE_METRICS / "semantic.md").read())


if __name__ == "__main__":
    main(run)
