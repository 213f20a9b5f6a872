"""Stage dialogues (issue 13): multi-turn calls on the clinic, dental, salon and vet KBs, turn by turn, per follow-up
variant.

Input: fixtures/dialogues/queries.jsonl (turns in order; `asr` of what was said in the call, `standalone_asr` of the
same question asked alone). Variants of what a turn searches for:
- no_memory: the turn's transcript alone (rewrite rules 1-3);
- opener_rule: the rewrite's follow-up rule against the previous turn of the dialogue, always passed as context
  (what a caller of `rag ask --context` gets: openers only);
- session: `rag.voice.pipeline.answer_turn` with a session in `rag.memory` (embedded SQLite, in memory): openers,
  pronouns and ellipsis resolved from the session's earlier resolved turns (`rag.voice.followup`); a follow-up with
  nothing before it gets the clarifying question (refused, reason no_antecedent);
- standalone: the same questions asked alone (the bound the follow-ups are measured against);
- last_turn, full_history, selective (issue 19): the turn's transcript searched together with the dialogue's
  previous turn, with all its earlier turns, or with those whose embedding cosine with it is >= a threshold
  (`rag.memory.recall`; one of params `memory.recall_grid`, picked on the choose KBs' dialogues pooled: most turns
  right, then fewest tokens; the vet dialogues report it). Tokens: WordPiece tokens of what is searched (question
  plus memory).
The clinic's tables apply on the clinic, none on the dental, salon and vet KBs (as stage selection). LLM off: the
extractive pick speaks. Choose sets (CHOOSE): the clinic dialogues, where the follow-up cues were written, and since
2026-12-05 the Harbor Dental (`select.dental.kb`) and Riverside Hair Studio (`select.salon.kb`) dialogues; the vet
dialogues are the report set.
Writes metrics/voice/dialogues.json and dialogues.md (tables and every session turn that went wrong).
"""
import time
from collections import defaultdict

import numpy as np

from common import GATE_PATH, ROOT, VOICE_METRICS, main, params, params_error, tables_off
from rag import config
from rag.retrieval.chunk import load_kb, token_count
from rag.bench.compare import markdown_table
from rag.eval.evaluate import embed_texts
from rag.voice.gate import Gate
from rag.io import read_jsonl, write_json, write_text
from rag.retrieval.kb_cache import KnowledgeBase
from rag.memory import Memory, open_store
from rag.memory.recall import recall, with_memory
from rag.voice.pipeline import answer_turn, follow_up_resolver, gate_function, step_answer, step_final
from rag.voice.quarantine import allowed
from rag.voice.rewrite import rewrite
from rag.eval.scoring import has_facts
from rag.retrieval.search import PassageIndex
from rag.retrieval.sentences import SentenceIndex

DIALOGUES = ROOT / "fixtures" / "dialogues" / "queries.jsonl"
FIELDS = ("dialogue", "kb", "turn", "id", "asr", "standalone_asr", "kind", "relevant", "answerable", "facts")
FOLLOW_UPS = ("opener", "pronoun", "ellipsis")
CHOOSE = ("clinic", "dental", "salon")  # dialogues that choose settings; the rest (vet) only report
VARIANTS = ("no_memory", "last_turn", "full_history", "selective", "opener_rule", "session", "standalone")


def open_kbs(p: dict) -> dict:
    """``{name: (KnowledgeBase, its params)}`` for the clinic (tables on), the dental, salon and vet KBs (tables
    off), in that order (the choose KBs first)."""
    out = {}
    for name, folder, q_p in (("clinic", p["voice"]["kb"], p), ("dental", p["select"]["dental"]["kb"], tables_off(p)),
                              ("salon", p["select"]["salon"]["kb"], tables_off(p)),
                              ("vet", p["abstain"]["transfer_kb"], tables_off(p))):
        hc = config.hybrid_config(q_p)
        docs = load_kb(ROOT / folder, allowed(q_p))
        out[name] = (KnowledgeBase(PassageIndex.from_folder(ROOT / folder, hc, allowed(q_p)), docs,
                                   SentenceIndex.build(docs), key=name, cached=False), q_p)
    return out


