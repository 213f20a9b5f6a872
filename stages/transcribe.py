"""Stage `transcribe` (frozen): add real recogniser output (`asr`) to the question fixtures.

Reads params.yaml `transcribe`; needs the `voice` extra and sox. Run by hand:
    PYTHONPATH=. python stages/transcribe.py
"""
from importlib.metadata import version

from rag.io import read_jsonl, read_params, write_jsonl
from rag.speech import transcribe_text

FIELDS = ["id", "spoken", "context", "relevant", "answerable", "facts"]


def with_asr(rows, p, snr_db=None):
    out = []
    for r in rows:
        asr = transcribe_text(r["spoken"], snr_db, p["samprate"], p["chunk_bytes"])
        out.append({"id": r["id"], "spoken": r["spoken"], "asr": asr, **{k: r[k] for k in FIELDS[2:]}})
        print(f"{r['id']}{'' if snr_db is None else f' @{snr_db}dB'}: {asr}", flush=True)
    return out


def main():
    p = read_params("params.yaml")["transcribe"]
    name, want = p["tts_voice"].split("==")
    if version(name) != want:
        raise SystemExit(f"params.yaml wants {p['tts_voice']}, installed {name}=={version(name)}")
    voice = read_jsonl("fixtures/voice/questions.jsonl", FIELDS)
    write_jsonl("fixtures/voice/queries.jsonl", with_asr(voice, p))
    transfer = read_jsonl("fixtures/transfer/questions.jsonl", FIELDS)
    write_jsonl("fixtures/transfer/queries_clean.jsonl", with_asr(transfer, p))
    write_jsonl("fixtures/transfer/queries_noisy.jsonl", with_asr(transfer, p, p["noise_snr_db"]))


if __name__ == "__main__":
    main()
