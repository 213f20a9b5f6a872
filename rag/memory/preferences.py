"""Summary memory across calls (seed 004; issue 19 part 2): what a caller told us about themselves, kept for their
next call.

At the end of a call the LLM fills a small form from the caller's own words (`summarise`: a schema-bound JSON
record, one string per field of `PreferenceRules`, "" = not stated). Code, not the model, decides what is kept
(`grounded`): a value survives only when every word of it is in one clause where the caller states something about
themselves (`owned_clauses`: not a question, "I"/"we" or "my insurance"/"my cat" as the subject, not "my sister
has ..."), so a value can be dropped, never invented; a value that is only the field's own name ("insurance") is
dropped too. (The 1.5B model, told all this in its prompt, still filled fields from the caller's questions and from
what they said of other people: measured in stage preferences.) In a later call
`personalise` searches a question that names a referent ("do you take *my insurance*") with the stored value
("do you take aetna insurance"), and `mention` says where it came from ("You told us you have aetna."): the value is the
caller's words, never a KB fact, so it is said apart from the verified answer.

Storage: `rag.memory.Memory.remember` / `rag.memory.Memory.preferences` (SQLite or PostgreSQL, keyed by the
caller-id hash, with their own retention).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

_WORD = re.compile(r"[a-z0-9]+")
_FILLER = frozenset("a an the my our his her their some two three one".split())  # never needed to state a value
_FIRST_PERSON = frozenset("i im ive id ill we weve wed me myself us".split())  # after apostrophes are dropped
_POSSESSIVE = frozenset(("my", "our"))
_OPENS_PHRASE = frozenset(("a", "an", "the", "my", "our"))  # a noun phrase starts here: "a small dog"
_CLAUSE = re.compile(r"[,.;:!?]+|\b(?:but|and|because|so|while|though|although)\b", re.I)
# A clause with one of these says what is not, or no longer, the caller's ("I used to have cigna", "I don't have a dog");
# a "no" that opens the clause answers the call taker ("no, I have aetna") and is not one.
_NOT_NOW = re.compile(r"(?<!^)(?<!^no )\bno\b|\b(?:used to|no longer|any ?more|formerly|previously|not|never|dont|doesnt|"
                      r"didnt|isnt|wasnt|arent|havent|hasnt|cant|wont)\b")

SYSTEM_PROMPT = ("You read what a caller said on a phone call and fill in a form about the caller. Fill a field only "
                 "with the words the caller used to state a fact about themselves. Leave it \"\" when the caller did "
                 "not state it: a question the caller asks states nothing, and what the caller says about another "
                 "person is not about the caller. Fields:\n")


@dataclass(frozen=True)
class PreferenceRules:
    """The form. fields: ``{name: what it means}`` (shown to the LLM); referents: ``{name: phrases of a question
    that stand for the stored value}`` ("my insurance"), matched as whole lower-case words, longest first;
    mentions: ``{name: what is said before the answer, with {value}}``; searched_as: ``{name: what replaces the
    referent in the search, with {value}}`` (missing: the value alone); max_len: characters of a value."""

    fields: Mapping[str, str]
    referents: Mapping[str, Sequence[str]]
    mentions: Mapping[str, str]
    max_len: int = 40
    question_words: frozenset = frozenset()  # a clause opening with one of these asks; it states nothing
    skip_words: frozenset = frozenset()      # fillers and greetings skipped before a clause's first word
    searched_as: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self):
        if not self.fields or set(self.referents) != set(self.fields) or set(self.mentions) != set(self.fields):
            raise ValueError("preference fields, referents and mentions must name the same fields")
        if any("{value}" not in m for m in (*self.mentions.values(), *self.searched_as.values())):
            raise ValueError("every preference mention and searched_as must hold {value}")


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower().replace("'", ""))


def _said(word: str, heard: set[str]) -> bool:
    return word in heard or word + "s" in heard or (word.endswith("s") and word[:-1] in heard)


def summary_messages(heard: Sequence[str], rules: PreferenceRules) -> list[dict]:
    """Chat messages asking for the form: the fields and what they mean, then the caller's turns, one per line."""
    form = "\n".join(f"- {name}: {means}" for name, means in rules.fields.items())
    said = "\n".join(f"Caller: {h}" for h in heard)
    return [{"role": "system", "content": SYSTEM_PROMPT + form}, {"role": "user", "content": said}]


def owned_clauses(heard: Sequence[str], rules: PreferenceRules) -> list[list[str]]:
    """The clauses of the caller's turns (split at punctuation and at but / and / because / so / while / though)
    in which the caller states something about themselves, as lower-case word lists, each led by "<own>",
    "<other>" or "<not>" (an apposition opening with a / an joins the clause before it): after skipping
    ``rules.skip_words``, a clause that opens with a question word states nothing; one that opens with "my W" /
    "our W" is about someone else ("my sister has two dogs") unless W is a field's name or referent word ("my
    insurance is blue cross"), when it is the caller's; any other clause is the caller's only with a first-person
    word (I, I'm, we, me, ...). A clause that says what is not, or no longer, the caller's (`_NOT_NOW`: "I used to
    have cigna", "my insurance is not aetna", "I don't have a dog") is led by "<not>": nothing in it is kept.
    "my cat luna needs her shots" (W the value itself) is judged by `grounded`."""
    names = {w for refs in rules.referents.values() for r in refs for w in _words(r)} | {
        w for f in rules.fields for w in _words(f)}
    out = []
    for turn in heard:
        last = None  # the clause before, when kept: an apposition ("a large dog, a golden retriever") joins it
        for clause in _CLAUSE.split(turn.lower().replace("'", "")):
            words = _words(clause)
            start = next((i for i, w in enumerate(words) if w not in rules.skip_words), len(words))
            head = words[start:]
            if not head or head[0] in rules.question_words:
                last = None
            elif head[0] in ("a", "an") and last is not None:
                last.extend(head)
            elif head[0] in _POSSESSIVE and len(head) > 1:
                last = ["<not>" if _NOT_NOW.search(" ".join(head)) else "<own>" if head[1] in names else "<other>",
                        *head]
                out.append(last)
            elif _FIRST_PERSON & set(head):
                last = ["<not>" if _NOT_NOW.search(" ".join(head)) else "<own>", *head]
                out.append(last)
            else:
                last = None
    return out


