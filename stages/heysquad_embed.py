"""Stage heysquad_embed: passages.jsonl -> embed.npy, (n, 384) float32 MiniLM unit rows, row i = passage i."""
import time

from common import ROOT, main, params
from rag.retrieval.embed import passage_embedder
from rag.io import read_jsonl, write_npy


def run():
    data = ROOT / params()["heysquad"]["data_dir"]
    passages = read_jsonl(data / "passages.jsonl", required=("_id", "text"))
    t0 = time.perf_counter()
    vectors = passage_embedder().embed([p["text"] for p in passages])
    seconds = time.perf_counter() - t0
    write_npy(data / "embed.npy", vectors)
    print(f"heysquad_embed: {len(passages)} passages in {seconds:.1f} s ({len(passages) / seconds:.1f} passages/s)")


main(run)
