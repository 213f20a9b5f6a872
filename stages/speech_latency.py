"""Stage speech_latency (issue 15): end of speech -> first reply audio, per step, over the clinic questions.

Each question of ``speech.latency_questions`` is spoken by piper (joe-us, deterministic; `rag.voice.tts.speak`) into a
temporary WAV; then, timed one after another as a call would run them once the caller stops speaking:
1. ``asr_ms``: the recogniser (``speech.engine``) decodes the whole utterance (`rag.voice.asr.transcribe`);
2. ``chain_ms``: the turn on the clinic KB (`rag.voice.pipeline.answer_question`: rewrite, embed, search, gate, the
   LLM within its schema, verify, the extractive fallback), of which ``llm_first_token_ms`` and ``llm_ms`` are the
   model's (the default ``llm.local_model`` on a local llama.cpp server, started once before the first question);
3. ``tts_first_audio_ms``: piper's first chunk of the reply (one sentence: when a streaming player can start).
``total_ms`` = 1 + 2 + 3 (a reply cannot start before the verifier has read the whole answer). Models are loaded
and the server warmed by one untimed question first. Writes metrics/voice/speech_latency.json: p50 / p95 of each
step and every question's row. Wall-clock on 2 shared cores: quote ratios and say how loaded the machine was.
"""
import os
import tempfile
import time

from common import GATE_PATH, ROOT, VOICE_METRICS, main, params
from rag import config
from rag.bench.latency import summary
from rag.io import read_jsonl, write_json
from rag.retrieval.kb_cache import open_kb
from rag.voice.asr import transcribe
from rag.voice.gate import Gate
from rag.voice.pipeline import answer_question, check_gate, llm_url
from rag.voice.quarantine import allowed
from rag.voice.tts import speak

STEPS = ("asr_ms", "chain_ms", "llm_first_token_ms", "llm_ms", "tts_first_audio_ms", "total_ms")


def turn(wav: str, p: dict, gate: Gate, url: str | None, kb, reply_wav: str) -> dict:
    """One spoken question from the end of its audio to the reply's first audio: the times of `STEPS` (ms)."""
    s = p["speech"]
    heard = transcribe(wav, s["engine"], s["threads"], s["beam_size"], s["chunk_ms"], s["language"],
                       window_s=s["window_s"])
    t0 = time.perf_counter()
    final, row = answer_question(heard.text, p, gate, url, kb)
    chain_ms = (time.perf_counter() - t0) * 1000
    spoken = speak(final["say"], reply_wav)
    return {"heard": heard.text, "status": final["status"], "reason": final["reason"], "say": final["say"],
            "asr_ms": heard.decode_ms, "chain_ms": round(chain_ms, 1),
            "llm_first_token_ms": row["first_token_ms"], "llm_ms": row["total_ms"],
            "tts_first_audio_ms": spoken.first_audio_ms,
            "total_ms": round(heard.decode_ms + chain_ms + spoken.first_audio_ms, 1)}


def run():
    p = params()
    gate = Gate.load(GATE_PATH)
    check_gate(gate, p)
    questions = read_jsonl(ROOT / p["speech"]["latency_questions"], required=("id", "spoken"))
    with tempfile.TemporaryDirectory() as tmp, llm_url(p, print) as url:
        kb = open_kb(ROOT / p["voice"]["kb"], config.hybrid_config(p), tmp, allow_instructions=allowed(p))
        wavs = {}
        for q in questions:  # the caller's audio, made before any timing
            wavs[q["id"]] = os.path.join(tmp, f"{q['id']}.wav")
            speak(q["spoken"], wavs[q["id"]])
        reply = os.path.join(tmp, "reply.wav")
        turn(wavs[questions[0]["id"]], p, gate, url, kb, reply)  # warm-up: models loaded, server's first call
        rows = [{"id": q["id"], **turn(wavs[q["id"]], p, gate, url, kb, reply)} for q in questions]
    out = {"engine": p["speech"]["engine"], "llm": p["llm"]["local_model"] if url else "down",
           "questions": len(rows), "load_average_1min_after": round(os.getloadavg()[0], 2),
           **{k: summary([r[k] for r in rows if r[k] is not None]) for k in STEPS}, "rows": rows}
    write_json(VOICE_METRICS / "speech_latency.json", out)
    print({k: out[k] for k in STEPS}, "load average", out["load_average_1min_after"])


main(run)
