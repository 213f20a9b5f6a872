"""Follow-up questions in a call: resolve a turn against the earlier turns of its session.

A caller leans on what was said before: "what about sunday" (an opener), "when does she work" (a pronoun),
"and for a cat" / "how much" (ellipsis: nothing specific of its own). `Resolver.resolve` turns such a transcript
into a self-contained search query using the session's earlier *resolved* queries (so a chain of follow-ups
keeps its topic), and says which kind of follow-up it was:

- ``opener``: the transcript starts with an opener (`rag.voice.rewrite.RewriteRules.openers`); merged with the last
  topic by `rag.voice.rewrite.merge_follow_up` (a weekday or a contrasted term swapped, anything else appended);
- ``pronoun``: a referring pronoun ("she", or "it" outside phrases such as "is there" or "does it cost") is
  replaced by the last topic's specific words (those the question does not already replace: a weekday of
  its own drops the earlier weekday);
- ``ellipsis``: no opener or pronoun, but a fragment ("for seniors", "and saturdays") or no specific word of its
  own (every key word is in more than ``topic_share`` of the KB's documents, or none is left after fillers):
  merged as an opener is;
- ``standalone``: anything else, searched as rewritten (rules 1-3 of `rag.voice.rewrite`);
- ``no_antecedent``: an opener or a pronoun with no earlier topic in the session: nothing to resolve it
  against, so the chain asks what the caller means instead of guessing (a weak pronoun beside a specific word
  of the question's own, "is it free to park", opens a call as ``standalone``).

An ellipsis with no earlier turn is ``standalone`` (a first "what time do you open" is a question, not a
follow-up), unless it starts with a conjunction ("and saturdays?": ``no_antecedent``). What counts as specific is learned from the KB (document frequencies), not from a table: a word in
few documents names a topic ("pharmacy", "aetna"); a word everywhere ("cat" in a vet KB, "cost") does not.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Mapping, Sequence

from rag.voice.rewrite import (DEFAULT_RULES, RewriteRules, _find_term, merge_follow_up, normalise, split_follow_up,
                         weekday_of)
from rag.voice.selection import STOPWORDS, _stem, terms
from rag.voice.verify import split_sentences

KINDS = ("standalone", "opener", "pronoun", "ellipsis", "no_antecedent")


@dataclass(frozen=True)
class FollowUpRules:
    """What marks a follow-up (params.yaml ``memory``).

    pronouns: words that always point back ("she", "he"); weak_pronouns: words that point back unless inside a
    ``not_referring`` phrase ("it" in "how long does it take" points at nothing; "there" in "is there parking");
    topic_share: a key word found in at most this share of the KB's documents is specific (names a topic);
    conjunctions, question_words, fragment_words: a turn of at most ``fragment_words`` words after its leading
    conjunctions, with no question word, is a fragment ("for seniors", "and saturdays"): an ellipsis.
    """

    pronouns: tuple[str, ...] = ("she", "he", "her", "him", "his", "hers", "them")
    weak_pronouns: tuple[str, ...] = ("it", "its", "they", "their", "that", "this", "those", "there")
    not_referring: tuple[str, ...] = ("is there", "are there", "does it cost", "does it take", "will it take",
                                      "is it possible", "how is it", "there is", "there are")
    topic_share: float = 0.34
    conjunctions: tuple[str, ...] = ("and", "but", "so", "then", "also")
    question_words: tuple[str, ...] = ("what", "whats", "when", "where", "who", "whos", "how", "which", "why", "is",
                                       "are", "do", "does", "did", "can", "could", "will", "would", "should", "may")
    fragment_words: int = 3

    def __post_init__(self):
        if not 0.0 < self.topic_share <= 1.0:
            raise ValueError(f"memory.topic_share must be in (0, 1], got {self.topic_share}")
        if self.fragment_words < 0:
            raise ValueError(f"memory.fragment_words must be >= 0, got {self.fragment_words}")


@dataclass(frozen=True)
class Resolution:
    """A resolved turn: the search ``query`` (rewritten words joined by spaces; "" for ``no_antecedent``), its
    ``kind`` (one of `KINDS`), the earlier resolved query it leaned on (None when it leaned on none) and, for a
    follow-up, its ``focus`` (`Resolver.focus`: what it adds, which what is said should hold)."""

    query: str
    kind: str
    antecedent: str | None = None
    focus: frozenset[str] = frozenset()


class Resolver:
    """Resolves the turns of calls on one KB. docs: ``{doc: text}`` (the KB whose document frequencies say which
    words are specific); rewrite: the rewrite rules (fillers, numbers, openers, swap classes); rules: the
    follow-up cues. Build once per KB; `resolve` is pure."""

    def __init__(self, docs: Mapping[str, str], rewrite: RewriteRules = DEFAULT_RULES,
                 rules: FollowUpRules = FollowUpRules()):
        self.rewrite, self.rules = rewrite, rules
        self.n_docs = max(len(docs), 1)
        self.df = Counter(t for text in docs.values() for t in {_stem(w) for w in normalise(text, rewrite)})
        self.sentences: dict[str, set[int]] = {}  # key word -> the KB sentences holding it
        for i, sentence in enumerate(x for text in docs.values() for x in split_sentences(text)):
            for w in normalise(sentence, rewrite):
                self.sentences.setdefault(_stem(w), set()).add(i)

    def specific(self, words: Sequence[str]) -> list[str]:
        """The words that name a topic: key words (not `rag.voice.selection.STOPWORDS`, not pronouns, no digits-only
        words) in at most ``topic_share`` of the KB's documents; a word the KB lacks counts as specific
        (an entity the KB does not hold, or a misheard word: either way the question is its own)."""
        cues = set(self.rules.pronouns) | set(self.rules.weak_pronouns)
        return [w for w in words if w not in STOPWORDS and w not in cues and not w.isdigit()
                and self.df[_stem(w)] / self.n_docs <= self.rules.topic_share]

    def focus(self, words: Sequence[str]) -> frozenset[str]:
        """What a follow-up adds: the stems (`rag.voice.selection.terms`) of its own `specific` words that the KB
        holds ("checks" in "and checks"; not "seal" for the misheard "sealants", which the KB lacks). The sentence
        said for the follow-up should hold one (`rag.voice.answer.candidate_sentences`): its merged query carries
        the earlier topic, whose sentence would otherwise outrank the answer (chosen on the clinic and dental
        dialogues, 2026-12-05: follow-ups right - grounded-wrong 6 -> 16 pooled; README)."""
        return frozenset(t for w in self.specific(words) if self.df[_stem(w)] > 0 for t in terms(w))

    def _pronoun_at(self, words: list[str]) -> int | None:
        """Index of the first word that points back, or None."""
        blocked = set()
        for phrase in self.rules.not_referring:
            p = phrase.split()
            for i in range(len(words) - len(p) + 1):
                if words[i:i + len(p)] == p:
                    blocked.update(range(i, i + len(p)))
        for i, w in enumerate(words):
            if w in self.rules.pronouns or (w in self.rules.weak_pronouns and i not in blocked):
                return i
        return None

    def topic(self, base: list[str], words: list[str]) -> list[str]:
        """The words of the earlier query ``base`` that stand for its topic in the follow-up ``words``: its
        specific words the KB holds (a word it lacks is most often the recogniser's garbage: "youtube" in "up the
        youtube video visits"), less those the follow-up already says and a weekday or a swap-class term the
        follow-up names one of its own, each with the key words next to it that the KB holds (the compound a
        common word is part of: "video visits", where "visits" alone is in most documents and says nothing); its
        specific words the KB lacks when it holds none of them; all its remaining key words when none is
        specific."""
        own_day = any(weekday_of(w, self.rewrite) for w in words)
        dropped = set()
        for terms in self.rewrite.swap_classes:
            hit = _find_term(base, terms)
            if hit and _find_term(words, terms):
                dropped.update(range(hit[0], hit[1]))
        keep = [w for i, w in enumerate(base) if i not in dropped and w not in words
                and not (own_day and weekday_of(w, self.rewrite))]
        specific = self.specific(keep)
        held = [w for w in specific if self.df[_stem(w)]]
        if not held:
            return specific or [w for w in keep if w not in STOPWORDS]
        at = {i for i, w in enumerate(base) if w in held}
        return [w for i, w in enumerate(base) if w in keep and (i in at or (
            (i - 1 in at or i + 1 in at) and w not in STOPWORDS and self.df[_stem(w)] and not w.isdigit()))]

    def merge(self, tail: list[str], base: list[str]) -> list[str]:
        """A follow-up's ``tail`` merged with the earlier query ``base``: `rag.voice.rewrite.merge_follow_up` (a weekday
        or a contrasted term swapped, else the tail appended). When nothing was swapped and the tail names a topic
        of its own, the base's specific words that never share a KB sentence with the tail's are its
        alternatives and give way ("credit card" after "can i pay with a personal check"); those that do are
        attributes and stay ("pharmacy" after "what time do you open on saturday"), as does a weekday."""
        merged = merge_follow_up(tail, base, self.rewrite)
        new = [_stem(w) for w in self.specific(tail)]
        if merged[:len(base)] != base or len(new) < 2:
            return merged
        alternatives = {w for w in self.specific(base) if not weekday_of(w, self.rewrite) and self.df[_stem(w)]
                        and not any(self.sentences.get(_stem(w), set()) & self.sentences.get(n, set()) for n in new)}
        return [w for w in base if w not in alternatives] + list(tail)

    def fragment(self, words: list[str]) -> bool:
        """A turn that is not a question of its own: at most ``fragment_words`` words after a leading
        conjunction ("and", "but", "so", "then", "also"), none of them a question word ("for seniors",
        "and saturdays", "online")."""
        rest = words[next((i for i, w in enumerate(words) if w not in self.rules.conjunctions), len(words)):]
        return len(rest) <= self.rules.fragment_words and not set(rest) & set(self.rules.question_words)

    def resolve(self, asr: str, history: Sequence[str] = ()) -> Resolution:
        """Resolve one transcript against ``history``: the session's earlier resolved queries, oldest first
        (turns that resolved to nothing left out; an entry with no words, "" or "um uh", is skipped: it is no
        topic). See the module docstring for the kinds."""
        words = normalise(asr, self.rewrite)
        history = [h for h in history if normalise(h, self.rewrite)]
        base = normalise(history[-1], self.rewrite) if history else None
        tail = split_follow_up(words, self.rewrite)
        if tail is not None:
            if base is None:
                return Resolution("", "no_antecedent")
            return Resolution(" ".join(self.merge(tail, base)), "opener", history[-1], self.focus(words))
        at = self._pronoun_at(words)
        if at is not None:
            if base is None:  # "is it free to park" opens a call: a weak pronoun beside a topic of its own
                if words[at] in self.rules.weak_pronouns and self.specific(words):
                    return Resolution(" ".join(words), "standalone")
                return Resolution("", "no_antecedent")
            return Resolution(" ".join(words[:at] + self.topic(base, words) + words[at + 1:]), "pronoun",
                              history[-1], self.focus(words))
        if base is not None and (self.fragment(words) or not self.specific(words)):
            tail = words[next((i for i, w in enumerate(words) if w not in self.rules.conjunctions), len(words)):]
            return Resolution(" ".join(self.merge(tail, base)), "ellipsis", history[-1], self.focus(words))
        if base is None and words[:1] and words[0] in self.rules.conjunctions and self.fragment(words):
            return Resolution("", "no_antecedent")  # "and saturdays?" opening a call
        return Resolution(" ".join(words), "standalone")