def chain_rows(kb: KnowledgeBase, q_p: dict, gate: Gate, turns: list[dict], texts: dict[str, str]) -> list[dict]:
    """Final rows (plus ``query`` and ``retrieved``) of every turn searched as ``texts[id]`` (context-free)."""
    qs = [{"id": t["id"], "asr": texts[t["id"]], "context": None} for t in turns]
    vectors = embed_texts(texts)
    score = gate_function(gate, kb.index, q_p)
    answers = step_answer(kb.index, qs, kb.docs, q_p, gate.tau, None,
                          {i: score(texts[i], vectors[i]) for i in texts})
    rows = step_final(answers, turns, kb.docs, q_p, gate.tau, kb.sentences, None)[0]
    return [{**r, "query": a["query"], "retrieved": a["retrieved"]} for r, a in zip(rows, answers)]


def session_rows(kb: KnowledgeBase, q_p: dict, gate: Gate, turns: list[dict], resolver=None) -> list[dict]:
    """Every turn through `answer_turn`, one session per dialogue, in an in-memory SQLite store. ``resolver``:
    anything with `rag.voice.followup.Resolver.resolve` (stage llm_rewrite passes `rag.llm.rewrite.LLMResolver`);
    None: the KB's rule resolver (`follow_up_resolver`)."""
    memory = Memory(open_store("sqlite://", float(q_p["memory"]["ttl_min"]) * 60))
    resolver = resolver or follow_up_resolver(kb, q_p)
    rows = []
    for t in turns:
        final, row, res = answer_turn(t["asr"], t["dialogue"], memory, q_p, gate, None, kb, resolver)
        rows.append({**final, "id": t["id"], "query": res.query, "resolved_as": res.kind,
                     "retrieved": row["retrieved"] if row else []})
    return rows


def recall_texts(turns: list[dict], own: dict[str, str], pick) -> tuple[dict[str, str], list[float]]:
    """``{turn id: search text}``: each turn's rewritten transcript ``own[id]`` after the earlier turns of its
    dialogue that ``pick(turn index, earlier indices)`` keeps (`rag.memory.recall.with_memory`), and the time of
    each pick, ms."""
    texts, ms = {}, []
    for i, t in enumerate(turns):
        earlier = [j for j in range(i) if turns[j]["dialogue"] == t["dialogue"]]
        t0 = time.perf_counter()
        picked = pick(i, earlier)
        ms.append((time.perf_counter() - t0) * 1000)
        texts[t["id"]] = with_memory(own[t["id"]], [own[turns[j]["id"]] for j in earlier], picked)
    return texts, ms


def recall_grid(p: dict) -> list[float]:
    """params ``memory.recall_grid``: a non-empty list of cosines in [-1, 1] (InputError naming the params file and
    the key)."""
    grid = p["memory"].get("recall_grid")
    if not isinstance(grid, list) or not grid or not all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and -1 <= x <= 1 for x in grid):
        raise params_error(f"memory.recall_grid must be a non-empty list of cosines in [-1, 1], got {grid!r}")
    return [float(x) for x in grid]


def memory_rows(kb: KnowledgeBase, q_p: dict, gate: Gate, turns: list[dict], rules, grid: list[float]) -> dict:
    """Rows of the concatenation variants: ``{"last_turn": rows, "full_history": rows, ("selective", cosine): rows}``
    (each row with the time its memory pick took, ``recall_ms``)."""
    own = {t["id"]: rewrite(t["asr"], None, rules) for t in turns}
    vectors = embed_texts(own)
    matrix = np.stack([vectors[t["id"]] for t in turns])
    picks = {"last_turn": lambda i, e: list(range(len(e)))[-1:], "full_history": lambda i, e: list(range(len(e)))}
    for c in grid:
        picks[("selective", c)] = lambda i, e, c=c: recall(matrix[i], matrix[e], c)
    out = {}
    for name, pick in picks.items():
        texts, ms = recall_texts(turns, own, pick)
        out[name] = [{**r, "recall_ms": m} for r, m in zip(chain_rows(kb, q_p, gate, turns, texts), ms)]
    return out


