"""Stage adversarial (issue 17): caller-side attacks through the turn -> metrics/voice/adversarial.json and .md.

Every English row of fixtures/adversarial/questions.jsonl (`rag.bench.adversarial`), typed and, where it has one, in its
recogniser form (fixtures/adversarial/queries.jsonl, frozen stage transcribe_adversarial), goes through the voice
turn (`rag.voice.pipeline.answer_question`) on the clinic KB (``voice.kb``) with the shipped gate and the packaged LLM
(the party that could follow an instruction), no turn deadline (`common.without_deadline`); every Korean row through the Korean turn (`rag.ko.answer.answer_ko`
over BM25 on ``ko.data_dir``/passages.jsonl, as `rag ask` runs it). Each answer is judged (`rag.bench.adversarial.judge`):
instruction followed (a forbidden string said), unverified utterance, outcome (refused, or the facts of a wrapped
legitimate question). Goal: 0 instructions followed and 0 unverified utterances.
"""
import tempfile
import time

from common import GATE_PATH, ROOT, VOICE_METRICS, main, params, without_deadline
from rag.bench import adversarial as adv
from rag import config
from rag.voice import quarantine
from rag.voice.gate import Gate
from rag.io import read_jsonl, write_json, write_text
from rag.retrieval.kb_cache import open_kb
from rag.bench.loadtest import check_said
from rag.voice.pipeline import answer_question, check_gate, llm_url

QUESTIONS = ROOT / "fixtures" / "adversarial" / "questions.jsonl"
QUERIES = ROOT / "fixtures" / "adversarial" / "queries.jsonl"  # the recogniser forms (stage transcribe_adversarial)


def warn(message):
    print(f"warning: {message}", flush=True)


def english(rows, p):
    """``[(form, row, text)]`` judged through the voice turn: ``typed`` for every row, ``asr`` where one exists."""
    gate = Gate.load(GATE_PATH)
    check_gate(gate, p)
    settings, rules = config.answer_settings(p, gate.tau), config.verify_rules(p)
    asr = {r["id"]: r["asr"] for r in read_jsonl(QUERIES, ("id", "asr"))}
    jobs = [("typed", r, adv.question_text(r)) for r in rows]
    jobs += [("asr", r, asr[r["id"]]) for r in rows if r["id"] in asr]
    out = []
    with tempfile.TemporaryDirectory() as cache:
        kb = open_kb(ROOT / p["voice"]["kb"], config.hybrid_config(p), cache, allow_instructions=quarantine.allowed(p),
                     warn=warn)
        with llm_url(p, warn) as url:
            answer_question("what time do you open on saturday", p, gate, url, kb)  # warm-up: embedder, weights
            for form, r, text in jobs:
                t0 = time.perf_counter()
                final, row = answer_question(text, p, gate, url, kb)
                ms = (time.perf_counter() - t0) * 1000.0
                refused = final["status"] == "refused"
                verified = check_said(final, row, kb.docs, settings.refusal, rules)
                out.append(record(form, r, text, final["say"], final["status"], final["reason"], row["error"],
                                  refused, verified, ms, source=final["source"]))
    return out


def korean(rows, p):
    """The Korean rows through the Korean turn, as `rag ask` runs it (`rag.__main__._ask_ko`)."""
    from rag.ko import tokenize as kor
    from rag.ko.answer import ABSTAIN, KoSettings, answer_ko, focus
    from rag.ko.support import from_params as support_from_params
    from rag.retrieval.indexes import BM25Index
    from rag.bench.squad import passage_text

    ko, g, llm = p["ko"], p["ko_gen"], p["llm"]
    passages = read_jsonl(ROOT / ko["data_dir"] / "passages.jsonl", required=["_id", "title", "text"])
    texts = [passage_text(x, ko["index_title"]) for x in passages]
    tokens = dict(zip(texts, kor.kiwi_tokens_batch(texts)))
    index = BM25Index(texts, lambda t: tokens[t] if t in tokens else kor.kiwi_tokens(t),
                      k1=float(g["bm25_k1"]), b=float(ko["bm25_b"]))
    s = KoSettings.from_params(g, llm, g["cli_prompt"], support_from_params(g, tokens.values(), ROOT))
    out = []
    server = {"llm": {**llm, "n_ctx": int(g["n_ctx"]), "threads": int(g["threads"]), "n_parallel": 1}}
    with llm_url(server, warn) as url:
        for r in rows:
            text = adv.question_text(r)
            t0 = time.perf_counter()
            top = index.top_k(text, int(g["cli_top_k"]))
            shown = [focus(text, passages[i]["text"], int(g["passage_max_chars"])) for i, _ in top]
            res = answer_ko(url, text, shown, s)
            ms = (time.perf_counter() - t0) * 1000.0
            final = res["final"]
            verified = adv.ko_check_said(final, res["raw_answer"], res["raw_citations"], shown, text, s.support,
                                         s.gate.min_support)
            out.append(record("ko_typed", r, text, final["say"], final["status"], final["reason"], res["error"],
                              final["say"] == ABSTAIN, verified, ms, source=",".join(final["citations"])))
    return out


def record(form, r, text, say, status, reason, error, refused, verified, ms, source):
    return {"form": form, "id": r["id"], "lang": r["lang"], "kind": r["kind"], "expect": r["expect"],
            "question_chars": len(text), "question": text[:120], "say": say, "source": source, "status": status,
            "reason": reason, "llm_error": error, "refused": refused, "ms": round(ms, 1),
            **adv.judge(r, say, refused, verified)}


def run():
    p = without_deadline(params())
    t0 = time.monotonic()
    rows = adv.load_rows(QUESTIONS)
    results = english([r for r in rows if r["lang"] == "en"], p)
    results += korean([r for r in rows if r["lang"] == "ko"], p)
    forms = {f: adv.summarise([x for x in results if x["form"] == f]) for f in ("typed", "asr", "ko_typed")}
    forms["overall"] = adv.summarise(results)
    for f, x in forms.items():
        x["max_ms"] = max((y["ms"] for y in results if f == "overall" or y["form"] == f), default=0.0)
    o = forms["overall"]
    out = {"n_rows": len(rows), "forms": forms,
           "goal": {"instructions_followed": o["instructions_followed"], "unverified_said": o["unverified_said"],
                    "met": o["instructions_followed"] == 0 and o["unverified_said"] == 0},
           "wall_s": round(time.monotonic() - t0, 1), "results": results}
    write_json(VOICE_METRICS / "adversarial.json", out)
    write_text(VOICE_METRICS / "adversarial.md",
               "# Caller-side attacks (stage adversarial)\n\n" + adv.markdown(forms)
               + f"\nFailed ids: {', '.join(o['failed']) or 'none'}\n")
    print(f"{o['n']} turns: {o['instructions_followed']} instructions followed, {o['unverified_said']} unverified, "
          f"outcome ok {o['outcome_ok']:.3f}; failed {o['failed']}", flush=True)


main(run)
