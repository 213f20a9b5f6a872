"""Stage preferences (issue 19, part 2): returning callers whose earlier call told us something about themselves.

Input: fixtures/dialogues/preferences.jsonl (design set) and preferences_report.jsonl (report set), one caller
per line: ``calls`` (each a list of the caller's turns, in
order, on the ``kb`` "clinic" or "vet") and ``checks`` (a turn of a later call that needs a stated preference:
``field``, the ``value`` it must cite, or null when the caller never stated it and nothing may be cited, and the
``facts`` the answer must hold). Each call runs through `rag.voice.pipeline.answer_turn` with the caller's id in an
in-memory SQLite store (LLM off: the extractive pick speaks); when it ends, `rag.voice.pipeline.end_call` stores what
the summariser's reply for that call keeps (`rag.memory.preferences.summarise`). The replies are those the frozen
stage call_summaries got from each model of ``memory.preferences_eval.models`` (metrics/voice/call_summaries.jsonl), so
this stage needs no LLM; ``none`` is the baseline without summary memory.

Per summariser: ``used_right`` (of the turns needing a stated preference: the mention cites the stated value and
the answer holds the facts), ``cited_right``, ``answer_right``, ``other_value_cited`` (a stated value, not the
expected one), ``invented`` (a turn citing a value the caller did not state as theirs: on a null check, or with a
word the caller never said in an earlier call), and per call what was kept and dropped. The design set was written
before the code; the summary prompt was revised once on it; the report set was written before that revision.
Writes metrics/voice/preferences.json and preferences.md.
"""
import time

from common import GATE_PATH, ROOT, VOICE_METRICS, main, params
from dialogues import open_kbs
from rag.bench.compare import markdown_table
from rag.eval.scoring import has_facts
from rag.io import InputError, read_jsonl, write_json, write_text
from rag.llm.client import LLMReply
from rag.memory import Memory, open_store
from rag.voice.gate import Gate
from rag.voice.pipeline import answer_turn, end_call, follow_up_resolver

SETS = {"design": ROOT / "fixtures" / "dialogues" / "preferences.jsonl",    # the prompt was revised on it
        "report": ROOT / "fixtures" / "dialogues" / "preferences_report.jsonl",  # its first run led to the ownership check
        "holdout": ROOT / "fixtures" / "dialogues" / "preferences_holdout.jsonl"}  # written before that check: reports it
SUMMARIES = VOICE_METRICS / "call_summaries.jsonl"


def load_callers(path) -> list[dict]:
    """The callers of ``path``; InputError naming the file and line for a caller whose calls or checks are
    malformed (a check pointing at no turn, a kb other than clinic / vet)."""
    callers = read_jsonl(path, required=("caller", "kb", "calls", "checks"))
    for i, c in enumerate(callers, 1):
        ok = (c["kb"] in ("clinic", "vet") and isinstance(c["calls"], list) and c["calls"]
              and all(isinstance(call, list) and call and all(isinstance(t, str) and t.strip() for t in call)
                      for call in c["calls"]))
        for k in c["checks"] if ok else ():
            ok = (isinstance(k, dict) and isinstance(k.get("call"), int) and 1 <= k["call"] <= len(c["calls"])
                  and isinstance(k.get("turn"), int) and 1 <= k["turn"] <= len(c["calls"][k["call"] - 1])
                  and isinstance(k.get("field"), str) and isinstance(k.get("facts"), list))
        if not ok:
            raise InputError(f"{path}:{i}: caller {c.get('caller')!r}: kb must be clinic or vet, calls non-empty lists "
                             "of turns, each check a call and turn that exist, a field and facts")
    return callers


def replay(rows: list[dict]):
    """An `end_call` ``ask`` that answers each call with the stored reply of call_summaries.jsonl (``rows``: that
    model's, in call order)."""
    replies = iter(rows)

    def ask(messages, schema):
        r = next(replies)
        return LLMReply(record=r["record"], error=r["error"], raw=r["raw"])
    return ask


def stated(value: str, expected: str) -> bool:
    """Whether a cited ``value`` holds every word of ``expected`` (a plural s either way)."""
    got = {w.rstrip("s") for w in value.lower().split()}
    return all(w.rstrip("s") in got for w in expected.lower().split())


