"""Sound-alike keys for ASR-aware matching: a recogniser swaps words for similar-sounding ones
("guise" for "guys", "orifyl" for "a refill"), which share a phonetic key though not a spelling.

Encoders are jellyfish's (1.x): ``metaphone`` (Philips 1990; Double Metaphone is not in jellyfish),
``nysiis`` and ``mrc`` (match rating codex); ``none`` keeps the word (plain character n-grams). ``phonetic_tokens`` keys each word; ``phonetic_ngrams``
takes character n-grams of the keys run together, so a word boundary the recogniser moved
("a refill" -> "orifyl") still shares most grams. Either is a BM25 tokenizer (`rag.retrieval.indexes.BM25Index`).
"""
from __future__ import annotations

import functools
from typing import Callable, Iterable

import jellyfish

from rag.retrieval.indexes import word_tokens

ENCODERS: dict[str, Callable[[str], str]] = {
    "metaphone": jellyfish.metaphone,
    "nysiis": jellyfish.nysiis,
    "mrc": jellyfish.match_rating_codex,
    "none": str,  # the word itself: plain character n-grams (spelling, not sound), a control
}


@functools.lru_cache(maxsize=200_000)
def phonetic_key(word: str, encoder: str = "metaphone") -> str:
    """The ``encoder`` key of one lower-case word token; a word without letters ("9", "1990") or
    with an empty key is its own key (digits must not all collapse to one key).
    Raises ValueError for an unknown encoder."""
    if encoder not in ENCODERS:
        raise ValueError(f"unknown phonetic encoder {encoder!r}; expected one of {tuple(ENCODERS)}")
    if not any(c.isalpha() for c in word):
        return word
    try:
        key = ENCODERS[encoder](word)
    except ValueError:  # match_rating_codex refuses some non-alphabetic input
        key = ""
    return key.lower() or word


def phonetic_tokens(text: str, stopwords: Iterable[str] = (), min_len: int = 1,
                    encoder: str = "metaphone") -> list[str]:
    """One key per word token of `rag.retrieval.indexes.word_tokens` (stopwords dropped before keying)."""
    return [phonetic_key(t, encoder) for t in word_tokens(text, stopwords, min_len)]


def phonetic_ngrams(text: str, n: int = 3, stopwords: Iterable[str] = (), min_len: int = 1,
                    encoder: str = "metaphone") -> list[str]:
    """Character ``n``-grams of the word keys joined with no separator, in order; a text whose
    joined keys are shorter than ``n`` gives that one short string. Raises ValueError for n < 1."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    stream = "".join(phonetic_tokens(text, stopwords, min_len, encoder))
    if len(stream) <= n:
        return [stream] if stream else []
    return [stream[i:i + n] for i in range(len(stream) - n + 1)]


def tokenizer(encoder: str = "metaphone", ngram: int = 0, stopwords: Iterable[str] = (),
              min_len: int = 1) -> Callable[[str], list[str]]:
    """A BM25 tokenizer: whole-word keys for ``ngram = 0``, else ``phonetic_ngrams`` of size ``ngram``."""
    stop = frozenset(stopwords)
    if encoder not in ENCODERS:
        raise ValueError(f"unknown phonetic encoder {encoder!r}; expected one of {tuple(ENCODERS)}")
    if ngram < 0:
        raise ValueError(f"ngram must be >= 0, got {ngram}")
    if ngram == 0:
        return functools.partial(phonetic_tokens, stopwords=stop, min_len=min_len, encoder=encoder)
    return functools.partial(phonetic_ngrams, n=ngram, stopwords=stop, min_len=min_len, encoder=encoder)
