"""Stage embed: chunks.jsonl -> embed.npy, (n, 384) float32, L2-normalised, row i = chunk i; in this process or on
Ray (params ``embed.engine``; `rag.retrieval.distributed.embed_passages`: the same vectors either way)."""
import os

from common import VOICE_DATA, main, params
from rag.io import read_jsonl, write_npy
from rag.retrieval.distributed import embed_passages


def run():
    e = params()["embed"]
    chunks = read_jsonl(VOICE_DATA / "chunks.jsonl", required=("text",))
    write_npy(VOICE_DATA / "embed.npy", embed_passages([c["text"] for c in chunks], e["engine"], int(e["workers"]),
                                                       os.environ.get("RAG_RAY_ADDRESS", ""),
                                                       batches_per_task=int(e["batches_per_task"])))


main(run)
