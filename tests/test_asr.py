"""Speech in and out (issue 15): the recogniser on the committed WAV, the CLI's --wav / --say front door, WER."""
import io
import json
import wave

import numpy as np
import pytest

from rag.__main__ import main
from rag.eval.wer import cer, cer_chars, wer, wer_words, word_errors
from rag.io import read_jsonl
from rag.voice import asr
from rag.voice.tts import speak

from conftest import ROOT

WAV = ROOT / "fixtures" / "asr" / "saturday.wav"  # piper: "what time do you open on saturday" (fixtures/asr/README.md)
HEARD = "WHAT TIME DO YOU OPEN ON SATURDAY"
DOWN = "http://127.0.0.1:9"  # nothing listens there: the verified extractive fallback speaks
CLINIC_KB = str(ROOT / "fixtures" / "voice" / "kb")


def test_the_committed_wav_is_small_16k_mono():
    with wave.open(str(WAV)) as w:
        assert (w.getnchannels(), w.getsampwidth(), w.getframerate()) == (1, 2, 16000)
    assert WAV.stat().st_size < 100_000


def test_whisper_tiny_en_hears_the_question():
    t = asr.transcribe(WAV, "whisper-tiny.en")
    assert t.text == HEARD and t.engine == "whisper-tiny.en"
    assert t.audio_s == pytest.approx(1.9, abs=0.1)
    assert t.first_partial_ms is None and 0 < t.decode_ms < 10_000  # whole-utterance decoder: no partials


def test_any_rate_and_channel_count_is_read_as_16k_mono(tmp_path):
    """A 48 kHz stereo WAV (each sample repeated 3 times, both channels) decodes to the same 16 kHz audio length
    and the same transcript."""
    with wave.open(str(WAV)) as w:
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    loud = tmp_path / "48k-stereo.wav"
    with wave.open(str(loud), "wb") as w:
        w.setnchannels(2), w.setsampwidth(2), w.setframerate(48000)
        w.writeframes(np.repeat(np.repeat(pcm, 3)[:, None], 2, axis=1).astype("<i2").tobytes())
    audio = asr.load_audio(loud)
    assert audio.dtype == np.float32 and abs(len(audio) - len(pcm)) <= 16
    assert asr.transcribe(loud, "whisper-tiny.en").text == HEARD
    # a 16 kHz mono 16-bit WAV comes back sample for sample
    assert np.array_equal(np.rint(asr.load_audio(WAV) * 32768).astype(np.int16), pcm)


