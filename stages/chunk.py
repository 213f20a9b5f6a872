"""Stage chunk: KB Markdown files -> data/voice/chunks.jsonl, and metrics/voice/quarantine.json: the KB's
instruction-like paragraphs (`rag.voice.quarantine`), left out of the passages unless ``voice.allow_instructions``."""
from dataclasses import asdict

from common import VOICE_DATA, VOICE_METRICS, ROOT, main, params
from rag.retrieval.chunk import chunk_folder, kb_blocks, quarantine_rows
from rag.io import write_json, write_jsonl
from rag.voice.quarantine import allowed


def run():
    p = params()
    kb, allow = p["voice"]["kb"], allowed(p)
    passages = chunk_folder(ROOT / kb, allow)
    write_jsonl(VOICE_DATA / "chunks.jsonl", [asdict(x) for x in passages])
    files = kb_blocks(ROOT / kb)
    rows = [r for f, bs in files for r in quarantine_rows(bs, f"{kb}/{f.name}")]
    write_json(VOICE_METRICS / "quarantine.json", {
        "kb": kb, "allow_instructions": allow, "files": len(files),
        "paragraphs": sum(b.n is not None for _, bs in files for b in bs), "passages": len(passages),
        "quarantined": len(rows), "rows": rows})
    for r in rows:
        print(f"chunk: {r['file']}:{r['line']}: paragraph {r['paragraph']} "
              f"{'kept (allow_instructions)' if allow else 'quarantined'}: {r['cue']}")
    print(f"chunk: {len(passages)} passages, {len(rows)} instruction-like paragraphs")


main(run)
