"""Stage load (issue 17): 1, 4, 16 simultaneous callers through the voice turn against the packaged llama.cpp
server on 127.0.0.1 (``llm.n_parallel`` slots) -> metrics/voice/load.json: per level p50/p95 turn latency, deadline
misses, unverified utterances and crashes (both must be 0), statuses and reasons. Not part of `make test`."""
import time

from common import GATE_PATH, ROOT, VOICE_DATA, VOICE_METRICS, main, params, voice_index
from rag import config
from rag.retrieval.chunk import load_kb
from rag.voice.gate import Gate
from rag.io import write_json
from rag.retrieval.kb_cache import KnowledgeBase
from rag.llm.server import LocalServer
from rag.bench.loadtest import check_said, run_level, summarise
from rag.voice.pipeline import answer_question, check_gate
from rag.voice.queries import load_queries
from rag.retrieval.sentences import SentenceIndex


def run():
    p = params()
    L = p["load"]
    levels = [int(n) for n in L["callers"]]
    turns, max_s = int(L["turns"]), float(L["max_s"])
    gate = Gate.load(GATE_PATH)
    check_gate(gate, p)
    kb = KnowledgeBase(voice_index(p), load_kb(ROOT / p["voice"]["kb"]),
                       SentenceIndex.load(VOICE_DATA / "sentences.jsonl", VOICE_DATA / "sentences.npy"), "", True)
    questions = [q["asr"] for q in load_queries(ROOT / p["voice"]["queries"])]
    settings, rules = config.answer_settings(p, gate.tau), config.verify_rules(p)
    llm = p["llm"]
    out = {"deadline_s": settings.deadline_s, "reserve_s": settings.reserve_s, "n_parallel": int(llm["n_parallel"]),
           "threads": int(llm["threads"]), "turns_per_level": turns, "max_s_per_level": max_s, "levels": {}}
    t0 = time.monotonic()
    # Always the packaged server on loopback (llm.url is ignored here: the load is for this machine's server).
    with LocalServer.from_params(llm) as server:
        out["server_start_s"] = round(time.monotonic() - t0, 1)

        def turn(q):
            return answer_question(q, p, gate, server.url, kb)

        def check(final, row):
            return check_said(final, row, kb.docs, settings.refusal, rules)

        warm = run_level(1, 1, questions, turn, check, max_s)  # loads the embedder and the model's weights
        out["warmup_ms"] = round(warm[0]["ms"], 1)
        for n in levels:
            records = run_level(n, turns, questions, turn, check, max_s)
            out["levels"][str(n)] = summarise(records, settings.deadline_s)
            print(f"{n:>3} callers: {out['levels'][str(n)]}", flush=True)
    lv = out["levels"].values()
    out["goal"] = {"crashes": sum(x["crashes"] for x in lv), "unverified": sum(x["unverified"] for x in lv),
                   "deadline_misses": sum(x["deadline_misses"] for x in lv)}
    out["goal"]["met"] = not any(out["goal"].values())
    out["wall_s"] = round(time.monotonic() - t0, 1)
    write_json(VOICE_METRICS / "load.json", out)


main(run)
