"""Stage chunk: KB Markdown files -> data/voice/chunks.jsonl."""
from dataclasses import asdict

from common import VOICE_DATA, ROOT, main, params
from rag.chunk import chunk_folder
from rag.io import write_jsonl


def run():
    passages = chunk_folder(ROOT / params()["voice"]["kb"])
    write_jsonl(VOICE_DATA / "chunks.jsonl", [asdict(p) for p in passages])


main(run)
