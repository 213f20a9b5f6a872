"""Answer one query: retrieve, gate on tau, ask the LLM within a schema, verify, fall back.

Statuses of what is said: ``llm`` (a verified model answer), ``extractive`` (a sentence of a
retrieved document, read verbatim), ``refused`` (the refusal sentence; gated or nothing safe to say).
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping, NamedTuple, Sequence

import numpy as np

from rag.llm.client import LLMReply, answer_schema, ask, build_messages
from rag.retrieval.chunk import Passage
from rag.retrieval.search import FUSIONS, MODES, STEMMERS, HybridConfig, PassageIndex
from rag.voice.selection import AnswerScorer, terms
from rag.retrieval.sentences import SentenceIndex
from rag.retrieval.indexes import identifiers, same_number
from rag.voice.verify import (DEFAULT_VERIFY, VerifyRules, asked_types, holds_answer_type,
                             slots_conflict, split_sentences, verify)

STATUSES = ("llm", "extractive", "refused")
CONTEXTS = ("retrieved", "knowledge_base")  # `AnswerSettings.context`: what the LLM is shown


@dataclass(frozen=True)
class AnswerSettings:
    """Answer-step settings (params.yaml ``answer`` and ``llm``)."""

    k: int = 3
    mode: str = "dense"             # retrieval mode
    tau: float = 0.0                # refuse when the top-1 cosine is below it
    refusal: str = "I'm not sure about that. Let me connect you to the front desk."
    answer_mode: str = "free"       # free: the model writes; choose: it picks a retrieved sentence
    max_len: int = 160              # characters of a free answer (maxLength in the schema)
    max_tokens: int = 128
    timeout_s: float = 30.0
    temperature: float = 0.0
    seed: int = 0
    model: str | None = None
    hybrid: HybridConfig = field(default_factory=HybridConfig)  # ranks passages, and sentences for `extractive`
    sentence_stemmer: str = "none"  # the BM25 stemmer of the sentence ranking (`sentence_hybrid`): none | snowball
    sentence_fusion: str = "rrf"    # how the sentence ranking joins its lists (`sentence_hybrid`): `FUSIONS`
    min_sentence_cosine: float = 0.0  # an extractive sentence less similar to the query is not said (refused)
    deadline_s: float = 0.0         # the whole turn's budget (0: none, only timeout_s bounds the LLM call)
    reserve_s: float = 0.0          # of it, kept for what follows the LLM call (verify, the extractive pick)
    context: str = "retrieved"      # what the LLM is shown: `CONTEXTS` (`shown_documents`)
    context_max_chars: int = 12000  # knowledge_base: the most characters of documents shown; a larger KB: retrieved

    def __post_init__(self):
        if self.deadline_s < 0 or self.reserve_s < 0 or (self.deadline_s and self.reserve_s >= self.deadline_s):
            raise ValueError(f"answer.deadline_s must be >= 0 and answer.reserve_s in [0, deadline_s); got "
                             f"{self.deadline_s} and {self.reserve_s}")
        if not -1.0 <= self.min_sentence_cosine <= 1.0:
            raise ValueError(f"answer.min_sentence_cosine is a cosine, in [-1, 1]; got {self.min_sentence_cosine}")
        if self.k < 1:
            raise ValueError(f"retrieval.k (passages retrieved) must be at least 1, got {self.k}")
        if self.mode not in MODES:
            raise ValueError(f"unknown retrieval mode {self.mode!r}; expected one of {MODES}")
        if self.context not in CONTEXTS:
            raise ValueError(f"llm.context must be one of {CONTEXTS}, got {self.context!r}")
        if self.context_max_chars < 1:
            raise ValueError(f"llm.context_max_chars must be at least 1, got {self.context_max_chars}")
        if self.answer_mode not in ("free", "choose"):
            raise ValueError(f"answer.mode must be free or choose, got {self.answer_mode!r}")
        if self.sentence_stemmer not in STEMMERS:
            raise ValueError(f"answer.sentence_stemmer must be one of {STEMMERS}, got {self.sentence_stemmer!r}")
        if self.sentence_fusion not in FUSIONS:
            raise ValueError(f"answer.sentence_fusion must be one of {FUSIONS}, got {self.sentence_fusion!r}")

    @property
    def sentence_hybrid(self) -> HybridConfig:
        """How `pick_sentence` ranks the retrieved sentences: ``hybrid`` with ``sentence_stemmer``, fused as
        ``sentence_fusion`` says (``retrieval.fusion`` is the passages'; a convex sentence ranking uses
        ``hybrid.convex_weights``)."""
        return replace(self.hybrid, stemmer=self.sentence_stemmer, fusion=self.sentence_fusion,
                       sentence_weight=0.0)   # sentences have no sentences to list


def retrieve(index: PassageIndex, query: str, vector: np.ndarray, settings: AnswerSettings):
    """``(passages, docs, doc_scores)``: the top-k passages in the configured mode, their document names (no
    duplicates, best first) and each document's best passage score in that mode (cosine, BM25 or RRF)."""
    ranking = index.ranking(query, settings.mode, vector)[:settings.k]
    passages = [index.passages[i] for i, _ in ranking]
    best: dict[str, float] = {}
    for i, score in ranking:
        best.setdefault(index.passages[i].doc, float(score))
    return passages, list(best), list(best.values())