def pick_min_cosine(grid: list[float], choose: list[dict]) -> float:
    """The selective-recall cosine of ``grid`` with the most turns right summed over the choose KBs' dialogues
    (``choose``: per KB, ``{cosine: turn_metrics}``), then the fewest search tokens, then the lower cosine."""
    def key(c):
        right = sum(round(m[c]["factual_accuracy"] * m[c]["n_answerable"]) for m in choose)
        return -right, sum(m[c]["search_tokens"] for m in choose), c
    return min(grid, key=key)


def turn_metrics(turns: list[dict], rows: list[dict], docs: dict) -> dict:
    """recall@1/@3 over answerable turns (the retrieved documents), factual accuracy and the rest of
    `rag.eval.scoring.final_metrics` over all turns, and the no-antecedent turns answered."""
    from rag.eval.scoring import final_metrics

    by = {r["id"]: r for r in rows}
    ans = [t for t in turns if t["answerable"]]
    hit = {k: sum(bool(set(by[t["id"]]["retrieved"][:k]) & set(t["relevant"])) for t in ans) / max(len(ans), 1)
           for k in (1, 3)}
    m = final_metrics(turns, rows, docs)
    tokens = [token_count(by[t["id"]]["query"], special=False) for t in turns]
    return {"n_turns": len(turns), "n_answerable": len(ans), "recall_at_1": round(hit[1], 6), "recall_at_3": round(hit[3], 6),
            "search_tokens": sum(tokens), "search_tokens_p50": float(np.median(tokens)) if tokens else 0.0,
            "factual_accuracy": m["factual_accuracy"], "grounded_wrong_said": m["grounded_wrong_said"],
            "answerable_refused": m["answerable_refused"], "refusal_recall": m["refusal_recall"],
            "no_antecedent_answered": sum(by[t["id"]]["status"] != "refused" for t in turns
                                          if t["kind"] == "no_antecedent")}


