"""Decide whether an answer may be said, and pick an extractive sentence when it may not.

An answer passes only if ALL hold (the failure reason names the first that does not):
- it is non-empty, cites a document (not "none") that was retrieved and exists;
- every number and time in it appears in ONE sentence of the cited document (times compared
  after normalisation: "8:30 a.m." = "8.30am" = "half past eight in the morning" -> 08:30);
- slot agreement: a day or service named by the query is not contradicted by that sentence
  (a Saturday question supported by the weekday sentence fails); the slots are a table (`VerifyRules`);
- yes/no replies (`is_yes_no`: "Yes.", "No, we don't."): the supporting sentence holds the query's key
  terms (`yes_no_supported`), since such a reply claims the query's proposition, not words of its own;
- polarity: the sentence and the answer agree on negation ("We do not accept personal checks"
  cannot support "We accept personal checks", nor "Yes"). Negation cues are data (`VerifyRules.negations`,
  single words or phrases); a yes/no reply's polarity is the query's, flipped by a leading "no".
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Mapping, Sequence

from rag.retrieval.chunk import LIST_ITEM
from rag.voice.numbers import to_words
from rag.voice.rewrite import DEFAULT_RULES, RewriteRules, normalise, normalise_parts

REASONS = ("ok", "empty_answer", "source_none", "source_not_retrieved", "source_unknown",
           "number_not_in_source", "numbers_split_across_sentences", "no_supporting_sentence",
           "wrong_day", "wrong_service", "yes_no_unsupported", "polarity", "numbers_out_of_order", "unsupported_words")

# The seed split on (?<=[.!?])\s+; requiring a capital or digit next keeps "9 a.m. to 1 p.m." whole.
# Candidate ends are . ! or ? then whitespace; `split_sentences` keeps one only before a capital (any script:
# str.isupper, so "Él" and "Ä" count), a digit or an opening quote/dollar, and not after an abbreviation.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_STARTERS = frozenset("0123456789\"'$")
# Words ending in a full stop that do not end a sentence even when a capital follows ("Dr. Anna Patel").
ABBREVIATIONS: tuple[str, ...] = ("Dr.", "Mr.", "Mrs.", "Ms.", "St.", "e.g.", "i.e.", "etc.")
_CLOCK = re.compile(r"\b(\d{1,2})[:.](\d{2})(?!\d)")
_MERIDIEM = re.compile(r"(?:(?<=\d)|\b)([ap])\.?\s?m\b\.?", re.IGNORECASE)
_TOKEN_TIME = re.compile(r"\b(\d+)(?:h(\d\d))?(?: (am|pm))?\b")


@dataclass(frozen=True)
class VerifyRules:
    """Data behind the checks (params.yaml ``verify``).

    slots: slot name -> {canonical value: [terms]}; a term may span words and matches word
    prefixes of plurals ("flu shot" matches "flu shots"). groups: a value that covers others
    ("weekday" covers monday..friday), so a Monday question agrees with a weekday sentence.
    negations: cues that make a sentence or answer negative: words ("not", "dont", "without") or phrases
    ("out of network"), matched as whole normalised words; antonyms are listed ("unable", "ineligible"),
    not found by a prefix rule ("un"/"in"/"non" would also fire on "under", "insurance", "nonstop").
    function_words / min_coverage: at least ``min_coverage`` of the answer's content words (not function words,
    not numbers) must appear in a sentence for it to be the supporting one (else ``no_supporting_sentence``); once
    it is, and slots and polarity agree, every one of them must (else ``unsupported_words``: "A flu shot costs $30
    and requires a referral." is not "A flu shot costs $30."; negation cues are left to polarity).
    For a bare "Yes."/"No." the question's key terms stand in (`yes_no_supported`).
    answer_types: what a question asks for: a cue phrase in the query ("how long") names a type whose
    regex an answering sentence matches ("3 business days"); used to pick extractive sentences.
    """

    slots: Mapping[str, Mapping[str, Sequence[str]]] = field(default_factory=lambda: {
        "day": {d: [d] for d in ("monday", "tuesday", "wednesday", "thursday", "friday",
                                 "saturday", "sunday", "weekday", "weekend", "holiday")},
    })
    groups: Mapping[str, Sequence[str]] = field(default_factory=lambda: {
        "weekday": ["monday", "tuesday", "wednesday", "thursday", "friday"],
        "weekend": ["saturday", "sunday"],
    })
    negations: Sequence[str] = (
        "not", "no", "never", "closed", "cannot", "cant", "dont", "doesnt", "didnt", "wont", "isnt", "arent",
        "wasnt", "werent", "havent", "hasnt", "hadnt", "shouldnt", "couldnt", "wouldnt", "mustnt", "neednt",
        "nobody", "none", "neither", "nor", "nothing", "nowhere", "without", "stopped", "no longer",
        "out of network", "out of stock", "unable", "unavailable", "ineligible", "inactive", "uncovered",
        "invalid", "nonrefundable", "non refundable")
    function_words: Sequence[str] = (
        "a", "an", "the", "and", "or", "but", "of", "at", "by", "for", "with", "about", "to", "from", "in",
        "on", "off", "out", "up", "do", "does", "did", "is", "are", "was", "were", "be", "been", "have",
        "has", "had", "can", "could", "will", "would", "should", "may", "might", "must", "i", "me", "my",
        "you", "your", "we", "our", "us", "it", "its", "they", "them", "their", "this", "that", "these",
        "those", "what", "which", "who", "when", "where", "why", "how", "there", "here", "yes", "no",
        "not", "also", "just", "please", "half", "past", "quarter", "morning", "afternoon", "evening",
        "noon", "midnight", "am", "pm")
    min_coverage: float = 0.5
    answer_types: Mapping[str, Mapping[str, object]] = field(default_factory=lambda: {
        "duration": {"cues": ["how long", "how soon", "how many days", "be ready", "when will"],
                     "pattern": r"\b\d+ (?:to \d+ )?(?:business )?(?:minute|hour|day|week|month)s?\b"},
        "price": {"cues": ["how much", "cost", "price", "fee"], "pattern": r"\$\d+"},
        "time": {"cues": ["what time", "what hours", "which hours", "how late", "when do you open",
                          "when do you close"],
                 "pattern": r"\d+(?::\d\d)? ?[ap]\.?m\b"},
        "acceptance": {"cues": ["do you take", "do you accept", "taking", "accepted"], "pattern": r"\baccept"},
    })

    def __post_init__(self):
        if not 0.0 <= self.min_coverage <= 1.0:
            raise ValueError(f"verify.min_coverage must be in [0, 1], got {self.min_coverage}")
        bad = [c for c in self.negations if not (isinstance(c, str) and normalise(c))]
        if bad:
            raise ValueError(f"verify.negations must be words or phrases, got {bad!r}")
        for name, t in self.answer_types.items():
            if not isinstance(t, Mapping) or not isinstance(t.get("pattern"), str):
                raise ValueError(f"verify.answer_types.{name} needs cues and a pattern (a regex string)")
            cues = t.get("cues")
            if not isinstance(cues, (list, tuple)) or not cues or not all(
                    isinstance(c, str) and normalise(c) for c in cues):
                raise ValueError(f"verify.answer_types.{name}.cues must be a non-empty list of phrases, got {cues!r}")
            try:
                re.compile(t["pattern"])
            except re.error as e:
                raise ValueError(f"verify.answer_types.{name}.pattern is not a regex: {e}") from None


DEFAULT_VERIFY = VerifyRules()


def split_sentences(text: str, abbreviations: Sequence[str] = ABBREVIATIONS) -> list[str]:
    """Sentences of a document: headings dropped, whitespace folded, split after . ! or ? when a capital
    (any script), digit, quote or dollar follows, except after one of ``abbreviations`` (matched as the
    whole last word, opening brackets and quotes ignored: "(e.g. Monday)" stays one sentence). A blank line, a
    heading or a Markdown list item always ends a sentence: a paragraph without a final full stop ("No fee is
    charged") never runs into the next one ("For a missed appointment you pay $50.") as one sentence the KB does not
    hold, and each item of a list is a sentence of its own, without its marker, led by the sentence ending in ":"
    that introduces the list ("Our opening hours:" + "- Sunday: closed" -> "Our opening hours: Sunday: closed"; the
    lead-in alone answers nothing)."""
    abbr = frozenset(abbreviations)
    out: list[str] = []
    lead, led = None, False  # the sentence ending in ":" just before a list; whether an item took it
    for paragraph, is_item in _paragraphs(text):
        if is_item and lead:
            paragraph, led = f"{lead} {paragraph}", True
        elif lead and not led:
            out.append(lead)  # no list followed it
        if not is_item:
            lead, led = None, False
        first = len(out)
        for piece in _SENTENCE_END.split(paragraph):
            if not piece:
                continue
            if len(out) > first and (not (piece[0].isupper() or piece[0] in _STARTERS)
                                     or out[-1].rsplit(" ", 1)[-1].lstrip("([{\"'") in abbr):
                out[-1] = f"{out[-1]} {piece}"
            else:
                out.append(piece)
        if not is_item and len(out) > first and out[-1].endswith(":"):
            lead = out.pop()
    if lead and not led:
        out.append(lead)
    return out


def _paragraphs(text: str) -> list[tuple[str, bool]]:
    """``(paragraph, is a list item)`` of ``text``, whitespace folded: runs of lines ended by a blank line or a
    heading; a list item (`rag.retrieval.chunk.LIST_ITEM`) starts a run of its own, its marker dropped (its indented
    continuation lines join it), and an empty item is dropped. A heading is a run of its own too, returned as
    ``("", False)``: it ends what a list's lead-in leads."""
    out: list[tuple[str, bool]] = []
    lines: list[str] = []
    item = False
    for line in [*text.lstrip("\ufeff").splitlines(), ""]:
        marker = LIST_ITEM.match(line)
        heading = line.lstrip().startswith("#")
        if lines and (marker or not line.strip() or heading):
            if paragraph := " ".join(" ".join(lines).split()):  # an empty item ("-" alone) says nothing
                out.append((paragraph, item))
            lines = []
        if heading:
            out.append(("", False))
        elif line.strip():
            if not lines:
                item = marker is not None
            lines.append(line[marker.end():] if marker else line)
    return out


def _times(text: str, rewrite_rules: RewriteRules) -> list[tuple[int, str | None, str | None]]:
    """(number, minutes or None, "am"/"pm" or None) for every number or time in ``text``,
    number words read as `rag.voice.rewrite.normalise` reads them, a spoken clock time kept a time
    ("three" -> 3; "half past eight", "eight thirty" -> 8, "30"; "one eighty-nine" -> 189)."""
    t = _MERIDIEM.sub(lambda m: f" {m.group(1).lower()}m ", text)
    t = _CLOCK.sub(lambda m: f" {m.group(1)}h{m.group(2)} ", t)
    words = " ".join(to_words(normalise_parts(t, rewrite_rules), clock_sep="h"))
    return [(int(m.group(1)), m.group(2), m.group(3)) for m in _TOKEN_TIME.finditer(words)]


def _forms(h: int, mm: str | None, ap: str | None) -> set[str]:
    """Every normalised form of one number or time of `_times` (see `number_facts`)."""
    if mm is None and not ap:
        return {str(h)}
    mins = mm or "00"
    forms = {f"{h}:{mins}"}
    if ap and 1 <= h <= 12:
        forms.add(f"{h % 12 + (12 if ap == 'pm' else 0):02d}:{mins}")
    if mins == "00":
        forms.add(str(h))
    return forms


def _claim(h: int, mm: str | None, ap: str | None) -> str:
    """The most specific form of one number or time of `_times` (see `answer_claims`)."""
    if ap and 1 <= h <= 12:
        return f"{h % 12 + (12 if ap == 'pm' else 0):02d}:{mm or '00'}"
    return f"{h}:{mm}" if mm is not None else str(h)


def number_facts(text: str, rewrite_rules: RewriteRules = DEFAULT_RULES) -> set[str]:
    """Every normalised form of the numbers and times in ``text`` (what a sentence supports).

    "9 a.m." gives "09:00", "9:00" and "9"; "8:30 p.m." gives "20:30" and "8:30"; "$30" gives "30";
    "three business days" gives "3"; "half past eight" and "eight thirty" give "8:30"; "quarter to eight"
    gives "7:45"; "one hundred and eighty-nine dollars" gives "189".
    """
    return {f for t in _times(text, rewrite_rules) for f in _forms(*t)}


def answer_claims(answer: str, rewrite_rules: RewriteRules) -> set[str]:
    """What an answer asserts: the most specific form of each number or time
    ("9 a.m." claims "09:00"; "8:30" claims "8:30"; "24 hours" claims "24")."""
    return {_claim(*t) for t in _times(answer, rewrite_rules)}


def in_order(answer: str, sentence: str, rewrite_rules: RewriteRules = DEFAULT_RULES) -> bool:
    """Whether the numbers and times of ``answer`` stand in ``sentence`` in the same order (each claim, `answer_claims`,
    matched to a later number of the sentence, in its `number_facts` forms): "from 1 p.m. to 9 a.m." holds the
    numbers of "from 9 a.m. to 1 p.m." and says the opposite; a dog's and a cat's prices swapped likewise."""
    items = [_forms(*t) for t in _times(sentence, rewrite_rules)]
    at = 0
    for t in _times(answer, rewrite_rules):
        while at < len(items) and _claim(*t) not in items[at]:
            at += 1
        if at == len(items):
            return False
        at += 1
    return True


def _stem_words(text: str) -> list[str]:
    return [w[:-1] if len(w) > 3 and w.endswith("s") else w for w in normalise(text)]


def slot_values(text: str, rules: VerifyRules = DEFAULT_VERIFY) -> dict[str, set[str]]:
    """Slot values a text names, e.g. ``{"day": {"saturday"}}`` for "open on saturdays?"."""
    words = _stem_words(text)
    found: dict[str, set[str]] = {}
    for slot, values in rules.slots.items():
        for value, terms in values.items():
            for term in terms:
                t = _stem_words(term)
                if any(words[i:i + len(t)] == t for i in range(len(words) - len(t) + 1)):
                    found.setdefault(slot, set()).add(value)
    return found


def _expand(values: set[str], rules: VerifyRules) -> set[str]:
    out = set(values)
    for v in values:
        out.update(rules.groups.get(v, ()))
        out.update(g for g, members in rules.groups.items() if v in members)
    return out


def slots_conflict(query: str, sentence: str, rules: VerifyRules = DEFAULT_VERIFY) -> str | None:
    """Name of the first slot where the sentence names values and none agree with the query's."""
    q, s = slot_values(query, rules), slot_values(sentence, rules)
    for slot, qv in q.items():
        if slot in s and not (_expand(qv, rules) & s[slot]):
            return slot
    return None


def asked_types(query: str, rules: VerifyRules = DEFAULT_VERIFY) -> tuple[str, ...]:
    """Names of the answer types the query asks for: those with a cue phrase among its normalised
    words, in table order; () when it asks for no known type."""
    q = " " + " ".join(normalise(query)) + " "
    return tuple(name for name, t in rules.answer_types.items()
                 if any(f" {' '.join(normalise(c))} " in q for c in t["cues"]))


def holds_answer_type(sentence: str, types: Sequence[str], rules: VerifyRules = DEFAULT_VERIFY) -> bool:
    """Whether ``sentence`` matches the pattern of any of the answer ``types`` (names of `asked_types`)."""
    return any(re.search(rules.answer_types[t]["pattern"], sentence, re.IGNORECASE) for t in types)


def answer_type_match(query: str, sentence: str, rules: VerifyRules = DEFAULT_VERIFY) -> bool | None:
    """Whether ``sentence`` holds what the query asks for (a duration, price, time); None if the
    query asks for no known type."""
    types = asked_types(query, rules)
    return holds_answer_type(sentence, types, rules) if types else None


@lru_cache(maxsize=16)
def _negation_cues(negations: tuple[str, ...]) -> tuple[frozenset[str], tuple[tuple[str, ...], ...]]:
    """The negation cues, normalised as texts are: (single words, phrases of several words)."""
    cues = [tuple(normalise(c)) for c in negations]
    return frozenset(c[0] for c in cues if len(c) == 1), tuple(c for c in cues if len(c) > 1)


def _cue_words(rules: VerifyRules) -> set[str]:
    """Single-word negation cues, also as `_content` stems them (left out of key terms: polarity judges them)."""
    single = _negation_cues(tuple(rules.negations))[0]
    return set(single) | {w[:-1] for w in single if len(w) > 3 and w.endswith("s")}


def _cue_spans(words: Sequence[str], rules: VerifyRules) -> list[tuple[str, range]]:
    """The negation cues of ``rules.negations`` among ``words`` (`normalise`d) with where they stand: each phrase cue
    ("no longer", "out of network") where it does not overlap one found before, then each single-word cue outside
    them. The one scan `is_negative`, `negation_cues` and `_claims` read."""
    single, phrases = _negation_cues(tuple(rules.negations))
    spans: list[tuple[str, range]] = []
    taken: set[int] = set()
    for p in phrases:
        for i in range(len(words) - len(p) + 1):
            if tuple(words[i:i + len(p)]) == p and not taken.intersection(range(i, i + len(p))):
                spans.append((" ".join(p), range(i, i + len(p))))
                taken.update(range(i, i + len(p)))
    return spans + [(w, range(i, i + 1)) for i, w in enumerate(words) if w in single and i not in taken]


def is_negative(text: str, rules: VerifyRules = DEFAULT_VERIFY) -> bool:
    """True if the text contains a negation cue of ``rules.negations``: a word, or a phrase as
    consecutive words (apostrophes ignored: "don't" is "dont"; "no longer", "out of network")."""
    return bool(_cue_spans(normalise(text), rules))


NOT_CLASS = frozenset({"not", "cannot", "cant", "dont", "doesnt", "didnt", "wont", "isnt", "arent", "wasnt", "werent",
                       "havent", "hasnt", "hadnt", "shouldnt", "couldnt", "wouldnt", "mustnt", "neednt"})  # = "not"


def negation_cues(text: str, rules: VerifyRules = DEFAULT_VERIFY) -> Counter:
    """The negation cues of ``text`` (`rules.negations`) counted, a contracted or joined "not" ("don't", "cannot")
    counted as "not" and a phrase cue ("no longer") as itself, so that "We don't accept checks" and "We do not accept
    checks" hold the same cues and "We are not closed" holds one more than "We are closed"."""
    return Counter("not" if cue in NOT_CLASS else cue for cue, _ in _cue_spans(normalise(text), rules))


def _claims(answer: str, rules: VerifyRules = DEFAULT_VERIFY) -> set[str]:
    """The content words an answer claims, its negation cues left out (a single cue, or the words of a cue phrase
    where the phrase stands: "no longer", "out of network"): polarity judges those, coverage the rest."""
    words = normalise(answer)
    cue = {i for _, where in _cue_spans(words, rules) for i in where}
    return _content(" ".join(w for i, w in enumerate(words) if i not in cue), rules)


def _content(text: str, rules: VerifyRules = DEFAULT_VERIFY) -> set[str]:
    """Content words: stemmed, no function words, no numbers."""
    stop = set(rules.function_words)
    return {w for w in _stem_words(text) if w not in stop and not any(c.isdigit() for c in w)}


def is_yes_no(answer: str, rules: VerifyRules = DEFAULT_VERIFY) -> bool:
    """A bare yes/no reply: its first word is "yes" or "no" and, negation cues aside, it has no content
    word ("Yes.", "No, we don't.", "Yes, we are." but not "Yes, parking is free.")."""
    words = normalise(answer)
    return bool(words) and words[0] in ("yes", "no") and not (_content(answer, rules) - _cue_words(rules))


def yes_no_supported(query: str | None, sentence: str, rules: VerifyRules = DEFAULT_VERIFY) -> bool:
    """Whether ``sentence`` can support a bare yes/no reply to ``query``.

    Rule: the query's key terms (`_content`: stemmed, so "checks" = "check"; negation cues left to the
    polarity check) must be non-empty, and the sentence must hold at least one of them AND at least
    ``rules.min_coverage`` of them. A bare reply claims the query's proposition, so the query's terms
    stand in for the answer's own (the same share as the answer coverage rule); "at least one" keeps a
    query without content words (or no query) from passing vacuously. "do you take personal checks"
    (take, personal, check) is supported by "We do not accept personal checks." (2 of 3), not by
    "Parking in the clinic lot is free for patients." (0).
    """
    key = _content(query or "", rules) - _cue_words(rules)
    shared = len(key & _content(sentence, rules))
    return shared >= 1 and shared >= rules.min_coverage * len(key)


def verify(answer: str, source: str, retrieved: Sequence[str], kb: Mapping[str, str],
           query: str | None = None, rules: VerifyRules = DEFAULT_VERIFY,
           rewrite_rules: RewriteRules = DEFAULT_RULES) -> tuple[bool, str]:
    """Check an LLM answer against the document it cites. Returns ``(ok, reason)``.

    answer: the sentence to be said; source: the cited doc name; retrieved: doc names given to
    the model; kb: ``{doc name: full text}``; query: the (rewritten) query, needed for the slot
    and yes/no checks. reason is "ok" or one of `REASONS`; an answer with no number and no content word
    (punctuation, a filler) other than a bare yes/no is ``empty_answer``.
    """
    if source == "none":  # before the answer: a declined reply (`rag.llm.client.DECLINED`) carries none
        return False, "source_none"
    if not answer or not answer.strip():
        return False, "empty_answer"
    if source not in retrieved:
        return False, "source_not_retrieved"
    if source not in kb:
        return False, "source_unknown"
    sentences = split_sentences(kb[source])
    claims = answer_claims(answer, rewrite_rules)
    if not claims and not is_yes_no(answer, rules) and not _content(answer, rules):
        return False, "empty_answer"  # no number, no content word ("...", "Oh."): nothing to check, nothing said
    if not claims <= number_facts(kb[source], rewrite_rules):
        return False, "number_not_in_source"
    candidates = [s for s in sentences if claims <= number_facts(s, rewrite_rules)]
    if not candidates:
        return False, "numbers_split_across_sentences"
    # A sentence naming another day or service than the answer itself cannot support it.
    agreeing = [s for s in candidates if slots_conflict(answer, s, rules) is None]
    if not agreeing:
        return False, f"wrong_{slots_conflict(answer, candidates[0], rules)}"
    bare = is_yes_no(answer, rules)
    own = set() if bare else _content(answer, rules)
    asked = _content(query or "", rules)
    # The supporting sentence: agrees with the query's slots, then shares most of the answer's words.
    support = max(agreeing, key=lambda s: (query is None or slots_conflict(query, s, rules) is None,
                                           len(own & _content(s, rules)), len(asked & _content(s, rules))))
    if bare and not yes_no_supported(query, support, rules):
        return False, "yes_no_unsupported"
    if own and len(own & _content(support, rules)) < rules.min_coverage * len(own):
        return False, "no_supporting_sentence"
    if query is not None:
        slot = slots_conflict(query, support, rules)
        if slot:
            return False, f"wrong_{slot}"
    # A yes/no reply asserts the query's proposition ("yes") or its denial (a leading "no"): "Yes" to
    # "are you closed on sunday" is negative. (A "no" to a negated question, "don't you...", reads as flipped.)
    if bare:
        negative = is_negative(query or "", rules) != (normalise(answer)[0] == "no")
    else:
        negative = is_negative(answer, rules)
    if is_negative(support, rules) != negative:
        return False, "polarity"
    # No more negations than the sentence makes: "We are not closed on Sunday." (a cue more) or "We do not not accept
    # Medicaid." flips "We are closed ..." / "We do not accept ..." while both read as negative; other forms of one
    # negation agree ("do not" / "no longer", "cannot" / "ineligible"). A leading "yes" / "no" answers the question
    # and is no cue of the claim ("No, we are closed on Sunday.").
    if not bare:
        words = normalise(answer)
        claim = " ".join(words[1:] if words[:1] in (["yes"], ["no"]) else words)
        if sum(negation_cues(claim, rules).values()) > sum(negation_cues(support, rules).values()):
            return False, "polarity"
    if not in_order(answer, support, rewrite_rules):
        return False, "numbers_out_of_order"
    extra = _claims(answer, rules) - _content(support, rules)
    if extra:  # "A flu shot costs $30 and requires a referral.": most words are the sentence's, the claim is not
        return False, "unsupported_words"
    return True, "ok"
