"""Word (and character) error rate of a transcript against what was said.

Both sides are put in the same form first (`wer_words`): `rag.voice.asr.normalize_hyp` (punctuation removed
except in-word apostrophes), lower case, and number words read as digits with `rag.voice.numbers` ("nine a.m."
and Whisper's "9 a.m." are both ``9 a m``; "twenty four" is one word, ``24``). Fillers ("um") are kept: a
recogniser that drops one the speaker said makes a deletion.
"""
from __future__ import annotations

from typing import Iterable, Sequence

from rag.voice import numbers
from rag.voice.asr import normalize_hyp
from rag.voice.rewrite import DEFAULT_RULES, RewriteRules


def wer_words(text: str, rules: RewriteRules = DEFAULT_RULES) -> list[str]:
    """``text`` as the words WER compares (see the module docstring); ``rules``: the number words."""
    return numbers.to_words(numbers.read_numbers(normalize_hyp(text).lower().split(), rules))


def word_errors(ref: Sequence[str], hyp: Sequence[str]) -> int:
    """Substitutions + deletions + insertions turning ``ref`` into ``hyp`` (Levenshtein distance over words)."""
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[-1]


def wer(pairs: Iterable[tuple[str, str]], rules: RewriteRules = DEFAULT_RULES) -> dict:
    """``{wer, errors, words}`` over ``(said, heard)`` pairs: word errors summed over the pairs / words said
    (`wer_words` on both sides); wer 0.0 when nothing was said."""
    errors = words = 0
    for said, heard in pairs:
        ref = wer_words(said, rules)
        errors += word_errors(ref, wer_words(heard, rules))
        words += len(ref)
    return {"wer": round(errors / words, 6) if words else 0.0, "errors": errors, "words": words}


def cer_chars(text: str) -> list[str]:
    """``text`` as the characters CER compares: `normalize_hyp` (punctuation removed, letters of any script and
    digits kept), lower case, spaces dropped (Korean spacing varies between writers and recognisers)."""
    return [c for c in normalize_hyp(text).lower() if not c.isspace()]


def cer(pairs: Iterable[tuple[str, str]]) -> dict:
    """``{cer, errors, chars}`` over ``(said, heard)`` pairs: character errors (Levenshtein over `cer_chars`)
    summed over the pairs / characters said, the usual measure for Korean, whose words are not a recogniser's
    unit; can exceed 1 when a recogniser writes more than was said. 0.0 when nothing was said."""
    errors = chars = 0
    for said, heard in pairs:
        ref = cer_chars(said)
        errors += word_errors(ref, cer_chars(heard))
        chars += len(ref)
    return {"cer": round(errors / chars, 6) if chars else 0.0, "errors": errors, "chars": chars}
