"""Stage bench_latency: per-turn p50/p95 of rewrite, query embedding and search (each mode), and passage
embedding throughput, on the clinic fixtures -> metrics/voice/bench.json (ms; passages/s)."""
from common import ROOT, VOICE_METRICS, main, params, voice_index
from rag import config
from rag.bench import embed_throughput, turn_latency
from rag.embed import get_embedder
from rag.io import write_json
from rag.queries import load_queries


def run():
    p = params()
    b = p["bench"]
    index = voice_index(p)
    queries = load_queries(ROOT / p["voice"]["queries"])
    embedder = get_embedder()
    latency = turn_latency(index, queries, config.rewrite_rules(p, index.passages), embedder, int(p["retrieval"]["k"]),
                           int(b["repeats"]))
    throughput = embed_throughput(embedder, [x.text for x in index.passages], int(b["embed_repeats"]))
    write_json(VOICE_METRICS / "bench.json", {
        "turns": len(queries), "repeats": b["repeats"], "latency_ms": latency,
        "embed_passages": len(index.passages), "embed_passages_per_s": throughput})


main(run)