def test_bad_audio_and_engines_raise(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such audio file"):
        asr.transcribe(tmp_path / "none.wav", "whisper-tiny.en")
    (tmp_path / "text.wav").write_text("not audio")
    with pytest.raises(ValueError, match="not audio that PyAV can decode"):
        asr.load_audio(tmp_path / "text.wav")
    with pytest.raises(ValueError, match="unknown recogniser 'vosk'"):
        asr.transcribe(WAV, "vosk")


def test_transcripts_are_normalised_like_the_fixtures():
    assert asr.normalize_hyp(" What's open at 9 a.m., Saturday?") == "WHAT'S OPEN AT 9 A M SATURDAY"
    assert asr.normalize_hyp("'quoted' -- ") == "QUOTED"
    assert asr.normalize_hyp("서울에서 부산까지, 몇 km?") == "서울에서 부산까지 몇 KM"  # whisper-base's Korean stays
    assert asr.normalize_hyp("snake_case") == "SNAKE CASE"


def test_the_encoder_window_is_a_setting_and_long_audio_is_still_heard(tmp_path):
    """A 10 s and a 30 s window hear the committed question alike; 31 s of audio (beyond one window) goes through
    faster-whisper's seeking decoder and is heard whole; a window outside 1..30 s is refused."""
    assert asr.transcribe(WAV, "whisper-tiny.en", window_s=30).text == HEARD
    assert asr.transcribe(WAV, "whisper-tiny.en", window_s=10).text == HEARD
    with wave.open(str(WAV)) as w:
        pcm = w.readframes(w.getnframes())
    long = tmp_path / "long.wav"  # the question, 29 s of silence, the question again: two 30 s windows
    with wave.open(str(long), "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000)
        w.writeframes(pcm + b"\0\0" * 16000 * 29 + pcm)
    t = asr.transcribe(long, "whisper-tiny.en")
    assert t.audio_s > 30 and t.text == f"{HEARD} {HEARD}", t.text
    for bad in (0.5, 31):
        with pytest.raises(ValueError, match="window_s must be within 1..30"):
            asr.transcribe(WAV, "whisper-tiny.en", window_s=bad)


def test_cer_counts_characters_without_spaces_or_punctuation():
    assert cer_chars("서울 에서, 부산!") == list("서울에서부산")
    assert cer([("서울에서 부산까지", "서울애서부산 까지")]) == {"cer": 0.125, "errors": 1, "chars": 8}
    assert cer([("가나", "가나다라")]) == {"cer": 1.0, "errors": 2, "chars": 2}  # insertions can pass 1
    assert cer([]) == {"cer": 0.0, "errors": 0, "chars": 0}


def test_espeak_says_what_is_missing(tmp_path, monkeypatch):
    from rag.voice.speech import espeak

    with pytest.raises(ValueError, match="empty"):
        espeak("  ", tmp_path / "a.wav", "ko")
    monkeypatch.setenv("PATH", str(tmp_path))  # no espeak-ng on it
    with pytest.raises(RuntimeError, match="apt-get install -y espeak-ng"):
        espeak("안녕하세요", tmp_path / "a.wav", "ko")
    assert not (tmp_path / "a.wav").exists()


def test_wer_reads_number_words_and_digits_alike():
    assert wer_words("Nine a.m., um, twenty four?") == wer_words("9 A M UM 24") == ["9", "a", "m", "um", "24"]
    assert word_errors("a b c".split(), "a x c d".split()) == 2
    assert wer([("open at nine", "OPEN AT 9"), ("um refill", "REFILL")]) == {"wer": 0.2, "errors": 1, "words": 5}


def test_pocketsphinx_transcripts_are_the_fixtures():
    """The transcribe_engines stage's pocketsphinx rows equal the `transcribe` stage's asr (same audio, decoder)."""
    fixtures = {"clinic": "voice/queries.jsonl", "vet_clean": "transfer/queries_clean.jsonl",
                "vet_noisy": "transfer/queries_noisy.jsonl"}
    for name, path in fixtures.items():
        want = {r["id"]: r["asr"] for r in read_jsonl(ROOT / "fixtures" / path)}
        got = {r["id"]: r["asr"] for r in read_jsonl(ROOT / "fixtures" / "asr" / "pocketsphinx" / f"{name}.jsonl")}
        assert got == want, name


def test_speak_is_deterministic(tmp_path):
    a, b = speak("We open at 9 a.m.", tmp_path / "a.wav"), speak("We open at 9 a.m.", tmp_path / "b.wav")
    assert a.path.read_bytes() == b.path.read_bytes() and a.samprate == 22050
    assert 0.8 < a.audio_s < 3 and a.first_audio_ms <= a.synth_ms
    with pytest.raises(ValueError, match="empty"):
        speak("  ", tmp_path / "c.wav")


def test_ask_wav_answers_and_says_it(tmp_path, capsys):
    out_wav = tmp_path / "answer.wav"
    assert main(["ask", "--wav", str(WAV), "--kb", CLINIC_KB, "--llm-url", DOWN, "--cache-dir", str(tmp_path / "c"),
                 "--say", str(out_wav), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["asr"] == HEARD and out["asr_engine"] == "whisper-tiny.en" and out["asr_ms"] > 0
    assert out["source"] == "kb-hours" and "9 a.m." in out["say"] and "1 p.m." in out["say"]
    with wave.open(str(out_wav)) as w:
        assert (w.getnchannels(), w.getsampwidth(), w.getframerate()) == (1, 2, 22050)
        seconds = w.getnframes() / w.getframerate()
    assert seconds == pytest.approx(out["say_audio_s"], abs=0.01)
    assert 1.5 < seconds < 8  # "On Saturday we are open from 9 a.m. to 1 p.m." at speaking pace


def test_ask_wav_text_mode_and_errors(tmp_path, capsys):
    cache = ["--cache-dir", str(tmp_path / "c"), "--llm-url", DOWN]
    assert main(["ask", "--wav", str(WAV), "--kb", CLINIC_KB, *cache]) == 0
    assert f"heard: {HEARD} (whisper-tiny.en, " in capsys.readouterr().out
    assert main(["ask", "hello", "--wav", str(WAV), *cache]) == 2
    assert "one of the two" in capsys.readouterr().err
    (tmp_path / "x.wav").write_text("not audio")
    assert main(["ask", "--wav", str(tmp_path / "x.wav"), *cache]) == 2
    assert "not audio that PyAV can decode" in capsys.readouterr().err


def test_chat_wav_lines(tmp_path, monkeypatch, capsys):
    for var in ("RAG_MEMORY_URL", "RAG_MEMORY_ARCHIVE_URL", "RAG_CALLER_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr("sys.stdin", io.StringIO(f"{WAV}\n"))
    assert main(["chat", "--wav-lines", "--kb", CLINIC_KB, "--llm-url", DOWN, "--cache-dir", str(tmp_path / "c"),
                 "--json"]) == 0
    (turn,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert turn["asr"] == turn["question"] == HEARD and "9 a.m." in turn["say"]
