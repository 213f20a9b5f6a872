"""Numbers as people say them: number words in a transcript's word list read as digits.

Pure, and every word table is data: the caller's `rag.voice.rewrite.RewriteRules` (params.yaml ``rewrite``)
gives ``units`` (zero..nineteen), ``tens`` (twenty..ninety), ``scales`` (hundred, thousand), ``articles``
("*a* hundred"), ``joiners`` ("hundred *and* five"), ``fractions`` (quarter, half, as minutes),
``past_words`` / ``to_words`` and ``zero_words`` ("oh": a 0 only inside a run of digits).

At each word the first reading that fits wins:

1. clock fraction, ``[a] FRACTION PAST|TO HOUR`` (HOUR a units word or digits without a leading zero, 1..12:
   the "01" of a digit run is no hour): a clock time.
   "half past eight" 8:30, "quarter past nine" 9:15, "quarter to eight" 7:45, "quarter to one" 12:45.
2. digit run, two or more digit words (0..9), a zero word counting as 0 between two of them: the digit
   string, seven digits split 3 + 4 like a phone number. "five five five oh one six two" 555 0162.
   A digit right before a scale word is left to it ("one one hundred eighteen" 1, 118).
3. pair, ``A BC``: A a units word 1..19 or a tens word, BC a teen or a tens word with an optional digit
   1..9, and no scale word after BC. A clock time when A <= 12 and BC < 60 ("three thirty" 3:30,
   "eight fifteen" 8:15), else A * 100 + BC ("one eighty nine" 189, "nineteen ninety" 1990,
   "twenty twenty four" 2024).
4. cardinal: tens and units added ("twenty four" 24, "one" 1), a scale below 1000 multiplying the words
   before it (hundred), one of 1000 or more closing them (thousand), an article before a scale counting
   as one, a joiner allowed after a scale ("a hundred and five" 105, "one hundred five" 105,
   "two thousand" 2000, "nineteen hundred" 1900). Words after a scale that are followed by a scale
   that could not apply start a new number ("two thousand and two thousand and seven" 2000, "and",
   2007; "one hundred five hundred" 100, 500).

Anything else stays a word: "a" alone stays "a", "oh" outside a digit run stays "oh". Ambiguous phrases
are read the first way that fits: "five twenty minutes" is the time 5:20 (not 5 to 20), "fifteen
twenty" is 1520, "two fifty" is 2:50 (not $2.50 or 250).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:  # rag.voice.rewrite imports this module
    from rag.voice.rewrite import RewriteRules

Parts = list["str | Number"]


@dataclass(frozen=True)
class Number:
    """A number read from words.

    value: the number, or the hour of a clock time; minutes: a clock time's minutes (None for a plain
    number); digits: the digit string of a digit run, leading zeros kept (None otherwise).
    """

    value: int
    minutes: int | None = None
    digits: str | None = None

    def tokens(self, clock_sep: str | None = None) -> list[str]:
        """The words this number is written as.

        >>> Number(189).tokens()
        ['189']
        >>> Number(7, minutes=45).tokens(), Number(7, minutes=45).tokens("h")
        (['7', '45'], ['7h45'])
        >>> Number(5550162, digits="5550162").tokens()
        ['555', '0162']

        A clock time is two words, hour and two-digit minutes, the words ``\\w+`` tokenisation (BM25)
        finds in a written "7:45 a.m.", or one word joined by ``clock_sep`` when given. A digit run of 7
        digits is two words (3 + 4), any other run one word.
        """
        if self.minutes is not None:
            hh, mm = str(self.value), f"{self.minutes:02d}"
            return [f"{hh}{clock_sep}{mm}"] if clock_sep is not None else [hh, mm]
        if self.digits is not None:
            return [self.digits[:3], self.digits[3:]] if len(self.digits) == 7 else [self.digits]
        return [str(self.value)]


def _digit(w: str | None, rules: RewriteRules) -> int | None:
    v = rules.units.get(w) if w is not None else None
    return v if v is not None and 0 <= v <= 9 else None


def _at(words: Sequence[str], i: int) -> str | None:
    return words[i] if 0 <= i < len(words) else None


def _hour(w: str | None, rules: RewriteRules) -> int | None:
    if w is None:
        return None
    v = rules.units.get(w)
    if v is None and w.isascii() and w.isdigit() and not w.startswith("0"):  # "01" is a digit run's, not an hour
        v = int(w)
    return v if v is not None and 1 <= v <= 12 else None


def _clock_fraction(words: Sequence[str], i: int, rules: RewriteRules) -> tuple[Number, int] | None:
    j = i + 1 if words[i] in rules.articles else i
    minutes, direction, hour = rules.fractions.get(_at(words, j)), _at(words, j + 1), _hour(_at(words, j + 2), rules)
    if minutes is None or hour is None:
        return None
    if direction in rules.past_words:
        return Number(hour, minutes=minutes), j + 3
    if direction in rules.to_words:
        return Number(hour - 1 if hour > 1 else 12, minutes=60 - minutes), j + 3
    return None


def _run(words: Sequence[str], i: int, rules: RewriteRules) -> tuple[str, int]:
    """The digits of the digit run starting at ``i`` (a digit word) and the index after its last digit
    word; a digit right before a scale word is left to the scale ("one one hundred": "1", then 100)."""
    digits, pending, end, k = "", "", i, i
    while k < len(words):
        d = _digit(words[k], rules)
        if d is not None:
            digits, pending, end = digits + pending + str(d), "", k + 1
        elif words[k] in rules.zero_words and digits:
            pending += "0"
        else:
            break
        k += 1
    if _at(words, end) in rules.scales:  # "one one hundred": the last digit is the scale's
        end, digits = end - 1, digits[:-1]
        while end > i and _digit(words[end - 1], rules) is None:  # and so are zero words before it
            end, digits = end - 1, digits[:-1]
    return digits, end


def _digit_run(words: Sequence[str], i: int, rules: RewriteRules) -> tuple[Number, int] | None:
    if _digit(words[i], rules) is None:
        return None
    digits, end = _run(words, i, rules)
    if end - i < 2:
        return None
    return Number(int(digits), digits=digits), end


def _two_digit(words: Sequence[str], i: int, rules: RewriteRules) -> tuple[int, int] | None:
    """``BC`` of a pair at ``i``: a teen (10..19) or a tens word with an optional digit 1..9."""
    w = _at(words, i)
    if w in rules.tens:
        d = _digit(_at(words, i + 1), rules)
        return (rules.tens[w] + d, i + 2) if d else (rules.tens[w], i + 1)
    v = rules.units.get(w) if w is not None else None
    return (v, i + 1) if v is not None and 10 <= v <= 19 else None


def _pair(words: Sequence[str], i: int, rules: RewriteRules) -> tuple[Number, int] | None:
    a = rules.units.get(words[i], rules.tens.get(words[i]))
    if a is None or a < 1:
        return None
    bc = _two_digit(words, i + 1, rules)
    if bc is None or _at(words, bc[1]) in rules.scales:
        return None
    b, end = bc
    return (Number(a, minutes=b) if a <= 12 and b < 60 else Number(a * 100 + b)), end


def _cardinal(words: Sequence[str], i: int, rules: RewriteRules) -> tuple[Number, int] | None:
    def small_end(k: int) -> int:  # index after the tens/units part starting at k
        return k + 2 if words[k] in rules.tens and _digit(_at(words, k + 1), rules) else k + 1

    total, group, last, closed_by, j = 0, 0, None, None, i
    if words[i] in rules.articles and _at(words, i + 1) in rules.scales:
        group, last, j = 1, "unit", i + 1
    while j < len(words):
        w = words[j]
        nxt = _at(words, j + 1)
        if last == "scale" and w in rules.joiners and (nxt in rules.units or nxt in rules.tens):
            j += 1
            w = words[j]
        if last == "scale" and (w in rules.units or w in rules.tens):
            after = rules.scales.get(_at(words, small_end(j)) or "")
            if after and (group if after < 1000 else closed_by and after >= closed_by):
                # a scale that could not apply follows: "two thousand two thousand", "one hundred five hundred"
                if words[j - 1] in rules.joiners:
                    j -= 1
                break
        if last in (None, "scale") and w in rules.tens:
            group += rules.tens[w]
            d = _digit(_at(words, j + 1), rules)
            last, j = ("unit", j + 2) if d else ("tens", j + 1)
            group += d or 0
        elif last in (None, "scale") and w in rules.units:
            group, last, j = group + rules.units[w], "unit", j + 1
        elif w in rules.scales and (last != "scale" or group and rules.scales[w] >= 1000):
            s, g = rules.scales[w], group or 1
            if s < 1000 and g < s:
                group = g * s
            elif s >= 1000 and g < s and (closed_by is None or s < closed_by):
                total, group, closed_by = total + g * s, 0, s
            else:
                break
            last, j = "scale", j + 1
        else:
            break
    if j == i:
        return None
    return Number(total + group), j


_READINGS = (_clock_fraction, _digit_run, _pair, _cardinal)


def read_numbers(words: Sequence[str], rules: RewriteRules) -> Parts:
    """``words`` with each spoken number replaced by a `Number` (see the module docstring for the readings).

    >>> from rag.voice.rewrite import DEFAULT_RULES as R
    >>> read_numbers("a hundred and five dollars".split(), R)
    [Number(value=105, minutes=None, digits=None), 'dollars']
    >>> read_numbers("open at quarter to eight".split(), R)
    ['open', 'at', Number(value=7, minutes=45, digits=None)]

    ``words`` are lower-case words (`rag.voice.rewrite` rule 1); a list of the same words and `Number` s, in
    order, comes back. Raises nothing: a word no reading fits stays as it is.
    """
    out: Parts = []
    i = 0
    while i < len(words):
        for reading in _READINGS:
            got = reading(words, i, rules)
            if got:
                out.append(got[0])
                i = got[1]
                break
        else:
            out.append(words[i])
            i += 1
    return out


def to_words(parts: Sequence[str | Number], clock_sep: str | None = None) -> list[str]:
    """The words of `read_numbers` output, each `Number` as its `Number.tokens` (``clock_sep`` passed on).

    >>> from rag.voice.rewrite import DEFAULT_RULES as R
    >>> to_words(read_numbers("three thirty or one eighty nine".split(), R))
    ['3', '30', 'or', '189']
    >>> to_words(read_numbers("three thirty".split(), R), clock_sep="h")
    ['3h30']
    """
    return [t for p in parts for t in (p.tokens(clock_sep) if isinstance(p, Number) else [p])]


def kept_zeros(words: Sequence[str], rules: RewriteRules) -> set[int]:
    """Indices of the zero words ("oh") that lie inside a digit run, between two digit words.

    >>> from rag.voice.rewrite import DEFAULT_RULES as R
    >>> sorted(kept_zeros("oh five oh oh one oh".split(), R))
    [2, 3]

    "oh" is also a filler: filler dropping keeps these (and only these) so that `read_numbers` reads them as 0.
    """
    kept: set[int] = set()
    i = 0
    while i < len(words):
        if _digit(words[i], rules) is None:
            i += 1
            continue
        _, end = _run(words, i, rules)
        kept.update(k for k in range(i, end) if words[k] in rules.zero_words)
        i = max(end, i + 1)
    return kept