def turn_deadline(settings: AnswerSettings, start: float | None = None) -> float | None:
    """The `time.monotonic` instant a turn begun at ``start`` (default now) must be answered by; None without a
    deadline (``settings.deadline_s`` 0)."""
    if not settings.deadline_s:
        return None
    return (time.monotonic() if start is None else start) + settings.deadline_s


def ask_llm(url: str, query: str, passages, docs: Sequence[str], settings: AnswerSettings,
            kb: Mapping[str, str], deadline: float | None = None, memory: Sequence[str] = ()) -> LLMReply:
    """One schema-bound LLM call citing the retrieved documents ``docs`` (shown the retrieved ``passages``, or the
    whole ``kb`` as `shown_documents` says; see `rag.llm.client.ask`), ended (and cancelled)
    ``settings.reserve_s`` before the turn's ``deadline`` (a `time.monotonic` instant; None: only timeout_s).
    ``memory``: earlier turns of the call shown as ``[memory n]`` (`rag.llm.client.build_messages`), never a source."""
    enum = None
    if settings.answer_mode == "choose":
        enum = list(dict.fromkeys(s for d in docs for s in split_sentences(kb[d])))
    schema = answer_schema(docs, settings.max_len, enum)
    return ask(url, build_messages(query, shown_documents(passages, kb, settings), memory), schema,
               max_tokens=settings.max_tokens, timeout_s=settings.timeout_s,
               temperature=settings.temperature, seed=settings.seed, model=settings.model,
               deadline=None if deadline is None else deadline - settings.reserve_s)


def shown_documents(passages, kb: Mapping[str, str], settings: AnswerSettings) -> list[tuple[str, str]]:
    """``(doc id, text)`` the LLM is shown for a question whose retrieved passages are ``passages``.

    ``settings.context`` ``retrieved``: those passages, best first. ``knowledge_base``: every document of ``kb``
    whole, in name order, the same for every question, so that llama.cpp's server reuses the prompt's computed
    prefix (its KV cache) and reads only the question: cache-augmented generation (Chan et al. 2024, "Don't Do
    RAG"), for a KB small enough to show. A KB of more than ``settings.context_max_chars`` characters gets the
    retrieved passages. Either way the schema offers only the retrieved documents (and their sentences) to cite,
    and the verifier checks the cited one: what is shown is not what may be said."""
    if settings.context == "knowledge_base" and sum(map(len, kb.values())) <= settings.context_max_chars:
        return sorted(kb.items())
    return [(p.doc, p.text) for p in passages]


