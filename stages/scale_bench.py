"""Stage scale_bench (issue 16): exact search vs faiss HNSW as the KB grows (`rag.bench.scale`).

Passage sets of ``scale.sizes`` are paraphrase variants of the real passage vectors (the clinic's and HeySQuAD's
embed.npy: 353 anchors), queries ``scale.queries`` more of them (held out). Per size: HNSW build time and memory,
exact and HNSW query p50/p95 (one query at a time, ms), HNSW recall@10 against exact search at every
``scale.ef_search``. Not part of `make test`; add 1000000 to ``scale.sizes`` for the 1M row (dvc exp run -S).
Writes metrics/scale.json and metrics/scale.md.
"""
import time

import numpy as np

from common import ROOT, VOICE_DATA, main, params
from rag.bench.compare import markdown_table
from rag.bench.scale import compare, paraphrase_variants
from rag.io import write_json, write_text


def run():
    t0 = time.perf_counter()
    p = params()
    s, r = p["scale"], p["retrieval"]
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
    out["runtime_s"] = round(time.perf_counter() - t0, 1)
    write_json(ROOT / "metrics" / "scale.json", out)
    rows = [[n, "exact", "", f"{v['exact']['p50_ms']:.3f}", f"{v['exact']['p95_ms']:.3f}", "1.000",
             f"{v['exact']['bytes'] / 2**20:.0f}", ""] for n, v in out["sizes"].items()]
    rows += [[n, "hnsw", ef, f"{e['p50_ms']:.3f}", f"{e['p95_ms']:.3f}", f"{e['recall_at_10']:.3f}",
              f"{v['hnsw']['bytes'] / 2**20:.0f}", v["hnsw"]["build_s"]]
             for n, v in out["sizes"].items() for ef, e in v["hnsw"]["ef_search"].items()]
    write_text(ROOT / "metrics" / "scale.md",
               f"Exact vs HNSW (m {r['hnsw_m']}, ef_construction {r['hnsw_ef_construction']}) on paraphrase variants "
               f"of {len(anchors)} real passage vectors (noise {s['noise']}), {s['queries']} held-out queries, one at a "
               "time, 2 cores\n\n" + markdown_table(["passages", "index", "ef_search", "p50 ms", "p95 ms",
                                                    "recall@10 vs exact", "MiB", "build s"], rows))
    print(open(ROOT / "metrics" / "scale.md").read())


main(run)
