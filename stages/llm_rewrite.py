"""Stage llm_rewrite (issue 12, part 5; FROZEN: needs the heavy model, `make repro` does not rerun it): the LLM
rewrites what a turn searches for, against today's rules.

Variants of the searched query (LLM off for answering, so only the query differs):
- rules: the session's rule resolver (`rag.voice.followup`), as stage dialogues' ``session``;
- llm: the transcript and the session's earlier resolved questions -> `rag.llm.rewrite.llm_rewrite`;
- rules_then_llm: the same, with the rule-resolved query shown to the model too.
Any failure (server fault, timeout, bad JSON, empty, invented content word) falls back to the rule query.
Sets: the multi-turn dialogues (fixtures/dialogues/queries.jsonl, clinic and vet KBs, through
`rag.voice.pipeline.answer_turn`) and the single-question sets (clinic fixture; vet clean and noisy: the context a
follow-up names is resolved as today, `rag.voice.rewrite.rewrite`, and shown as the one earlier question).
Chosen on the clinic; the vet sets are held out. Each (KB, LLM variant) gets a cold server with the RAM prompt cache
off (``llm_rewrite.cache_ram_mib``); threads and the load average at its start are recorded.
Writes metrics/voice/llm_rewrite.json, llm_rewrite.md and llm_rewrite_turns.jsonl (every turn's rewrite).
"""
import os
import time
from collections import Counter

from dialogues import DIALOGUES, FIELDS, FOLLOW_UPS, chain_rows, open_kbs, session_rows, turn_metrics

from common import GATE_PATH, ROOT, VOICE_METRICS, main, params
from rag import config
from rag.bench.compare import markdown_table
from rag.bench.latency import summary
from rag.io import read_jsonl, write_json, write_jsonl, write_text
from rag.llm.rewrite import LLMResolver, RewriteSettings, llm_rewrite, topics, vocabulary
from rag.llm.server import LocalServer
from rag.voice.gate import Gate
from rag.voice.pipeline import follow_up_resolver
from rag.voice.rewrite import rewrite

VARIANTS = ("rules", "llm", "rules_then_llm")
SINGLE = {"clinic": ("clinic", "voice", "queries"), "vet_clean": ("vet", "abstain", "transfer_queries", "clean"),
          "vet_noisy": ("vet", "abstain", "transfer_queries", "noisy")}


def single_sets(p: dict) -> dict:
    """``{set: (kb name, questions)}``; each question gets ``kind`` single or follow_up (it names a context)."""
    out = {}
    for name, (kb, *keys) in SINGLE.items():
        path = p
        for k in keys:
            path = path[k]
        qs = read_jsonl(ROOT / path)
        out[name] = (kb, [{**q, "kind": "follow_up" if q.get("context") else "single"} for q in qs])
    return out


def single_texts(qs: list[dict], rules) -> tuple[dict, dict]:
    """Today's query of each question (context rewritten, then the follow-up rule) and its earlier question."""
    asr = {q["id"]: q["asr"] for q in qs}
    earlier = {q["id"]: rewrite(asr[q["context"]], None, rules) if q.get("context") else None for q in qs}
    return {q["id"]: rewrite(q["asr"], earlier[q["id"]], rules) for q in qs}, earlier


def by_kind(turns: list[dict], rows: list[dict], docs: dict) -> dict:
    """`turn_metrics` over all turns, the follow-ups and each kind."""
    kinds = sorted({t["kind"] for t in turns})
    out = {"all": turn_metrics(turns, rows, docs)}
    follow = [t for t in turns if t["kind"] in FOLLOW_UPS]
    if follow:
        out["follow_ups"] = turn_metrics(follow, rows, docs)
    for k in kinds:
        out[k] = turn_metrics([t for t in turns if t["kind"] == k], rows, docs)
    return out


def rewrite_stats(rewrites: list) -> dict:
    """Rewrites used, why the rule query was used instead, invented rewrites and call latency (ms)."""
    done = [r for r in rewrites if r is not None]
    return {"calls": sum(r.ms is not None for r in done), "llm_used": sum(r.source == "llm" for r in done),
            "invented": sum(r.reason == "invented" for r in done),
            "fallback_reasons": dict(sorted(Counter(r.reason for r in done if r.reason).items())),
            "latency_ms": summary([r.ms for r in done if r.ms is not None])}