def grounded(record: Mapping[str, str], heard: Sequence[str], rules: PreferenceRules) -> tuple[dict[str, str], dict[str, str]]:
    """Split an LLM's form into ``(kept, dropped)``: ``kept`` = ``{field: value lower-cased}`` whose every word
    (articles and "my" aside; a plural s either way) is in one clause of `owned_clauses` (a clause opening with
    "my W" counts when W is a word of the value: "my cat luna"); ``dropped`` = ``{field: why}`` for a value the
    caller never said ("not said: humana"), said only in a question or of someone else ("not stated as the
    caller's: cat"), or that is only the field's referent words ("only names the field"). Empty values are
    neither."""
    said = {w for h in heard for w in _words(h)}
    clauses = owned_clauses(heard, rules)
    kept, dropped = {}, {}
    for field, value in record.items():
        if field not in rules.fields or not value.strip():
            continue
        words = [w for w in _words(value) if w not in _FILLER]
        missing = [w for w in words if not _said(w, said)]
        names = {w for r in rules.referents[field] for w in _words(r)} | set(_words(field))
        owned = [c for c in clauses if c[0] == "<own>" or (c[0] == "<other>" and _said(c[2], set(words)))]
        if missing:
            dropped[field] = "not said: " + " ".join(missing)
        elif not words or all(_said(w, names) for w in words):
            dropped[field] = "only names the field"
        elif not any(all(_said(w, set(c)) for w in words) for c in owned):
            dropped[field] = "not stated as the caller's: " + " ".join(words)
        else:
            kept[field] = " ".join(_with_modifier(words, [c for c in owned if all(_said(w, set(c)) for w in words)]))
    return kept, dropped


def _with_modifier(words: list[str], clauses: Sequence[list[str]]) -> list[str]:
    """``words`` (a kept value) with the one word the caller put between an article or "my" / "our" and it, in the
    first of ``clauses`` (owned clauses holding every word) where that is so: "I have a small dog" keeps "small
    dog" when the LLM wrote "dog" (the kind of thing the KB may price apart); "my plan is cigna" stays "cigna"."""
    for c in clauses:
        at = next((i for i, w in enumerate(c) if _said(words[0], {w})), None)
        if at is not None and at >= 2 and c[at - 2] in _OPENS_PHRASE and c[at - 1] not in _FILLER | _FIRST_PERSON:
            return [c[at - 1], *words]
    return words


def summarise(heard: Sequence[str], ask: Callable[[list[dict], dict], object],
              rules: PreferenceRules) -> tuple[dict[str, str], str]:
    """The caller's stated preferences from a call's turns ``heard`` (the transcripts, oldest first).

    ask: ``(messages, schema) -> rag.llm.client.LLMReply`` (the caller binds url, tokens, timeout); the schema is
    `rag.llm.client.record_schema` of the fields. Returns ``(kept, why)``: the `grounded` values and a note of what
    happened ("" when every value the LLM gave was kept; "llm: timeout" when the call failed, then nothing is kept;
    "dropped insurance (not said: humana)"). Never raises for a failing LLM."""
    from rag.llm.client import record_schema

    if not heard:
        return {}, "no turns"
    reply = ask(summary_messages(heard, rules), record_schema(list(rules.fields), rules.max_len))
    if getattr(reply, "error", None) or getattr(reply, "record", None) is None:
        return {}, f"llm: {getattr(reply, 'error', None) or 'no record'}"
    kept, dropped = grounded(reply.record, heard, rules)
    return kept, "; ".join(f"dropped {f} ({why})" for f, why in dropped.items())


def personalise(question: str, prefs: Mapping[str, str], rules: PreferenceRules) -> tuple[str, list[tuple[str, str]]]:
    """``question`` with each referent of a stored field replaced by its value as ``rules.searched_as`` says ("do
    you take my insurance" -> "do you take aetna insurance": the KB's word for the kind of thing stays, so an
    insurer the KB does not list still finds the insurance passage), and the ``(field, value)`` pairs used, in
    field order. Fields without a value, and questions naming no referent, are left as they are."""
    text, used = question, []
    for name in rules.fields:
        value = prefs.get(name)
        if not value:
            continue
        for ref in sorted(rules.referents[name], key=len, reverse=True):
            pattern = re.compile(rf"\b{re.escape(ref)}\b", re.I)
            if pattern.search(text):
                searched = rules.searched_as.get(name, "{value}").format(value=value)
                text = pattern.sub(lambda _: searched, text, count=1)
                used.append((name, value))
                break
    return text, used


def mention(used: Sequence[tuple[str, str]], rules: PreferenceRules) -> str:
    """What is said before the answer for the preferences ``used`` ("You told us you have aetna."); "" for none."""
    return " ".join(rules.mentions[f].format(value=v) for f, v in used)
