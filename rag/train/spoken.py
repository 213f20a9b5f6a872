"""More spoken training questions: each training question's typed text spoken and recognised by the project's
TTS -> ASR chain (`rag.voice.speech.transcribe_text`: piper joe-us, optionally pink noise, pocketsphinx), as the
frozen ``transcribe`` stage makes the fixtures' ``asr`` (issue 14: "make them with the frozen TTS->ASR stage from
the training half"). Needs the ``voice`` extra and sox; one recogniser process per worker.
"""
from __future__ import annotations

from functools import partial
from multiprocessing import Pool
from typing import Callable, Mapping, Sequence

from rag.voice.speech import require_sox

KINDS = {"clean": False, "noisy": True}  # spoken form -> pink noise added


def pocketsphinx_heard(text: str, snr_db: float | None, samprate: int = 16000, chunk_bytes: int = 3200) -> str:
    """``text`` spoken (piper joe-us), with pink noise at ``snr_db`` dB SNR unless None, and recognised by
    pocketsphinx (`rag.voice.speech.transcribe_text`), lower-cased as HeySQuAD's transcripts are."""
    from rag.voice.speech import transcribe_text

    return transcribe_text(text, snr_db, samprate, chunk_bytes).lower()


def _heard(job: tuple[Callable[[str, float | None], str], str, float | None]) -> str:
    transcriber, text, snr_db = job
    return transcriber(text, snr_db)


def spoken_forms(queries: Sequence[Mapping], kinds: Sequence[str], snr_db: float, samprate: int = 16000,
                 chunk_bytes: int = 3200, processes: int = 2,
                 progress: Callable[[int, int], None] | None = None,
                 transcriber: Callable[[str, float | None], str] | None = None) -> list[dict]:
    """``queries`` (rows with ``id`` and ``typed``) each with one more field per kind of ``kinds``,
    ``"pocketsphinx_<kind>"``: the typed question spoken and recognised (`pocketsphinx_heard` at ``samprate`` Hz,
    ``chunk_bytes`` a streaming chunk, unless another picklable ``transcriber(text, snr_db)`` is given); ``clean`` as
    spoken, ``noisy`` with pink noise at ``snr_db`` dB SNR. ``processes`` recognisers run at once; the result does not
    depend on them (piper, sox -R and pocketsphinx are deterministic). ``progress(done, total)`` is called every 50
    transcripts and at the end. Raises ValueError for an unknown kind; RuntimeError /
    rag.voice.asr.EngineUnavailable when sox (before any work), piper or pocketsphinx is missing."""
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        raise ValueError(f"unknown spoken kind(s) {bad}; known: {sorted(KINDS)}")
    if transcriber is None:
        require_sox()
        transcriber = partial(pocketsphinx_heard, samprate=samprate, chunk_bytes=chunk_bytes)
    jobs = [(transcriber, q["typed"], snr_db if KINDS[k] else None) for k in kinds for q in queries]
    heard: list[str] = []
    with Pool(processes) as pool:
        for text in pool.imap(_heard, jobs, chunksize=4):
            heard.append(text)
            if progress is not None and (len(heard) % 50 == 0 or len(heard) == len(jobs)):
                progress(len(heard), len(jobs))
    n = len(queries)
    return [{**q, **{f"pocketsphinx_{k}": heard[i * n + j] for i, k in enumerate(kinds)}}
            for j, q in enumerate(queries)]
