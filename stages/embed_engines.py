"""Stage embed_engines (issue 16): the embedding batch job locally and on Ray with 1 and 2 workers, on the HeySQuAD
passages (311 long paragraphs): passages/s each (one run, wall clock including Ray's start) and whether every
engine gives the local vectors row for row. Writes metrics/embed_engines.json."""
import time

import numpy as np

from common import ROOT, main, params
from rag.io import read_jsonl, write_json
from rag.retrieval.distributed import embed_passages


def run():
    p = params()
    e = p["embed"]
    texts = [r["text"] for r in read_jsonl(ROOT / p["heysquad"]["data_dir"] / "passages.jsonl", required=("text",))]
    out, local = {"passages": len(texts)}, None
    for name, engine, workers in (("local", "local", 1), ("ray_1_worker", "ray", 1), ("ray_2_workers", "ray", 2)):
        t0 = time.perf_counter()
        v = embed_passages(texts, engine, workers, batches_per_task=int(e["batches_per_task"]))
        s = time.perf_counter() - t0
        local = v if local is None else local
        out[name] = {"seconds": round(s, 2), "passages_per_s": round(len(texts) / s, 1),
                     "identical_to_local": bool(np.array_equal(v, local))}
        print(name, out[name], flush=True)
    out["ray_2_vs_1_speedup"] = round(out["ray_1_worker"]["seconds"] / out["ray_2_workers"]["seconds"], 2)
    write_json(ROOT / "metrics" / "embed_engines.json", out)


main(run)