def candidate_sentences(query: str, docs: Sequence[str], sentences: SentenceIndex,
                        rules: VerifyRules = DEFAULT_VERIFY, said: frozenset[str] = frozenset(),
                        focus: frozenset[str] = frozenset()) -> list[tuple[str, str, np.ndarray]]:
    """``(sentence, doc, (384,) unit vector)`` of every sentence of ``docs`` (in order; a doc not in
    ``sentences`` has none) whose slots (day, service) do not contradict the query (a Saturday question never
    gets the weekday sentence) and that is not in ``said`` (what the caller already heard for the turn this one
    follows up: "and for a cat?" never gets the dog's price again). ``focus``: key-term stems
    (`rag.voice.selection.terms`) of what a follow-up adds (`rag.voice.followup.Resolution.focus`); when some
    candidate holds one, only those that do ("and checks" after a credit-card question gets a sentence naming
    checks, not the card sentence its merged query ranks first)."""
    cands = [(s, d, v) for d in docs for s, v in sentences.of(d)
             if s not in said and not slots_conflict(query, s, rules)]
    if focus:
        return [c for c in cands if focus.intersection(terms(c[0]))] or cands
    return cands


def pick_sentence(query: str, vector: np.ndarray, sentences: Sequence[str], vectors: np.ndarray,
                  rules: VerifyRules = DEFAULT_VERIFY, mode: str = "dense",
                  hybrid: HybridConfig = HybridConfig()) -> int:
    """Index of the sentence to read out: those naming a phone number or code the query quotes
    (`rag.retrieval.indexes.identifiers`) first, then those holding the asked-for answer type (a duration for
    "how long", `rag.voice.verify.asked_types`), then the best rank when the sentences are searched
    like passages (``mode`` and ``hybrid``, the retrieval settings: in ``hybrid_phonetic`` BM25 and the
    sound-alike list vote, not cosine alone); ties by position.

    vector: (384,) unit query embedding; vectors: (len(sentences), 384) unit sentence embeddings.
    Raises ValueError for no sentences.
    """
    if not sentences:
        raise ValueError("no sentences to pick from")
    types = asked_types(query, rules)
    typed = [bool(types) and holds_answer_type(s, types, rules) for s in sentences]
    named = quoted(query, sentences)
    index = PassageIndex([Passage(str(i), str(i), s) for i, s in enumerate(sentences)], vectors, hybrid)
    position = {i: r for r, (i, _) in enumerate(index.ranking(query, mode, vector))}
    return min(range(len(sentences)), key=lambda i: (-named[i], -typed[i], position.get(i, len(sentences)), i))


def quoted(query: str, texts: Sequence[str]) -> list[bool]:
    """For each text, whether it names a phone number or code that ``query`` quotes (`rag.retrieval.indexes.identifiers`)."""
    asked = identifiers(query)
    return [bool(asked) and any(same_number(a, b) for a in asked for b in identifiers(t)) for t in texts]


# A sentence opening with a pronoun that points back names no subject when read alone ("It takes about 90 minutes."),
# nor does one ending on a demonstrative that stands for things named before it ("We can recommend another shop for
# those.": a new-user pass, session 57).
POINTS_BACK = re.compile(r"(?:It|Its|They|Their|Them|This|That|These|Those|He|His|She|Her)\b|.*\b[Tt]h(?:ese|ose)\W*$")


def with_antecedent(sentence: str, doc: str, sentences: SentenceIndex, most: int = 3) -> list[str]:
    """The sentences to say for ``sentence`` of ``doc``, in document order: the sentence itself, preceded, while the
    first of them opens with a pronoun that points back or ends on "these" / "those" (`POINTS_BACK`: "It takes about
    90 minutes.", "We can recommend another shop for those."), by the
    sentence before it in the document, up to ``most`` sentences ("A basic tune-up costs $60. It takes about 90
    minutes."): all the document's own words, verbatim. A sentence that is not one of the document's (a free LLM
    answer) or that opens the document stays alone. Limits: `rag.voice.verify.split_sentences` drops headings, so
    the sentence before may end another section; a sentence repeated in a document takes its first copy's."""
    said = [sentence]
    while len(said) < most and POINTS_BACK.match(said[0]):
        before = sentences.contexts([(said[0], doc)])[0]
        if not before:
            break
        said.insert(0, before)
    return said


