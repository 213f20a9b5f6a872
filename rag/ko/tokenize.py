"""Korean tokenizers for BM25: whitespace words, Kiwi content morphemes, character bigrams.

Korean attaches particles and endings to words (서울은 = 서울 + 은), so whitespace tokens rarely match
across sentences; morphemes (Kiwi, kiwipiepy; Lee 2024) or character n-grams recover the stems.
All tokenizers lower-case (Latin letters in Korean text) and return ``list[str]``; empty text gives ``[]``.
"""
from __future__ import annotations

import re
from functools import lru_cache
from typing import Callable, Iterable

_WORD = re.compile(r"\w+")

# Kiwi (Sejong-style) tags kept as content morphemes: nouns (NNG, NNP, NNB), verb and adjective stems,
# foreign words (SL), numbers (SN), roots (XR). Irregular stems carry a suffix (VV-I, VA-R): the base tag counts.
CONTENT_TAGS = frozenset({"NNG", "NNP", "NNB", "VV", "VA", "SL", "SN", "XR"})


def whitespace_tokens(text: str) -> list[str]:
    """Lower-cased whitespace-separated words, punctuation included (``"서울은 수도."`` -> ``["서울은", "수도."]``)."""
    return text.lower().split()


@lru_cache(maxsize=1)
def kiwi():
    """The process-wide ``kiwipiepy.Kiwi`` instance, built on first use (about 1-2 s, model from the
    ``kiwipiepy-model`` package; nothing is downloaded)."""
    from kiwipiepy import Kiwi

    return Kiwi()


def kiwi_version() -> str:
    """Version string of the morphological analyser, e.g. ``"kiwipiepy 0.24.1 (model 0.24.0, cong)"``."""
    import importlib.metadata as md

    import kiwipiepy

    try:
        model = md.version("kiwipiepy_model")
    except md.PackageNotFoundError:
        model = "unknown"
    return f"kiwipiepy {kiwipiepy.__version__} (model {model}, {kiwi().model_type})"


def _content(tokens) -> list[str]:
    return [t.form.lower() for t in tokens if t.tag.split("-")[0] in CONTENT_TAGS]


def kiwi_tokens(text: str) -> list[str]:
    """Content morphemes of ``text`` by Kiwi (tags in ``CONTENT_TAGS``), lower-cased, in text order.

    ``"서울은 대한민국의 수도이다."`` -> ``["서울", "대한민국", "수도"]``; verbs give their stem (먹었다 -> 먹).
    """
    if not text.strip():
        return []
    return _content(kiwi().tokenize(text))


def kiwi_tokens_batch(texts: Iterable[str]) -> list[list[str]]:
    """``kiwi_tokens`` for many texts at once (same output, one Kiwi call)."""
    texts = list(texts)
    out: list[list[str]] = [[] for _ in texts]
    nonempty = [i for i, t in enumerate(texts) if t.strip()]
    for i, tokens in zip(nonempty, kiwi().tokenize([texts[i] for i in nonempty])):
        out[i] = _content(tokens)
    return out


def char_bigrams(text: str) -> list[str]:
    """Character bigrams inside each ``\\w+`` word (lower-cased); a one-character word stays a unigram.

    ``"서울은 곧"`` -> ``["서울", "울은", "곧"]``. Punctuation and spaces never enter a bigram.
    """
    out: list[str] = []
    for word in _WORD.findall(text.lower()):
        if len(word) == 1:
            out.append(word)
        else:
            out.extend(word[i : i + 2] for i in range(len(word) - 1))
    return out


TOKENIZERS: dict[str, Callable[[str], list[str]]] = {
    "whitespace": whitespace_tokens,
    "kiwi": kiwi_tokens,
    "bigram": char_bigrams,
}


def tokenizer_version(name: str) -> str:
    """Human-readable name + version of a tokenizer in ``TOKENIZERS`` (KeyError for an unknown name)."""
    if name not in TOKENIZERS:
        raise KeyError(f"unknown tokenizer {name!r}; known: {sorted(TOKENIZERS)}")
    if name == "kiwi":
        return f"kiwi content morphemes ({'/'.join(sorted(CONTENT_TAGS))}), {kiwi_version()}"
    if name == "bigram":
        return "character bigrams within \\w+ words (rag.ko.tokenize)"
    return "lower-cased whitespace split (rag.ko.tokenize)"
