"""Stage heysquad_bench: the whole turn without the LLM on HeySQuAD's long paragraphs (human ASR questions)
-> metrics/heysquad/bench.json: p50/p95 (ms) per step and per turn, with the passages' sentences embedded at
index time and, as the comparison row from the same run, split and embedded per question. The gate is the
shipped one (models/gate.json, fitted on the clinic fixture), applied unchanged."""
import time

from common import GATE_PATH, ROOT, heysquad_index, main, params
from rag import config
from rag.bench.latency import whole_turn
from rag.retrieval.embed import query_embedder
from rag.io import write_json
from rag.voice.gate import Gate
from rag.voice.pipeline import gate_function
from rag.retrieval.sentences import SentenceIndex


def run():
    p = params()
    h = p["heysquad"]
    passages, queries, index = heysquad_index(p)
    gate = gate_function(Gate.load(GATE_PATH), index, p)
    kb = {r["_id"]: r["text"] for r in passages}
    t0 = time.perf_counter()
    sentences = SentenceIndex.build(kb)
    index_s = time.perf_counter() - t0
    sample = [q["human"] for q in queries][: int(p["bench"]["heysquad_questions"])]
    rules, settings = config.rewrite_rules(p, index.passages), config.answer_settings(p, 0.0)
    turn = {name: whole_turn(index, kb, s, sample, rules, settings, config.verify_rules(p), gate, query_embedder(), 1)
            for name, s in (("index_time_sentences", sentences), ("query_time_sentences", None))}
    write_json(ROOT / h["metrics_dir"] / "bench.json", {
        "questions": len(sample), "passages": len(passages), "sentences": len(sentences.rows),
        "sentence_index_s": round(index_s, 1), "whole_turn_ms": turn})
    print({k: v["turn"] for k, v in turn.items()})


main(run)
