"""Stage memory_bench (issue 13): what conversation memory adds to a turn, per backend, in one run.

Store: one append plus one read of the last ``memory.max_turns`` turns (`rag.memory.bench.turn_overhead_ms`),
``bench.memory_turns`` times, on SQLite in memory, an SQLite file (the embedded default), Redis (valkey-server) and
PostgreSQL, the servers started here from their pip wheels on Unix sockets and stopped by PID
(`rag.memory.servers`). Resolve: `rag.voice.followup.Resolver.resolve` on every clinic dialogue turn (its gate scores
included). Writes metrics/voice/memory_bench.json (milliseconds; goals: store p50 <= 5 ms embedded, <= 10 ms Redis).
"""
import tempfile
import time
from pathlib import Path

from common import ROOT, VOICE_METRICS, main, params
from rag.bench.latency import summary
from rag.io import read_jsonl, write_json
from rag.memory import open_store
from rag.memory.bench import turn_overhead_ms
from rag.memory.servers import start_postgres, start_redis

DIALOGUES = ROOT / "fixtures" / "dialogues" / "queries.jsonl"


def resolve_ms(p: dict) -> dict:
    """p50/p95 ms of resolving each clinic dialogue turn against its dialogue's earlier resolved queries."""
    from rag.retrieval.chunk import load_kb
    from rag.retrieval.kb_cache import KnowledgeBase
    from rag.voice.pipeline import follow_up_resolver
    from rag.voice.quarantine import allowed
    from rag.retrieval.search import PassageIndex
    from rag.retrieval.sentences import SentenceIndex
    from rag import config

    folder = ROOT / p["voice"]["kb"]
    docs = load_kb(folder, allowed(p))
    kb = KnowledgeBase(PassageIndex.from_folder(folder, config.hybrid_config(p), allowed(p)), docs,
                       SentenceIndex.build(docs), key="clinic", cached=False)
    resolver = follow_up_resolver(kb, p)
    history, ms = {}, []
    for t in read_jsonl(DIALOGUES, required=("dialogue", "kb", "asr")):
        if t["kb"] != "clinic":
            continue
        h = history.setdefault(t["dialogue"], [])
        t0 = time.perf_counter()
        r = resolver.resolve(t["asr"], h)
        ms.append((time.perf_counter() - t0) * 1000.0)
        if r.query:
            h.append(r.query)
    s = summary(ms)
    return {"turns": s["n"], "p50": s["p50"], "p95": s["p95"]}


def run():
    p = params()
    n, limit = int(p["bench"]["memory_turns"]), int(p["memory"]["max_turns"])
    ttl_s = float(p["memory"]["ttl_min"]) * 60
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, url in (("sqlite_memory", "sqlite://"), ("sqlite_file", f"sqlite:///{Path(tmp) / 'memory.sqlite3'}")):
            store = open_store(url, ttl_s)
            out[name] = turn_overhead_ms(store, n, limit)
            store.close()
    for name, start in (("redis", start_redis), ("postgresql", start_postgres)):
        server = start()
        try:
            store = open_store(server.url, ttl_s)
            out[name] = turn_overhead_ms(store, n, limit)
            store.close()
        finally:
            server.stop()
    out["resolve"] = resolve_ms(p)
    write_json(VOICE_METRICS / "memory_bench.json", out)
    for k, v in out.items():
        print(f"{k:14} p50 {v['p50']:.3f} ms  p95 {v['p95']:.3f} ms  ({v['turns']} turns)")


main(run)
