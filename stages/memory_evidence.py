"""Stage memory_evidence (issue 19 part 1; FROZEN: the Qwen model needs the .[llm] extra, `make llm`): the earlier
turns of a call given to the LLM as evidence ([memory n], `rag.memory.recall`), compared with the LLM on.

The multi-turn dialogues of stage dialogues (clinic: tables on, and dental and salon: tables off, the choose sets the
recall threshold is picked on; vet: tables off, the report set) run turn by turn through
`rag.voice.pipeline.answer_turn` (a session in an in-memory SQLite store: follow-ups resolved as shipped, so every
variant searches the same query). The LLM answers every turn after a dialogue's first (the first has no memory: it is
the same call in every variant, so it is answered LLM off); only what its prompt holds of the call changes, one variant of ``memory.evidence_eval.variants`` each
(``[min_cosine, max_items]``, `rag.memory.recall.EvidencePolicy`; ``selective`` is the shipped ``memory.evidence``).
Each variant on its own cold local server (``memory.evidence_eval.model``, prompt cache off, temperature 0, no turn
deadline: a slow call is measured, not cut). What is said passes the verifier and the judge as shipped.

Per KB and variant, over the LLM's turns: factual accuracy, grounded wrong said, answerable refused, LLM answers
kept (and right), memory tokens (WordPiece tokens of the [memory n] lines of the LLM calls, MiniLM's tokenizer, as stage
dialogues counts search tokens), the whole prompt's tokens where the server reports them (its ``cache_n + prompt_n``; a
declined reply is closed before the server's timings), and first-token / total ms. Writes
metrics/voice/memory_evidence.json, .md and memory_evidence_turns.jsonl (every turn of every variant), committed.
"""
import copy
import time

import numpy as np

from common import GATE_PATH, VOICE_METRICS, main, params, without_deadline
from dialogues import DIALOGUES, FIELDS, open_kbs, turn_metrics
from rag import config
from rag.bench.compare import markdown_table
from rag.eval.scoring import has_facts
from rag.io import read_jsonl, write_json, write_jsonl, write_text
from rag.llm.server import LocalServer
from rag.memory import Memory, open_store
from rag.retrieval.chunk import token_count
from rag.voice.gate import Gate
from rag.voice.pipeline import answer_turn, follow_up_resolver, recalled_memory


def variant_params(q_p: dict, name: str, policy) -> dict:
    """``q_p`` with ``memory.evidence``'s min_cosine and max_items set to ``policy`` ([min_cosine, max_items]) and no
    turn deadline. ValueError naming the variant, or the key as `rag.config.evidence_policy` does."""
    if not isinstance(policy, list) or len(policy) != 2:
        raise ValueError(f"memory.evidence_eval.variants.{name} must be [min_cosine, max_items], got {policy!r}")
    out = copy.deepcopy(without_deadline(q_p))
    out["memory"]["evidence"] = {**q_p["memory"]["evidence"], "min_cosine": policy[0], "max_items": policy[1]}
    config.evidence_policy(out)
    return out


def run_variant(kb, q_p: dict, gate: Gate, turns: list[dict], url: str) -> list[dict]:
    """Every turn of ``turns`` through `answer_turn`, one session per dialogue; the LLM at ``url`` from each
    dialogue's second turn. One row per turn: what was said, the LLM's reply and the memory it saw."""
    memory = Memory(open_store("sqlite://", float(q_p["memory"]["ttl_min"]) * 60))
    resolver, policy = follow_up_resolver(kb, q_p), config.evidence_policy(q_p)
    rows = []
    for t in turns:
        topics = [h for h in memory.history(t["dialogue"], int(q_p["memory"]["max_turns"])) if h.query]
        res = resolver.resolve(t["asr"], [h.query for h in topics])
        lines = recalled_memory(res.query, topics, policy) if t["turn"] > 1 and res.query else []
        final, row, res = answer_turn(t["asr"], t["dialogue"], memory, q_p, gate, url if t["turn"] > 1 else None,
                                      kb, resolver)
        timings = (row or {}).get("timings") or {}
        rows.append({**final, "id": t["id"], "query": res.query, "retrieved": row["retrieved"] if row else [],
                     "llm": bool(row) and t["turn"] > 1 and not row["gated"],
                     "memory": (row or {}).get("memory", 0), "memory_tokens": token_count("\n".join(lines), special=False),
                     "prompt_tokens": timings["cache_n"] + timings["prompt_n"] if "prompt_n" in timings else None,
                     "answer": (row or {}).get("answer"), "error": (row or {}).get("error"),
                     "first_token_ms": (row or {}).get("first_token_ms"), "total_ms": (row or {}).get("total_ms")})
        print(f"{t['id']}: {final['status']} {final['say'][:60]} (memory {rows[-1]['memory']})", flush=True)
    memory.close()
    return rows


