"""Stage bench_latency: per-turn p50/p95 (ms) on the clinic fixtures -> metrics/voice/bench.json:
rewrite, query embedding and search (each mode); the whole turn without the LLM (+ gate, pick, verify) with the
KB's sentences embedded at index time and, as the comparison row, per question; passage embedding throughput."""
from common import GATE_PATH, ROOT, VOICE_DATA, VOICE_METRICS, main, params, voice_index
from rag import config
from rag.bench.latency import embed_throughput, turn_latency, whole_turn
from rag.retrieval.chunk import load_kb
from rag.voice.quarantine import allowed
from rag.retrieval.embed import passage_embedder, query_embedder
from rag.io import write_json
from rag.voice.gate import Gate
from rag.voice.pipeline import gate_function
from rag.voice.queries import load_queries
from rag.retrieval.sentences import SentenceIndex


def run():
    p = params()
    b = p["bench"]
    index = voice_index(p)
    queries = load_queries(ROOT / p["voice"]["queries"])
    embedder = query_embedder()
    rules = config.rewrite_rules(p, index.passages)
    latency = turn_latency(index, queries, rules, embedder, int(p["retrieval"]["k"]), int(b["repeats"]))
    gate = gate_function(Gate.load(GATE_PATH), index, p)
    kb, settings, verify_rules = load_kb(ROOT / p["voice"]["kb"], allowed(p)), config.answer_settings(p, 0.0), config.verify_rules(p)
    sentences = SentenceIndex.load(VOICE_DATA / "sentences.jsonl", VOICE_DATA / "sentences.npy")
    turn = {name: whole_turn(index, kb, s, [q["asr"] for q in queries], rules, settings, verify_rules, gate,
                             embedder, int(b["repeats"]))
            for name, s in (("index_time_sentences", sentences), ("query_time_sentences", None))}
    throughput = embed_throughput(passage_embedder(), [x.text for x in index.passages], int(b["embed_repeats"]))
    write_json(VOICE_METRICS / "bench.json", {
        "turns": len(queries), "repeats": b["repeats"], "latency_ms": latency, "whole_turn_ms": turn,
        "embed_passages": len(index.passages), "embed_passages_per_s": throughput})


main(run)
