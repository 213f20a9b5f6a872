"""Turn a speech-recogniser transcript into a search query.

Rules (all lists are data, set from params.yaml by the stages):
1. Unicode-normalise (`rag.io.normalise_text`: NFKC, NFC for Hangul; full-width "ｆｌｕ" -> "flu"), lower-case,
   keep word characters only (apostrophes vanish: "sunday's" -> "sundays");
2. drop fillers (single words or phrases such as "o k"), again until none is left ("o um k" -> "");
3. number words to digits as people say them (`rag.voice.numbers`): "twenty four" -> "24", "a hundred and five" ->
   "105", "one eighty nine" -> "189", "nineteen ninety" -> "1990", a clock time as hour and minutes
   ("three thirty", "half past three" -> "3 30", the words of a written "3:30"), a digit run as a phone
   number ("five five five oh one six two" -> "555 0162"; "oh" is a filler only inside a digit run read as
   one: "twenty five oh six" -> "25 6");
4. a follow-up ("and what about sunday") with a context question is resolved against the
   rewritten context: a named weekday replaces the context's weekday (likewise a term of another
   swap class, such as a service, or a pair the KB contrasts: `contrast_pairs`), anything else is
   appended.
"""
from __future__ import annotations

import itertools
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterable

from rag.voice import numbers
from rag.io import normalise_text
from rag.voice.numbers import Number

_NONWORD = re.compile(r"[^\w\s]|_")