def summary(turns: list[dict], rows: list[dict], docs: dict) -> dict:
    """The metrics of one variant on one KB over the turns the LLM could answer (each dialogue's second on)."""
    by = {r["id"]: r for r in rows}
    later = [t for t in turns if t["turn"] > 1]
    m = turn_metrics(later, rows, docs)
    calls = [by[t["id"]] for t in later if by[t["id"]]["llm"]]
    kept = [(t, by[t["id"]]) for t in later if by[t["id"]]["status"] == "llm"]
    prompt = [r["prompt_tokens"] for r in calls if r["prompt_tokens"] is not None]

    def p50(key):
        xs = [r[key] for r in calls if r[key] is not None]
        return round(float(np.median(xs)), 1) if xs else None

    return {"turns": len(later), "llm_calls": len(calls), "factual_accuracy": m["factual_accuracy"],
            "grounded_wrong_said": m["grounded_wrong_said"], "answerable_refused": m["answerable_refused"],
            "llm_kept": len(kept), "llm_kept_right": sum(t["answerable"] and has_facts(r["say"], t["facts"])
                                                          for t, r in kept),
            "with_memory": sum(r["memory"] > 0 for r in calls),
            "memory_tokens": sum(r["memory_tokens"] for r in calls),
            "prompt_tokens_p50": float(np.median(prompt)) if prompt else None, "prompt_tokens_reported": len(prompt),
            "first_token_ms_p50": p50("first_token_ms"), "total_ms_p50": p50("total_ms")}


def markdown(out: dict, kbs: list[str], variants: list[str]) -> str:
    """The table of memory_evidence.md from the stage's JSON ``out``, rows in the order of ``kbs`` and ``variants``
    (token counts and milliseconds as integers)."""
    cols = ("turns", "llm_calls", "with_memory", "factual_accuracy", "grounded_wrong_said", "answerable_refused",
            "llm_kept", "llm_kept_right", "memory_tokens", "prompt_tokens_p50", "first_token_ms_p50", "total_ms_p50")

    def cell(c, x):
        return f"{x:.3f}" if c == "factual_accuracy" else ("" if x is None else f"{x:.0f}")
    return (f"Earlier turns as LLM evidence ([memory n]), {out['model']} on {out['threads']} threads, every turn after "
            f"a dialogue's first (clinic, dental, salon: the threshold's choose sets; vet: report set; tables off but on "
            f"the clinic). Runtime "
            f"{out['runtime_s']:.0f} s.\n\n"
            + markdown_table(["KB", "variant [min_cosine, max_items]", *cols],
                             [[k, f"{v} {out['variants'][v]}", *(cell(c, out[k][v][c]) for c in cols)]
                              for k in kbs for v in variants]))


def run():
    t0 = time.perf_counter()
    p = params()
    ev = p["memory"]["evidence_eval"]
    variants = {**{k: list(v) for k, v in ev["variants"].items()},
                "selective": [p["memory"]["evidence"]["min_cosine"], p["memory"]["evidence"]["max_items"]]}
    gate = Gate.load(GATE_PATH)
    turns = read_jsonl(DIALOGUES, required=FIELDS)
    kbs = open_kbs(p)
    out, all_rows = {"model": ev["model"], "threads": ev["threads"], "variants": variants}, []
    for name, policy in variants.items():
        variant_params(p, name, policy)  # every variant checked before any server starts
    for name, policy in variants.items():
        with LocalServer(model=ev["model"], threads=int(ev["threads"]), n_ctx=int(p["llm"]["n_ctx"]),
                         cache_ram_mib=0).start() as server:
            for kb_name, (kb, q_p) in kbs.items():
                ts = [t for t in turns if t["kb"] == kb_name]
                rows = run_variant(kb, variant_params(q_p, name, policy), gate, ts, server.url)
                out.setdefault(kb_name, {})[name] = summary(ts, rows, kb.docs)
                all_rows += [{"variant": name, "kb": kb_name, **r} for r in rows]
        print(f"{name}: {time.perf_counter() - t0:.0f} s", flush=True)
    out["runtime_s"] = round(time.perf_counter() - t0, 1)
    write_jsonl(VOICE_METRICS / "memory_evidence_turns.jsonl", all_rows)
    write_json(VOICE_METRICS / "memory_evidence.json", out)
    write_text(VOICE_METRICS / "memory_evidence.md", markdown(out, list(kbs), list(variants)))
    print(open(VOICE_METRICS / "memory_evidence.md").read())


if __name__ == "__main__":
    main(run)
