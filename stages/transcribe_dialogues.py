"""Stage `transcribe_dialogues` (frozen): the recogniser's form of the multi-turn dialogue fixtures (issue 13).

Every turn of fixtures/dialogues/dialogues.jsonl through the same TTS -> ASR chain and params.yaml `transcribe`
settings as stage `transcribe` (clean audio, no noise): `asr` is the transcript of `spoken` (what the caller says in
the call), `standalone_asr` the transcript of `standalone` (the same question asked with no earlier turns). A text
is spoken once: identical texts (a first turn's `standalone`, a repeated "And for a cat?") reuse its transcript
(the chain is deterministic). Writes fixtures/dialogues/queries.jsonl, each row as read with `asr` after `spoken`
and `standalone_asr` after `standalone`. Needs the `voice` extra and sox; run by hand:
    PYTHONPATH=. python stages/transcribe_dialogues.py
"""

from common import main, params
from rag.io import read_jsonl, write_jsonl
from rag.voice.speech import check_installed, transcribe_text

SRC, DST = "fixtures/dialogues/dialogues.jsonl", "fixtures/dialogues/queries.jsonl"
FIELDS = ["dialogue", "kb", "turn", "id", "spoken", "standalone", "kind", "relevant", "answerable", "facts"]


def with_asr(row: dict, heard: dict[str, str]) -> dict:
    """``row`` with `asr` after `spoken` and `standalone_asr` after `standalone`, from ``heard`` (text -> transcript)."""
    out = {}
    for k, v in row.items():
        out[k] = v
        if k in ("spoken", "standalone"):
            out["asr" if k == "spoken" else "standalone_asr"] = heard[v]
    return out


def run():
    p = params()["transcribe"]
    check_installed(p["tts_voice"])
    rows = read_jsonl(SRC, FIELDS)
    heard: dict[str, str] = {}
    for r in rows:
        for text in (r["spoken"], r["standalone"]):
            if text not in heard:
                heard[text] = transcribe_text(text, None, p["samprate"], p["chunk_bytes"])
        print(f"{r['id']}: {heard[r['spoken']]} | {heard[r['standalone']]}", flush=True)
    write_jsonl(DST, [with_asr(r, heard) for r in rows])


if __name__ == "__main__":
    main(run)