class Extract(NamedTuple):
    """An extractive pick: the sentence, its document, its cosine with the query (MiniLM, [-1, 1]; a sentence said with
    the ones before it, `with_antecedent`, takes the best of their cosines), when a scorer picked it its answer
    score (`rag.voice.selection.AnswerScorer`, [0, 1]; else None), and what is said for it (`with_antecedent`)."""

    sentence: str
    doc: str
    cosine: float
    score: float | None = None
    said: tuple[str, ...] = ()


def extractive(query: str, vector: np.ndarray, docs: Sequence[str], sentences: SentenceIndex,
               rules: VerifyRules = DEFAULT_VERIFY, mode: str = "dense",
               hybrid: HybridConfig = HybridConfig(), scorer: AnswerScorer | None = None,
               said: frozenset[str] = frozenset(), focus: frozenset[str] = frozenset()) -> Extract | None:
    """The retrieved sentence to read out instead of a failed answer, among `candidate_sentences` (their vectors
    precomputed in ``sentences``; ``said`` left out, ``focus`` held where any holds it): with ``scorer`` (the learned answer selection) those naming a
    phone number or code the query quotes first (`quoted`), then those holding the asked-for answer type of the KB's
    table (none without a table), then the best score; without one, `pick_sentence` (quoted identifiers, answer-type
    tables, then the retrieval ranking). None if every candidate contradicts the query."""
    cands = candidate_sentences(query, docs, sentences, rules, said, focus)
    if not cands:
        return None
    vectors = np.stack([v for _, _, v in cands])
    if scorer is None:
        best, score = pick_sentence(query, vector, [s for s, _, _ in cands], vectors, rules, mode, hybrid), None
    else:
        scores = scorer.scores(query, vector, cands, sentences.contexts(cands), sentences.texts, sentences.stats)
        types = asked_types(query, rules)  # the KB's answer-type table, when it has one, is a hint: typed first
        typed = [bool(types) and holds_answer_type(s, types, rules) for s, _, _ in cands]
        named = quoted(query, [s for s, _, _ in cands])
        best = min(range(len(cands)), key=lambda i: (-named[i], -typed[i], -scores[i], i))
        score = round(float(scores[best]), 6)
    sentence, doc = cands[best][0], cands[best][1]
    say = tuple(with_antecedent(sentence, doc, sentences))
    cosine = max(float(v @ vector) for s, v in sentences.of(doc) if s in say) if len(say) > 1 else \
        float(vectors[best] @ vector)
    return Extract(sentence, doc, round(cosine, 6), score, say)


def answer_score(answer: str, source: str, query: str, vector: np.ndarray, docs: Sequence[str],
                 sentences: SentenceIndex, scorer: AnswerScorer, rules: VerifyRules = DEFAULT_VERIFY) -> float:
    """The scorer's probability that an LLM ``answer`` (citing ``source``) answers ``query``, scored among the
    retrieved candidates (its gaps are to the best of them). A verbatim KB sentence of ``source`` keeps its
    precomputed vector and the sentence before it as context; other text is embedded now."""
    cands = candidate_sentences(query, docs, sentences, rules)
    own = [(s, d, v) for s, d, v in cands if s == answer and d == source]
    if own:
        i = cands.index(own[0])
    else:
        from rag.retrieval.embed import passage_embedder

        cands, i = cands + [(answer, source, passage_embedder().embed_one(answer))], len(cands)
    contexts = sentences.contexts(cands)
    return float(scorer.scores(query, vector, cands, contexts, sentences.texts, sentences.stats)[i])


