"""Stage embed_sentences: split every clinic KB document into sentences and embed them once, at index time
-> data/voice/sentences.jsonl ({doc, position, text}) and data/voice/sentences.npy ((n, 384) float32 unit rows),
which the extractive pick reads instead of embedding candidate sentences per question."""
import time

from common import ROOT, VOICE_DATA, main, params
from rag.retrieval.chunk import load_kb
from rag.voice.quarantine import allowed
from rag.retrieval.sentences import SentenceIndex


def run():
    t0 = time.perf_counter()
    p = params()
    index = SentenceIndex.build(load_kb(ROOT / p["voice"]["kb"], allowed(p)))  # quarantined paragraphs left out
    index.save(VOICE_DATA / "sentences.jsonl", VOICE_DATA / "sentences.npy")
    print(f"embed_sentences: {len(index.rows)} sentences, {time.perf_counter() - t0:.1f} s")


main(run)
