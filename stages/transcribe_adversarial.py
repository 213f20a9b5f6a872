"""Stage `transcribe_adversarial` (frozen): the recogniser's form (`asr`) of the spoken adversarial questions.

The English spoken attacks of fixtures/adversarial/questions.jsonl (`rag.bench.adversarial.has_asr_form`: not JSON, not
the very long or very short transcripts) through the same TTS -> ASR chain and params.yaml `transcribe` settings as
stage `transcribe` (clean, no noise), into fixtures/adversarial/queries.jsonl ``{id, spoken, asr}``. Needs the
`voice` extra and sox; run by hand:
    PYTHONPATH=. python stages/transcribe_adversarial.py
"""

from common import main, params
from rag.bench.adversarial import has_asr_form, load_rows
from rag.io import write_jsonl
from rag.voice.speech import check_installed, transcribe_text

SRC, DST = "fixtures/adversarial/questions.jsonl", "fixtures/adversarial/queries.jsonl"


def run():
    p = params()["transcribe"]
    check_installed(p["tts_voice"])
    out = []
    for r in load_rows(SRC):
        if has_asr_form(r):
            asr = transcribe_text(r["spoken"], None, p["samprate"], p["chunk_bytes"])
            out.append({"id": r["id"], "spoken": r["spoken"], "asr": asr})
            print(f"{r['id']}: {asr}", flush=True)
    write_jsonl(DST, out)


if __name__ == "__main__":
    main(run)