def pick_for(row: dict, kb: Mapping[str, str], vector: np.ndarray, settings: AnswerSettings,
             rules: VerifyRules = DEFAULT_VERIFY, sentences: SentenceIndex | None = None,
             scorer: AnswerScorer | None = None, said: frozenset[str] = frozenset(),
             focus: frozenset[str] = frozenset()) -> Extract | None:
    """The extractive pick `decide` falls back on for ``row`` (retrieved, not gated; `extractive` over the retrieved
    documents' sentences in ``settings``' ranking): the same whether made before the LLM is asked (`answer_row`'s
    ``before_llm``, so that little is left to do once the LLM's time is up) or after. ``sentences`` None: the
    retrieved documents are split and embedded now."""
    if sentences is None:
        sentences = SentenceIndex.build({d: kb[d] for d in row["retrieved"] if d in kb})
    return extractive(row["query"], vector, row["retrieved"], sentences, rules, settings.mode,
                      settings.sentence_hybrid, scorer, said, focus)


def decide(row: dict, kb: Mapping[str, str], vector: np.ndarray, settings: AnswerSettings,
           rules: VerifyRules = DEFAULT_VERIFY, sentences: SentenceIndex | None = None,
           scorer: AnswerScorer | None = None, said: frozenset[str] = frozenset(),
           judge: AnswerScorer | None = None, focus: frozenset[str] = frozenset(),
           fallback: tuple[Extract | None, ...] = ()) -> dict:
    """What is said for one answer row (see `answer_row`): ``{id, say, source, status, reason}``.

    fallback: the extractive pick (`pick_for`) when it was made before the LLM was asked, as a 1-tuple (its pick may
    be None); empty: made here, once and only when needed.

    said: what the caller already heard for the turn this one follows up (`rag.voice.pipeline.answer_turn`):
    never said again (an LLM answer repeating it fails with reason ``repeats_earlier_answer``; the extractive
    pick leaves it out). focus: what that follow-up adds (`candidate_sentences`): the extractive pick holds it where
    a candidate does.

    sentences: the KB's `SentenceIndex`, built once at index time; None splits and embeds the retrieved
    documents now (the query-time path: ~10x slower a turn on long paragraphs, see bench.json).
    scorer: the learned answer selection (`rag.voice.selection.AnswerScorer`); None keeps the table-driven pick.
    judge: the learned scorer that checks LLM answers when ``scorer`` is None (params ``select.judge``); with a
    scorer, the scorer judges. None (and no scorer): the verifier alone.

    A gated row says the refusal. An LLM answer is said as is when it passes `rag.voice.verify.verify` and, with a
    judge, answers the question (`answer_score` >= ``judge.min_score``, reason ``does_not_answer`` otherwise)
    at least as well as the extractive pick, scored by the same judge (``weaker_than_extractive`` otherwise): with
    the LLM on, nothing the judge ranks below the LLM-off pick is said. Anything else is replaced by `extractive`,
    or by the refusal when no sentence agrees with the query, the pick's cosine is below
    ``settings.min_sentence_cosine`` (with or without a scorer; not when it names a phone number or code the query
    quotes, `quoted`) or its score is below ``scorer.min_score``
    (``no_sentence_answers``: the scorer's part of the gate).
    ``reason`` records why (the LLM error code or the verifier's reason, then the fallback's). A KB sentence that
    opens with a pronoun pointing back is said with the sentence before it (`with_antecedent`).
    """
    if row["gated"]:
        return {"id": row["id"], "say": settings.refusal, "source": "none", "status": "refused",
                "reason": "below_tau"}
    picked: list = list(fallback)

    def pick() -> Extract | None:
        """The extractive pick, made once and only when needed (a verified LLM answer without a scorer needs none)."""
        nonlocal sentences
        if sentences is None:  # the judge reads them too
            sentences = SentenceIndex.build({d: kb[d] for d in row["retrieved"] if d in kb})
        if not picked:
            picked.append(pick_for(row, kb, vector, settings, rules, sentences, scorer, said, focus))
        return picked[0]

    if row["error"]:
        reason = f"llm_{row['error']}"
    else:
        ok, reason = verify(row["answer"], row["source"], row["retrieved"], kb, row["query"], rules)
        if ok and row["answer"] in said:
            ok, reason = False, "repeats_earlier_answer"
        judge = scorer if scorer is not None else judge
        if ok and judge is not None:
            fallback = pick()

            def judged(answer: str, source: str) -> float:
                return round(answer_score(answer, source, row["query"], vector, row["retrieved"], sentences, judge,
                                          rules), 6)  # Extract.score is rounded to 6

            score = judged(row["answer"], row["source"])
            if score < judge.min_score:
                ok, reason = False, "does_not_answer"
            elif fallback is not None and score < (fallback.score if scorer is not None
                                                    else judged(fallback.sentence, fallback.doc)):
                ok, reason = False, "weaker_than_extractive"
        if ok:
            say = row["answer"]
            if POINTS_BACK.match(say):  # a chosen KB sentence that names no subject alone
                if sentences is None:
                    sentences = SentenceIndex.build({d: kb[d] for d in row["retrieved"] if d in kb})
                say = " ".join(with_antecedent(say, row["source"], sentences))
            return {"id": row["id"], "say": say, "source": row["source"], "status": "llm",
                    "reason": "verified"}
    fallback = pick()
    if fallback is None:
        why = "no sentence agrees with the query"
    elif fallback.cosine < settings.min_sentence_cosine and not quoted(row["query"], [fallback.sentence])[0]:
        # whatever ranked it first; a sentence naming the number the question quotes is the one it asks about
        why = "sentence_below_min_cosine"
    elif scorer is not None and fallback.score < scorer.min_score:
        why = "no_sentence_answers"
    else:
        return {"id": row["id"], "say": " ".join(fallback.said),
                "source": fallback.doc, "status": "extractive",
                "reason": reason}
    return {"id": row["id"], "say": settings.refusal, "source": "none", "status": "refused",
            "reason": f"{reason}; {why}"}