@dataclass(frozen=True)
class RewriteRules:
    """The data the rewrite follows. Fillers and openers may hold several words ("o k")."""

    fillers: tuple[str, ...] = (
        "um", "uh", "oh", "er", "ah", "like", "okay", "ok", "o k", "hi", "hello", "so", "well", "ohi",
    )
    units: dict[str, int] = field(default_factory=lambda: {w: i for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
        "fifteen sixteen seventeen eighteen nineteen".split())})
    tens: dict[str, int] = field(default_factory=lambda: {
        "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50,
        "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90})
    openers: tuple[str, ...] = (
        "and how about", "and what about", "what about on", "what about", "how about",
        "and on", "and for", "same for",
    )
    weekdays: tuple[str, ...] = (
        "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday",
        "weekday", "weekend", "holiday",
    )
    # Number words beyond units and tens (rag.voice.numbers): scales (a scale < 1000 multiplies: "two hundred";
    # >= 1000 closes a group: "two thousand five"), articles counting as one before a scale ("a hundred"),
    # joiners after a scale ("a hundred and five"), clock fractions in minutes with their past / to words
    # ("quarter to eight" -> 7:45), zero words (0 only between digit words: "five oh one").
    scales: dict[str, int] = field(default_factory=lambda: {"hundred": 100, "thousand": 1000})
    articles: tuple[str, ...] = ("a",)
    joiners: tuple[str, ...] = ("and",)
    fractions: dict[str, int] = field(default_factory=lambda: {"quarter": 15, "half": 30})
    past_words: tuple[str, ...] = ("past", "after")
    to_words: tuple[str, ...] = ("to", "till")
    zero_words: tuple[str, ...] = ("oh",)
    # Other classes of swappable terms (e.g. services: "flu shot", "blood test"): a follow-up naming
    # one ("and what about a blood test") replaces the context's term of the same class.
    swap_classes: tuple[tuple[str, ...], ...] = ()

    def __post_init__(self):
        for name, table in (("units", self.units), ("tens", self.tens), ("scales", self.scales),
                            ("fractions", self.fractions)):
            bad = {w: v for w, v in table.items() if isinstance(v, bool) or not isinstance(v, int) or v < 0}
            if bad:
                raise ValueError(f"rewrite.{name} must map words to whole numbers >= 0, got {bad!r}")
        if any(v < 2 for v in self.scales.values()):
            raise ValueError(f"rewrite.scales must be >= 2, got {dict(self.scales)!r}")
        if any(not 0 < v < 60 for v in self.fractions.values()):
            raise ValueError(f"rewrite.fractions must be minutes in 1..59, got {dict(self.fractions)!r}")


DEFAULT_RULES = RewriteRules()


def _words(text: str) -> list[str]:
    text = normalise_text(text)
    return _NONWORD.sub(lambda m: "" if m.group() == "'" else " ", text.lower().replace("’", "'")).split()


def _drop_phrases(words: list[str], phrases: tuple[str, ...], keep: set[int] = frozenset()) -> list[str]:
    """``words`` without the ``phrases``; a phrase covering an index in ``keep`` is not dropped."""
    seqs = sorted((p.split() for p in phrases), key=len, reverse=True)
    out, i = [], 0
    while i < len(words):
        for s in seqs:
            if words[i:i + len(s)] == s and not keep.intersection(range(i, i + len(s))):
                i += len(s)
                break
        else:
            out.append(words[i])
            i += 1
    return out


def weekday_of(word: str, rules: RewriteRules = DEFAULT_RULES) -> str | None:
    """The weekday a word names, accepting plurals and possessives ("saturdays" -> "saturday")."""
    for day in rules.weekdays:
        if word in (day, day + "s", day + "s'"):
            return day
    return None


def normalise_parts(text: str, rules: RewriteRules = DEFAULT_RULES) -> list[str | Number]:
    """Rules 1-3 with each spoken number kept whole, as a `rag.voice.numbers.Number` (a clock time stays one).

    >>> normalise_parts("Um, quarter to EIGHT?")
    [Number(value=7, minutes=45, digits=None)]
    """
    words = _words(text)
    while True:  # dropping a filler can make another ("o um k" -> "o k") or end a digit run: drop until none is left
        fewer = _drop_phrases(words, rules.fillers, numbers.kept_zeros(words, rules))
        if fewer == words:
            break
        words = fewer
    # A zero word kept for a digit run that another reading took first ("twenty five oh six": 25, "oh", 6) is a
    # filler after all; dropping it keeps the rewrite idempotent (tests/test_properties.py).
    return [p for p in numbers.read_numbers(words, rules) if not (isinstance(p, str) and p in rules.fillers)]


def normalise(text: str, rules: RewriteRules = DEFAULT_RULES) -> list[str]:
    """Rules 1-3: the transcript's words, lower-case, fillers dropped, number words as digits.

    >>> normalise("Oh, a hundred and five dollars at three thirty? Call five five five oh one six two")
    ['105', 'dollars', 'at', '3', '30', 'call', '555', '0162']
    """
    return numbers.to_words(normalise_parts(text, rules))


def split_follow_up(words: list[str], rules: RewriteRules = DEFAULT_RULES) -> list[str] | None:
    """If ``words`` start with a follow-up opener, the words after it (maybe []); else None."""
    for opener in sorted((o.split() for o in rules.openers), key=len, reverse=True):
        if words[:len(opener)] == opener:
            return words[len(opener):]
    return None


def rewrite(asr_text: str, context: str | None = None, rules: RewriteRules = DEFAULT_RULES) -> str:
    """Rewrite a transcript into a search query (see the module docstring for the rules).

    >>> rewrite("O K AND WHAT ABOUT SUNDAY", "OHI WHAT TIME DO YOU GUISE OPEN ON SATURDAY")
    'what time do you guise open on sunday'

    ``context`` is the transcript (or rewritten query) of the question a follow-up leans on;
    without one, a follow-up is returned as normalised text.
    """
    words = normalise(asr_text, rules)
    tail = split_follow_up(words, rules)
    if tail is None or not context:
        return " ".join(words)
    return " ".join(merge_follow_up(tail, normalise(context, rules), rules))


def merge_follow_up(tail: list[str], base: list[str], rules: RewriteRules = DEFAULT_RULES) -> list[str]:
    """Rule 4 on normalised words: the follow-up's ``tail`` (what it says after its opener) against the earlier
    question ``base``. A weekday in the tail replaces the base's weekdays; else a term of a swap class
    (`RewriteRules.swap_classes`) replaces the base's term of the same class; else the tail is appended.

    >>> merge_follow_up(["for", "cats"], "boarding for a dog costs".split(), RewriteRules(swap_classes=(("cat", "dog"),)))
    ['boarding', 'for', 'a', 'cat', 'costs']
    """
    base = list(base)
    days_in_tail = [d for d in (weekday_of(w, rules) for w in tail) if d]
    base_day_at = [i for i, w in enumerate(base) if weekday_of(w, rules)]
    if days_in_tail and base_day_at:
        for i in base_day_at:
            base[i] = days_in_tail[0]
        return base
    for terms in rules.swap_classes:
        new, old = _find_term(tail, terms), _find_term(base, terms)
        if new and old and new[2] != old[2]:
            return base[:old[0]] + new[2].split() + base[old[1]:]
    return base + list(tail)


def _find_term(words: list[str], terms: tuple[str, ...]) -> tuple[int, int, str] | None:
    """First (start, end, term) of ``terms`` in ``words``; the last word may be plural."""
    for i in range(len(words)):
        for term in sorted(terms, key=lambda t: -len(t.split())):
            t = term.split()
            got = words[i:i + len(t)]
            if len(got) == len(t) and got[:-1] == t[:-1] and got[-1] in (t[-1], t[-1] + "s"):
                return i, i + len(t), term
    return None


def contrast_pairs(sentences: Iterable[str], rules: RewriteRules = DEFAULT_RULES) -> tuple[tuple[str, str], ...]:
    """Word pairs a knowledge base contrasts, as swap classes for follow-ups (rule 4).

    Two sentences that, normalised (`normalise`), have the same length and differ in exactly one word
    where neither side holds a digit ("A rabies shot for a dog costs $35." / "A rabies shot for a cat
    costs $30.") give that pair, ("cat", "dog"): "and for cats?" after a dog question then replaces
    the dog instead of appending. Pairs of letters-only words, weekdays left out (rule 4 swaps those
    already); sorted, each once. Linear in the number of words: each sentence is filed once per word
    position under its other words (digits masked), and words filed under the same key pair up.
    """
    slots: dict[tuple, set[str]] = defaultdict(set)
    for s in dict.fromkeys(sentences):
        words = ["#" if any(c.isdigit() for c in w) else w for w in normalise(s, rules)]
        for i, w in enumerate(words):
            if w.isalpha() and not weekday_of(w, rules):
                slots[(i, *words[:i], *words[i + 1:])].add(w)
    return tuple(sorted({pair for found in slots.values() for pair in itertools.combinations(sorted(found), 2)}))