def run():
    t0 = time.perf_counter()
    p = params()
    lr = p["llm_rewrite"]
    settings = RewriteSettings(max_len=int(lr["max_len"]), max_tokens=int(lr["max_tokens"]),
                               timeout_s=float(lr["timeout_s"]), temperature=float(p["llm"]["temperature"]),
                               seed=int(p["llm"]["seed"]), max_context=int(lr["max_context"]))
    gate = Gate.load(GATE_PATH)
    turns = read_jsonl(DIALOGUES, required=FIELDS)
    kbs = open_kbs(p)
    singles = single_sets(p)
    out = {"model": lr["model"], "threads": int(lr["threads"]), "cache_ram_mib": int(lr["cache_ram_mib"]),
           "servers": {}, "dialogues": {}, "single": {}, "rewrites": {}}
    per_turn = []
    for name, (kb, q_p) in kbs.items():
        ts = [t for t in turns if t["kb"] == name]
        rules = config.rewrite_rules(q_p, kb.index.passages)
        vocab, kb_topics = vocabulary(kb.docs, rules), topics(kb.docs)
        sets = {s: qs for s, (k, qs) in singles.items() if k == name}
        texts = {s: single_texts(qs, rules) for s, qs in sets.items()}
        rows = {"rules": session_rows(kb, q_p, gate, ts)}
        single_rows = {s: {"rules": chain_rows(kb, q_p, gate, qs, texts[s][0])} for s, qs in sets.items()}
        for mode in VARIANTS[1:]:
            load = os.getloadavg()
            start = time.perf_counter()
            with LocalServer(model=lr["model"], n_ctx=int(lr["n_ctx"]), threads=int(lr["threads"]),
                             cache_ram_mib=int(lr["cache_ram_mib"])) as server:
                out["servers"][f"{name}/{mode}"] = {"start_s": round(time.perf_counter() - start, 1),
                                                    "loadavg_1_5_15": [round(x, 2) for x in load]}
                resolver = LLMResolver(follow_up_resolver(kb, q_p), server.url, vocab, kb_topics, mode, settings)
                rows[mode] = session_rows(kb, q_p, gate, ts, resolver)
                out["rewrites"][f"dialogues_{name}/{mode}"] = rewrite_stats(resolver.rewrites)
                for t, r, rw in zip(ts, rows[mode], resolver.rewrites):
                    per_turn.append({"set": f"dialogues_{name}", "variant": mode, "id": t["id"], "kind": t["kind"],
                                     "heard": t["asr"], "query": r["query"], "source": rw.source if rw else None,
                                     "reason": rw.reason if rw else "no_antecedent",
                                     "llm_text": rw.llm_text if rw else None,
                                     "invented": list(rw.invented) if rw else [], "ms": rw.ms if rw else None})
                for s, qs in sets.items():
                    final, earlier = texts[s]
                    rws = {q["id"]: llm_rewrite(q["asr"], [earlier[q["id"]]] if earlier[q["id"]] else [],
                                                final[q["id"]], server.url, vocab, kb_topics, settings, rules,
                                                mode == "rules_then_llm") for q in qs}
                    single_rows[s][mode] = chain_rows(kb, q_p, gate, qs, {i: r.query for i, r in rws.items()})
                    out["rewrites"][f"{s}/{mode}"] = rewrite_stats(list(rws.values()))
                    per_turn += [{"set": s, "variant": mode, "id": q["id"], "kind": q["kind"], "heard": q["asr"],
                                  "query": rws[q["id"]].query, "source": rws[q["id"]].source,
                                  "reason": rws[q["id"]].reason, "llm_text": rws[q["id"]].llm_text,
                                  "invented": list(rws[q["id"]].invented), "ms": rws[q["id"]].ms} for q in qs]
            print(f"{name}/{mode}: {time.perf_counter() - start:.0f} s", flush=True)
        out["dialogues"][name] = {v: by_kind(ts, r, kb.docs) for v, r in rows.items()}
        for s, qs in sets.items():
            out["single"][s] = {v: by_kind(qs, r, kb.docs) for v, r in single_rows[s].items()}
    # choose on the clinic (dialogue turns, then the single set; ties keep rules), report the vet sets as held out
    def key(v):
        return (out["dialogues"]["clinic"][v]["all"]["factual_accuracy"],
                out["single"]["clinic"][v]["all"]["factual_accuracy"], v == "rules")
    chosen = max(VARIANTS, key=key)
    held = {s: {v: out[g][k][v]["all"]["factual_accuracy"] for v in VARIANTS}
            for g, k, s in (("dialogues", "vet", "dialogues_vet"), ("single", "vet_clean", "vet_clean"),
                            ("single", "vet_noisy", "vet_noisy"))}
    out["chosen_on_clinic"] = chosen
    out["held_out_factual_accuracy"] = held
    out["chosen_beats_rules_on_every_held_out_set"] = chosen != "rules" and all(
        h[chosen] > h["rules"] for h in held.values())
    out["runtime_s"] = round(time.perf_counter() - t0, 1)
    write_json(VOICE_METRICS / "llm_rewrite.json", out)
    write_jsonl(VOICE_METRICS / "llm_rewrite_turns.jsonl", per_turn)
    table = []
    for g, sets in (("dialogues", out["dialogues"]), ("single", out["single"])):
        for s, variants in sets.items():
            rname = f"dialogues_{s}" if g == "dialogues" else s
            for v, kinds in variants.items():
                st = out["rewrites"].get(f"{rname}/{v}")
                for kind, m in kinds.items():
                    table.append([rname, v, kind, m["n_turns"], f"{m['recall_at_1']:.3f}", f"{m['recall_at_3']:.3f}",
                                  f"{m['factual_accuracy']:.3f}", m["grounded_wrong_said"],
                                  *((st["llm_used"], st["invented"], f"{st['latency_ms']['p50']:.0f}",
                                     f"{st['latency_ms']['p95']:.0f}") if st and kind == "all" else ("",) * 4)])
    write_text(VOICE_METRICS / "llm_rewrite.md",
               f"LLM query rewriting vs rules ({lr['model']}, {lr['threads']} thread(s), prompt cache "
               f"{lr['cache_ram_mib']} MiB, a cold server per KB and LLM variant; LLM off for answering). Chosen on "
               f"the clinic: **{chosen}**; vet sets held out. Runtime {out['runtime_s']:.0f} s.\n\n"
               + markdown_table(["set", "variant", "turns", "n", "recall@1", "recall@3", "factual accuracy",
                                 "grounded wrong said", "LLM rewrite used", "invented", "rewrite p50 ms",
                                 "rewrite p95 ms"], table)
               + f"\nHeld-out factual accuracy (all turns): {held}\n\nServers: {out['servers']}\n\n"
               + "Fallback reasons: " + "; ".join(f"{k}: {v['fallback_reasons']}" for k, v in out["rewrites"].items())
               + "\n")
    print(open(VOICE_METRICS / "llm_rewrite.md").read())
    print(f"llm_rewrite: {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main(run)