NOT_SENT = ("unreachable", "busy", "http_error")  # LLM errors after which the model read nothing of the prompt


def answer_row(qid: str, query: str, index: PassageIndex, vector: np.ndarray, score: float,
               settings: AnswerSettings, kb: Mapping[str, str], url: str | None,
               deadline: float | None = None, memory: Sequence[str] = (),
               before_llm: Callable[[dict], None] | None = None) -> dict:
    """Retrieve, gate and (if not gated) ask the LLM for one query; the answers.jsonl row.

    score: the abstention signal compared with tau; a question quoting a phone number or code that the top
    passage holds verbatim is never gated ("what is 555-0177": the gate's signals see two digit groups, the
    passage is the one naming them; `quoted`). url None means no server could be started:
    the row carries error "unreachable". deadline: the turn's (`turn_deadline`); None starts one here (when
    ``settings.deadline_s`` is set). The LLM gets what is left of it less ``settings.reserve_s``: past that the
    row carries error "timeout" and the caller says the extractive sentence or the refusal in time. memory: earlier
    turns of the call the LLM sees (`ask_llm`); the row's ``memory`` counts them when the model got the request
    (not for the `NOT_SENT` errors). before_llm: called with the row (retrieved, not gated) just before the LLM is
    asked, inside the deadline (`rag.voice.pipeline.answer_query` makes its fallback pick there, `pick_for`).
    """
    if deadline is None:
        deadline = turn_deadline(settings)
    passages, docs, doc_scores = retrieve(index, query, vector, settings)
    row = {"id": qid, "query": query, "retrieved": docs, "retrieved_scores": [round(s, 6) for s in doc_scores],
           "score": round(score, 6),
           "gated": score < settings.tau and not (passages and quoted(query, [passages[0].text])[0]),
           "answer": None, "source": None, "error": None,
           "detail": "", "first_token_ms": None, "total_ms": None, "timings": None}
    if row["gated"]:
        return row
    if url is None:
        row.update(error="unreachable", detail="no LLM server")
        return row
    if before_llm is not None:
        before_llm(row)
    reply = ask_llm(url, query, passages, docs, settings, kb, deadline, memory)
    if memory and reply.error not in NOT_SENT:
        row["memory"] = len(memory)
    row.update(answer=reply.answer, source=reply.source, error=reply.error, detail=reply.detail,
               first_token_ms=_ms(reply.first_token_ms), total_ms=_ms(reply.total_ms), timings=reply.timings)
    return row


def _ms(x: float | None) -> float | None:
    return None if x is None else round(x, 1)