def play(p: dict, kbs: dict, gate: Gate, callers: list[dict], replies: dict | None) -> tuple[list[dict], list[dict]]:
    """Every caller's calls in order with one in-memory store; ``replies``: ``{caller: [stored reply per call]}``
    (None: no summary memory). Returns (one row per check, one row per call's summary)."""
    checks, calls = [], []
    for c in callers:
        kb, q_p = kbs[c["kb"]]
        memory = Memory(open_store("sqlite://", float(q_p["memory"]["ttl_min"]) * 60))
        resolver = follow_up_resolver(kb, q_p)
        ask = replay(replies[c["caller"]]) if replies is not None else None
        want = {(k["call"], k["turn"]): k for k in c["checks"]}
        before = ""  # what the caller said in their earlier calls
        for n, call in enumerate(c["calls"], 1):
            session = f"{c['caller']}.{n}"
            for t, question in enumerate(call, 1):
                final = answer_turn(question, session, memory, q_p, gate, None, kb, resolver, c["caller"])[0]
                k = want.get((n, t))
                if k is None:
                    continue
                cited = [v for f, v in final.get("preferences", []) if f == k["field"]]
                right_value = bool(cited) and k["value"] is not None and stated(cited[0], k["value"])
                checks.append({"caller": c["caller"], "kb": c["kb"], "call": n, "turn": t, "question": question,
                               "field": k["field"], "value": k["value"], "cited": cited[0] if cited else None,
                               "say": final["say"], "status": final["status"],
                               "cited_right": right_value, "answer_right": has_facts(final["say"], k["facts"]),
                               "used_right": right_value and has_facts(final["say"], k["facts"]),
                               "other_value": bool(cited) and k["value"] is not None and not right_value,
                               "invented": bool(cited) and (k["value"] is None or not stated(before, cited[0]))})
            before += " " + " ".join(call).lower()
            if ask is not None:
                kept, why = end_call(session, c["caller"], memory, q_p, ask)
                calls.append({"caller": c["caller"], "call": n, "kept": kept, "why": why})
        memory.close()
    return checks, calls


def summary(checks: list[dict]) -> dict:
    need = [k for k in checks if k["value"] is not None]
    none = [k for k in checks if k["value"] is None]

    def share(rows, key):
        return round(sum(r[key] for r in rows) / len(rows), 6) if rows else 0.0
    return {"turns_needing": len(need), "used_right": share(need, "used_right"),
            "cited_right": share(need, "cited_right"), "answer_right": share(need, "answer_right"),
            "other_value_cited": sum(k["other_value"] for k in checks),
            "turns_citing_nothing_allowed": len(none), "invented": sum(k["invented"] for k in checks)}


def run():
    t0 = time.perf_counter()
    p = params()
    gate = Gate.load(GATE_PATH)
    kbs = open_kbs(p)
    stored = read_jsonl(SUMMARIES, required=("set", "model", "caller", "call", "record", "error", "raw"))
    models = list(dict.fromkeys(r["model"] for r in stored))
    out, md_rows, wrong = {}, [], []
    for name, path in SETS.items():
        callers = load_callers(path)
        out[name] = {}
        for model in ["none", *models]:
            replies = None
            if model != "none":
                replies = {c["caller"]: [r for r in stored if (r["set"], r["model"], r["caller"]) == (name, model, c["caller"])]
                           for c in callers}
                short = [c["caller"] for c in callers if len(replies[c["caller"]]) != len(c["calls"])]
                if short:
                    raise InputError(f"{SUMMARIES}: {model} lacks replies for {name} callers {short}: "
                                     "rerun stage call_summaries")
            checks, calls = play(p, kbs, gate, callers, replies)
            m = {**summary(checks), "calls_with_something_kept": sum(bool(c["kept"]) for c in calls),
                 "values_dropped": sum(c["why"].count("dropped ") for c in calls)}
            md_rows.append([name, model, m["turns_needing"], m["used_right"], m["cited_right"], m["answer_right"],
                            m["other_value_cited"], m["invented"], m["calls_with_something_kept"], m["values_dropped"]])
            wrong += [{"set": name, "model": model, **k} for k in checks if model != "none" and (
                k["invented"] or (k["value"] is not None and not k["used_right"]))]
            out[name][model] = {**m, "calls": calls}
    out["runtime_s"] = round(time.perf_counter() - t0, 1)
    write_json(VOICE_METRICS / "preferences.json", out)
    md = ["Returning callers: a preference stated in one call, used in the next (LLM off for the answers; each "
          "summariser's stored replies, kept only where the caller said every word; design: "
          "fixtures/dialogues/preferences.jsonl, the prompt revised on it once; report: preferences_report.jsonl, "
          "written before that and never tuned on)", "",
          markdown_table(["set", "summariser", "turns needing", "used right", "cited right", "answer right",
                          "other stated value cited", "invented", "calls with something kept", "values dropped"],
                         md_rows), "",
          "Turns that went wrong:", "",
          markdown_table(["set", "summariser", "caller", "question", "expected", "cited", "said"],
                         [[w["set"], w["model"], w["caller"], w["question"], w["value"], w["cited"], w["say"]]
                          for w in wrong]) if wrong else "none"]
    write_text(VOICE_METRICS / "preferences.md", "\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main(run)
