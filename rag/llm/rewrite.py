"""LLM query rewriting (issue 12, part 5): a follow-up into a standalone question, a garbled transcript into what
was probably asked.

One schema-bound call (`rag.llm.client.query_schema`: ``{"query": str}`` with a maxLength; temperature and seed
from `RewriteSettings`) under a deadline. The rule query (`rag.voice.followup.Resolver`, today's) is always the
fallback: when the server is down, late, answers malformed JSON or an empty string, or its rewrite brings in a
content word found neither in the transcript, the earlier questions nor the KB (``invented``), the rule query is
searched and `Rewrite.reason` says why. The LLM's text goes through rules 1-3 (`rag.voice.rewrite.normalise`) like
every query, so only the words differ from the rule path.

`LLMResolver` wraps a rule `Resolver` with the same ``resolve`` method, so `rag.voice.pipeline.answer_turn` can run
a call with LLM rewriting unchanged: mode ``llm`` shows the model the transcript and the earlier resolved questions;
``rules_then_llm`` also shows it the rule-resolved query.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from rag.llm.client import ask, query_schema
from rag.voice.followup import Resolution, Resolver
from rag.voice.rewrite import DEFAULT_RULES, RewriteRules, normalise
from rag.voice.selection import STOPWORDS, _stem

MODES = ("llm", "rules_then_llm")

SYSTEM_PROMPT = (
    "You help a phone assistant that answers callers' questions from a business's help pages. A speech recogniser "
    "wrote down what the caller said, so words may be misheard, and the caller may lean on earlier questions of "
    "the call (\"and on sunday?\", \"how much is it?\"). Write the one standalone question the caller most "
    "probably asked, in plain words, keeping what they said and taking the topic from the earlier questions only "
    "when the caller leans on them. Do not answer it. Reply with JSON {\"query\": \"...\"}.\n"
    "The help pages are about: "
)


@dataclass(frozen=True)
class RewriteSettings:
    """max_len: characters of the rewrite (the schema's maxLength); max_tokens: generated tokens; timeout_s: one
    call's cap in seconds (a turn's deadline can end it sooner); max_context: earlier questions shown (most recent
    last)."""

    max_len: int = 120
    max_tokens: int = 64
    timeout_s: float = 10.0
    temperature: float = 0.0
    seed: int = 0
    max_context: int = 2


@dataclass(frozen=True)
class Rewrite:
    """What one turn searches for. ``query``: the searched words (rules 1-3 applied); ``source``: "llm" or "rules";
    ``reason``: why the rule query was used (None when the LLM's was): an `rag.llm.client.ERRORS` code,
    ``no_server`` (url None), ``empty`` (nothing left after rules 1-3) or ``invented``; ``llm_text``: the model's
    reply as written (None without one); ``invented``: its content words found nowhere allowed; ``ms``: the call's
    wall-clock milliseconds (None without a call)."""

    query: str
    source: str
    reason: str | None = None
    llm_text: str | None = None
    invented: tuple[str, ...] = ()
    ms: float | None = None


def content_words(text: str, rules: RewriteRules = DEFAULT_RULES) -> list[str]:
    """The words of ``text`` (rules 1-3) that carry content: not `rag.voice.selection.STOPWORDS`, numbers kept."""
    return [w for w in normalise(text, rules) if w not in STOPWORDS]


def vocabulary(docs: Mapping[str, str], rules: RewriteRules = DEFAULT_RULES) -> frozenset[str]:
    """Stems (`rag.voice.selection._stem`) of every word of the KB's documents ``{doc: text}``."""
    return frozenset(_stem(w) for text in docs.values() for w in normalise(text, rules))


def invented_words(rewrite: str, sources: Sequence[str], vocab: frozenset[str],
                   rules: RewriteRules = DEFAULT_RULES) -> list[str]:
    """Content words of ``rewrite`` whose stem is in none of ``sources`` (the transcript, earlier questions, the
    rule query) nor ``vocab`` (`vocabulary`): words the model brought in from nowhere."""
    allowed = set(vocab) | {_stem(w) for s in sources for w in normalise(s, rules)}
    return [w for w in content_words(rewrite, rules) if _stem(w) not in allowed]


def topics(docs: Mapping[str, str]) -> str:
    """The KB's document titles (first line of each, ``#`` stripped), comma-separated: the prompt's topic list."""
    return ", ".join(text.strip().splitlines()[0].lstrip("#").strip() for text in docs.values() if text.strip())


def build_messages(transcript: str, earlier: Sequence[str], rule_query: str | None, kb_topics: str) -> list[dict]:
    """System prompt + topic list, then the earlier questions (oldest first), the rule rewrite when given and the
    transcript."""
    lines = [f"Earlier questions in this call: {'; '.join(earlier)}" if earlier else "No earlier questions."]
    if rule_query is not None:
        lines.append(f"A rule-based guess: {rule_query}")
    lines.append(f"What the recogniser heard: {transcript}")
    return [{"role": "system", "content": SYSTEM_PROMPT + kb_topics},
            {"role": "user", "content": "\n".join(lines)}]


def llm_rewrite(transcript: str, earlier: Sequence[str], fallback: str, url: str | None, vocab: frozenset[str],
                kb_topics: str, settings: RewriteSettings = RewriteSettings(), rules: RewriteRules = DEFAULT_RULES,
                show_fallback: bool = False, deadline: float | None = None) -> Rewrite:
    """Ask the LLM at ``url`` what ``transcript`` meant, given the ``earlier`` resolved questions (the last
    ``settings.max_context`` are shown). ``fallback``: the rule query, searched on any failure and shown to the
    model when ``show_fallback`` (mode rules_then_llm). ``deadline``: a `time.monotonic` instant the call must end
    by. Never raises for server faults (see `Rewrite.reason`)."""
    if url is None:
        return Rewrite(fallback, "rules", "no_server")
    shown = list(earlier)[-settings.max_context:] if settings.max_context > 0 else []
    t0 = time.perf_counter()
    reply = ask(url, build_messages(transcript, shown, fallback if show_fallback else None, kb_topics),
                query_schema(settings.max_len), max_tokens=settings.max_tokens, timeout_s=settings.timeout_s,
                temperature=settings.temperature, seed=settings.seed, deadline=deadline)
    ms = round((time.perf_counter() - t0) * 1000, 1)
    if reply.error:
        return Rewrite(fallback, "rules", reply.error, reply.raw or None, ms=ms)
    query = " ".join(normalise(reply.answer, rules))
    if not query:
        return Rewrite(fallback, "rules", "empty", reply.answer, ms=ms)
    new = invented_words(reply.answer, [transcript, fallback, *shown], vocab, rules)
    if new:
        return Rewrite(fallback, "rules", "invented", reply.answer, tuple(new), ms)
    return Rewrite(query, "llm", None, reply.answer, ms=ms)


@dataclass
class LLMResolver:
    """A `rag.voice.followup.Resolver` whose queries the LLM rewrites (`llm_rewrite`); a drop-in ``resolver`` for
    `rag.voice.pipeline.answer_turn`. ``mode``: one of `MODES`. A turn the rules resolve as ``no_antecedent`` is
    left so (nothing to lean on: the chain asks what the caller means); every other turn keeps the rule's kind and
    antecedent. ``rewrites``: every resolved turn's `Rewrite` in order (None for a no_antecedent turn)."""

    rules_resolver: Resolver
    url: str | None
    vocab: frozenset[str]
    kb_topics: str
    mode: str = "llm"
    settings: RewriteSettings = RewriteSettings()
    rewrites: list[Rewrite | None] = field(default_factory=list, init=False)

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")

    def resolve(self, asr: str, history: Sequence[str] = ()) -> Resolution:
        """As `Resolver.resolve`, with the query the LLM's rewrite when it passed (else the rule query)."""
        res = self.rules_resolver.resolve(asr, history)
        if res.kind == "no_antecedent":
            self.rewrites.append(None)
            return res
        r = llm_rewrite(asr, history, res.query, self.url, self.vocab, self.kb_topics, self.settings,
                        self.rules_resolver.rewrite, self.mode == "rules_then_llm")
        self.rewrites.append(r)
        return Resolution(r.query, res.kind, res.antecedent, res.focus)
