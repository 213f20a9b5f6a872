"""Stage `transcribe_engines` (frozen): the fixture questions spoken and transcribed by every recogniser.

The clinic questions (fixtures/voice/questions.jsonl) and the vet questions (fixtures/transfer/questions.jsonl)
are spoken as the `transcribe` stage speaks them (`rag.voice.speech.synthesize`: piper joe-us, sox to
``transcribe.samprate``; the vet set also with pink noise at ``transcribe.noise_snr_db``, `add_pink_noise`),
into a temporary folder (the audio is not kept: it is regenerated, byte for byte on one machine; piper's
onnxruntime arithmetic differs by a few samples between CPUs, which can flip a pocketsphinx word), then transcribed by every
engine of ``speech.engines`` (`rag.voice.asr.transcribe`). Writes fixtures/asr/<engine>/<set>.jsonl, one row a
question: ``{id, asr, audio_s, decode_ms, first_partial_ms}``, and the test WAV fixtures/asr/saturday.wav.
Needs the `voice` extra and sox. Run by hand:
    PYTHONPATH=. python stages/transcribe_engines.py
"""
import shutil
import tempfile
import time
from pathlib import Path

from common import ROOT, main, params
from rag.io import read_jsonl, write_jsonl
from rag.voice import asr
from rag.voice.speech import add_pink_noise, check_installed, synthesize

OUT = ROOT / "fixtures" / "asr"
SETS = {  # name: (questions, noisy)
    "clinic": ("fixtures/voice/questions.jsonl", False),
    "vet_clean": ("fixtures/transfer/questions.jsonl", False),
    "vet_noisy": ("fixtures/transfer/questions.jsonl", True),
}
TEST_WAV = (OUT / "saturday.wav", "what time do you open on saturday")


def speak_sets(p, folder: Path) -> dict[str, dict[str, Path]]:
    """``{set: {question id: WAV}}``: every question of `SETS` spoken into ``folder``."""
    t = p["transcribe"]
    wavs = {}
    for name, (src, noisy) in SETS.items():
        wavs[name] = {}
        for r in read_jsonl(ROOT / src, ["id", "spoken"]):
            wav = synthesize(r["spoken"], folder / f"{name}-{r['id']}.wav", t["samprate"])
            wavs[name][r["id"]] = add_pink_noise(wav, folder / f"{name}-{r['id']}-noisy.wav",
                                                 t["noise_snr_db"]) if noisy else wav
    return wavs


def run():
    p = params()
    s = p["speech"]
    check_installed(p["transcribe"]["tts_voice"])
    with tempfile.TemporaryDirectory() as tmp:
        wav, text = TEST_WAV
        synthesize(text, Path(tmp, "test.wav"), p["transcribe"]["samprate"])
        shutil.copyfile(Path(tmp, "test.wav"), wav)
        wavs = speak_sets(p, Path(tmp))
        for engine in s["engines"]:
            t0 = time.perf_counter()
            for name, by_id in wavs.items():
                rows = []
                for qid, path in by_id.items():
                    tr = asr.transcribe(path, engine, s["threads"], s["beam_size"], s["chunk_ms"], s["language"],
                                        window_s=s["window_s"])
                    rows.append({"id": qid, "asr": tr.text, "audio_s": tr.audio_s, "decode_ms": tr.decode_ms,
                                 "first_partial_ms": tr.first_partial_ms})
                write_jsonl(OUT / engine / f"{name}.jsonl", rows)
            print(f"{engine}: {time.perf_counter() - t0:.0f} s", flush=True)


main(run)
