"""Stage embed: chunks.jsonl -> embed.npy, (n, 384) float32, L2-normalised, row i = chunk i."""
from common import VOICE_DATA, main
from rag.retrieval.embed import get_embedder
from rag.io import read_jsonl, write_npy


def run():
    chunks = read_jsonl(VOICE_DATA / "chunks.jsonl", required=("text",))
    write_npy(VOICE_DATA / "embed.npy", get_embedder().embed([c["text"] for c in chunks]))


main(run)