def run():
    t0 = time.perf_counter()
    p = params()
    gate = Gate.load(GATE_PATH)
    turns = read_jsonl(DIALOGUES, required=FIELDS)
    grid = recall_grid(p)
    kbs = open_kbs(p)
    out, wrong, by_cosine, concat, rows = {}, [], {}, {}, {}
    for name, (kb, q_p) in kbs.items():
        ts = [t for t in turns if t["kb"] == name]
        rules = config.rewrite_rules(q_p, kb.index.passages)
        opener, prev = {}, {}
        for t in ts:  # the previous turn of the dialogue, rewritten, as the hand-passed context
            opener[t["id"]] = rewrite(t["asr"], prev.get(t["dialogue"]), rules)
            prev[t["dialogue"]] = opener[t["id"]]
        rows[name] = {"no_memory": chain_rows(kb, q_p, gate, ts, {t["id"]: rewrite(t["asr"], None, rules) for t in ts}),
                      "opener_rule": chain_rows(kb, q_p, gate, ts, opener),
                      "session": session_rows(kb, q_p, gate, ts),
                      "standalone": chain_rows(kb, q_p, gate, ts,
                                               {t["id"]: rewrite(t["standalone_asr"], None, rules) for t in ts})}
        concat[name] = memory_rows(kb, q_p, gate, ts, rules, grid)
        by_cosine[name] = {c: turn_metrics(ts, concat[name][("selective", c)], kb.docs) for c in grid}
    chosen = pick_min_cosine(grid, [by_cosine[n] for n in CHOOSE])
    for name, (kb, q_p) in kbs.items():
        ts = [t for t in turns if t["kb"] == name]
        r = rows[name]
        r["last_turn"], r["full_history"] = concat[name]["last_turn"], concat[name]["full_history"]
        r["selective"] = concat[name][("selective", chosen)]
        recall_ms = [x["recall_ms"] for x in r["selective"]]
        follow = [t for t in ts if t["kind"] in FOLLOW_UPS]
        out[name] = {v: {"all": turn_metrics(ts, r[v], kb.docs), "follow_ups": turn_metrics(follow, r[v], kb.docs)}
                     for v in VARIANTS}
        out[name]["selective_by_cosine"] = {str(c): m for c, m in by_cosine[name].items()}
        out[name]["selective_recall_ms_p50"] = round(float(np.median(recall_ms)), 4)
        by_kind = defaultdict(list)
        for t, x in zip(ts, r["session"]):
            by_kind[t["kind"]].append(x["resolved_as"])
        out[name]["session_resolved_as"] = {k: dict(sorted(
            {x: v.count(x) for x in set(v)}.items())) for k, v in sorted(by_kind.items())}
        for t, x in zip(ts, r["session"]):
            ok = (has_facts(x["say"], t["facts"]) if t["answerable"] and x["status"] != "refused"
                  else x["status"] == "refused" and not t["answerable"])
            if not ok:
                wrong.append([t["id"], t["kind"], t["asr"].lower(), x["resolved_as"], x["query"], x["status"],
                              x["say"][:70]])
    gap = {n: round(out[n]["standalone"]["follow_ups"]["factual_accuracy"]
                    - out[n]["session"]["follow_ups"]["factual_accuracy"], 6) for n in kbs}
    out["follow_up_gap_to_standalone"] = gap  # goal: <= 0.05 on each KB
    out["selective_min_cosine"] = chosen  # picked on the choose KBs' dialogues (CHOOSE)
    write_json(VOICE_METRICS / "dialogues.json", out)
    table = [[n, v, s, m["n_turns"], f"{m['recall_at_1']:.3f}", f"{m['recall_at_3']:.3f}",
              f"{m['factual_accuracy']:.3f}", m["grounded_wrong_said"], m["answerable_refused"],
              m["no_antecedent_answered"], m["search_tokens"]]
             for n in kbs for v in VARIANTS for s, m in out[n][v].items()]
    cosines = [[n, c, f"{m['factual_accuracy']:.3f}", m["grounded_wrong_said"], m["answerable_refused"],
                m["search_tokens"]] for n in kbs for c, m in out[n]["selective_by_cosine"].items()]
    write_text(VOICE_METRICS / "dialogues.md",
               "Multi-turn calls, per turn (recogniser transcripts, LLM off; clinic: cues written on it, tables on; "
               "dental, salon: the second and third choose KBs, tables off; vet: held out, tables off)\n\n"
               + markdown_table(["KB", "variant", "turns", "n", "recall@1", "recall@3", "factual accuracy",
                                 "grounded wrong said", "answerable refused", "no-antecedent answered",
                                 "search tokens"], table)
               + f"\nFollow-up turns' factual accuracy, standalone minus session (goal <= 0.05): {gap}\n\n"
               + f"Selective recall at each cosine (all turns; picked on {' + '.join(CHOOSE)}: {chosen}; picking the earlier "
               + "turns takes " + ", ".join(f"{n} {out[n]['selective_recall_ms_p50']:.3f} ms" for n in kbs)
               + " p50 per turn, their vectors kept from when they were asked):\n\n"
               + markdown_table(["KB", "min cosine", "factual accuracy", "grounded wrong said",
                                 "answerable refused", "search tokens"], cosines) + "\n"
               + "How the session resolved each kind of turn: "
               + "; ".join(f"{n}: {out[n]['session_resolved_as']}" for n in kbs)
               + "\n\nSession turns that went wrong:\n\n"
               + markdown_table(["turn", "kind", "heard", "resolved as", "query", "status", "said"], wrong))
    print(open(VOICE_METRICS / "dialogues.md").read())
    print(f"dialogues: {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":  # stage llm_rewrite imports the helpers above
    main(run)
