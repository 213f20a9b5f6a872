"""Stage `transcribe` (frozen): add real recogniser output (`asr`) to the question fixtures.

Reads params.yaml `transcribe`; needs the `voice` extra and sox. Run by hand:
    PYTHONPATH=. python stages/transcribe.py
Writes one output per row of JOBS (questions in, questions + `asr` out, clean or with pink noise).
"""
from common import main, params
from rag.io import read_jsonl, write_jsonl
from rag.voice.speech import check_installed, transcribe_text

FIELDS = ["id", "spoken", "context", "relevant", "answerable", "facts"]
JOBS = [  # (questions, output, noisy: pink noise at params.yaml transcribe.noise_snr_db)
    ("fixtures/voice/questions.jsonl", "fixtures/voice/queries.jsonl", False),
    ("fixtures/transfer/questions.jsonl", "fixtures/transfer/queries_clean.jsonl", False),
    ("fixtures/transfer/questions.jsonl", "fixtures/transfer/queries_noisy.jsonl", True),
    ("fixtures/voice/near_miss.jsonl", "fixtures/voice/near_miss_queries.jsonl", False),
    ("fixtures/transfer/near_miss.jsonl", "fixtures/transfer/near_miss_queries_clean.jsonl", False),
    ("fixtures/transfer/near_miss.jsonl", "fixtures/transfer/near_miss_queries_noisy.jsonl", True),
    ("fixtures/dental/questions.jsonl", "fixtures/dental/queries.jsonl", False),
    ("fixtures/dental/near_miss.jsonl", "fixtures/dental/near_miss_queries.jsonl", False),
    ("fixtures/salon/questions.jsonl", "fixtures/salon/queries.jsonl", False),
    ("fixtures/salon/near_miss.jsonl", "fixtures/salon/near_miss_queries.jsonl", False),
]


def with_asr(rows, p, snr_db=None):
    """Rows with `asr` after `spoken`; FIELDS first, then any extra fields (near-miss `swap`, `near`)."""
    out = []
    for r in rows:
        asr = transcribe_text(r["spoken"], snr_db, p["samprate"], p["chunk_bytes"])
        out.append({"id": r["id"], "spoken": r["spoken"], "asr": asr, **{k: r[k] for k in FIELDS[2:]},
                    **{k: v for k, v in r.items() if k not in FIELDS}})
        print(f"{r['id']}{'' if snr_db is None else f' @{snr_db}dB'}: {asr}", flush=True)
    return out


def run():
    p = params()["transcribe"]
    check_installed(p["tts_voice"])
    for src, dst, noisy in JOBS:
        rows = read_jsonl(src, FIELDS)
        write_jsonl(dst, with_asr(rows, p, p["noise_snr_db"] if noisy else None))


if __name__ == "__main__":
    main(run)
