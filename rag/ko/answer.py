"""Grounded Korean answers: ``[문서 n]`` prompts, a citation schema, a rule verifier, an extractive
fallback and rule-based generation metrics (no LLM judge).

The model sees the top-k passages numbered ``[문서 1]..[문서 k]`` and must reply
``{"answer": str, "citations": ["1".."k" | "none", ...]}`` (`rag.llm.client.cited_schema`, sent by
`rag.llm.client.ask`). When the passages lack the answer the only allowed answer is `ABSTAIN`, cited "none".

Verifier (`verify_ko`): an answer passes when its citations are valid (`citations_valid`), it agrees
in polarity with its supporting cited sentence (`is_negative_ko`: 아니/않/못/없...), every key term (Kiwi
content morpheme, `rag.ko.tokenize.kiwi_tokens`) occurs in the cited passages, and its numbers occur in ONE
cited sentence together with its key terms, and that sentence answers the question by a support score
(`sentence_support`: the sentence must answer this question, not only share the answer's words; the score is
`ShareSupport`, the share of the question's key terms, or `rag.ko.support.LearnedSupport`, fitted on KorQuAD
train); an abstention cited "none" passes as an abstention. A failed answer is replaced (`decide_ko`) by the
passage sentence the support scores highest (`extractive_ko`), or by `ABSTAIN` when it is under the support's
``min_score``.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from rag.eval.intervals import bootstrap_interval
from rag.ko import tokenize as korean
from rag.llm.client import LLMReply, ask, cited_schema

ABSTAIN = "제공된 문서에서 찾을 수 없습니다"

_INSTRUCTIONS = (
    "You answer Korean questions using ONLY the numbered documents [문서 1], [문서 2], ... given with "
    "the question. Reply with JSON: \"answer\" is a short Korean answer copied from the documents, "
    "\"citations\" lists the numbers of the documents that contain it (e.g. [\"1\"]). "
    f"If no document contains the answer, reply exactly {{\"answer\": \"{ABSTAIN}\", \"citations\": [\"none\"]}}.")

# Two worked examples (made up here, not KorQuAD text): one answered and cited, one abstention.
_EXAMPLES = (
    (["부산은 대한민국 남동부의 항구 도시이다. 부산의 인구는 약 340만 명이다.",
      "한라산은 제주도에 있는 산으로 높이는 1,947미터이다."],
     "한라산의 높이는?",
     {"answer": "1,947미터", "citations": ["2"]}),
    (["세종대왕은 1443년에 훈민정음을 창제하였다.",
      "경복궁은 1395년에 지어진 조선의 궁궐이다."],
     "이순신 장군이 태어난 해는?",
     {"answer": ABSTAIN, "citations": ["none"]}),
)

PROMPTS = ("A_baseline", "B_fewshot")

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")

# Negation morphemes as (Kiwi form, base tag): 아니다 (VCN), 아니/안/못 adverbs (MAG), 아니요 (IC, "no"),
# auxiliaries 않다/못하다/말다 (VX: "가지 않았다", "먹지 못한다", "복용하지 마십시오"), 없다 (VA: "할 수 없다").
# Tags keep homographs out: 안 "inside" (NNG), 관계없이 (one MAG) are not negations.
NEGATIONS_KO = frozenset({("아니", "VCN"), ("아니", "MAG"), ("아니", "IC"), ("아니요", "IC"), ("아니오", "IC"),
                          ("안", "MAG"), ("못", "MAG"), ("않", "VX"), ("못하", "VX"), ("말", "VX"), ("없", "VA")})
# An answer ending in a predicate (a verb, adjective, copula or their suffix) or in an ending other than the
# adnominal one (ETM) states a clause whose polarity counts; a noun or number span ("1919년", "열린 공판 증인")
# does not: KorQuAD gold spans sit in sentences with a negation elsewhere 199 times in 1,500 dev questions;
# with this rule 4 of 3,000 gold spans (gold passage cited) fail the polarity check.
_PREDICATE_TAGS = frozenset({"VV", "VA", "VX", "VCN", "VCP", "XSV", "XSA"})
_PUNCTUATION_TAGS = frozenset({"SF", "SP", "SS", "SSO", "SSC", "SE", "SO", "SW"})
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
# Share of the question's key terms the sentence holding an answer must contain under the rule (`ShareSupport`, the
# default of `verify_ko` and `extractive_ko`); params ko_gen.min_question_share, used when ko_gen.support is share
# (README "Grounded Korean answers": chosen on the train split).
MIN_QUESTION_SHARE = 0.6


def number_documents(passages: Sequence[str]) -> str:
    """``"[문서 1] text\\n[문서 2] text..."`` for passages in rank order."""
    return "\n".join(f"[문서 {i}] {text}" for i, text in enumerate(passages, 1))


def user_message(question: str, passages: Sequence[str]) -> str:
    """The user turn: the numbered documents, then ``질문: question``."""
    return f"{number_documents(passages)}\n\n질문: {question}"


def build_ko_messages(question: str, passages: Sequence[str], prompt: str) -> list[dict]:
    """Chat messages for prompt variant ``A_baseline`` (instructions only) or ``B_fewshot``
    (instructions, then the two `_EXAMPLES` as user/assistant turns). The documents come after
    the fixed part, so llama.cpp's prompt cache reuses it across calls. ValueError for another name."""
    if prompt not in PROMPTS:
        raise ValueError(f"unknown prompt {prompt!r}; expected one of {PROMPTS}")
    messages = [{"role": "system", "content": _INSTRUCTIONS}]
    if prompt == "B_fewshot":
        for docs, q, reply in _EXAMPLES:
            messages += [{"role": "user", "content": user_message(q, docs)},
                         {"role": "assistant", "content": json.dumps(reply, ensure_ascii=False)}]
    return messages + [{"role": "user", "content": user_message(question, passages)}]


def labels(k: int) -> list[str]:
    """Citation labels of k documents: ``["1", ..., "k"]``."""
    return [str(i) for i in range(1, k + 1)]


def is_abstention(answer: str | None) -> bool:
    """True when ``answer`` is `ABSTAIN`, ignoring surrounding spaces and a final ``.``."""
    return answer is not None and answer.strip().rstrip(".").strip() == ABSTAIN


def citations_valid(answer: str, citations: Sequence[str] | None, k: int) -> bool:
    """Citation validity: a non-empty list whose items are all in ``1..k`` with no repeats, or exactly
    ``["none"]``; and ``["none"]`` if and only if the answer is the abstention sentence."""
    if not citations:
        return False
    if is_abstention(answer):
        return list(citations) == ["none"]
    return (len(set(citations)) == len(citations)
            and all(c in labels(k) for c in citations))


def key_terms(text: str) -> set[str]:
    """Key terms of a text: its distinct Kiwi content morphemes (lower-cased)."""
    return set(korean.kiwi_tokens(text))


def unsupported_terms(answer: str, cited: Sequence[str]) -> set[str]:
    """Key terms of ``answer`` found in none of the ``cited`` passage texts (neither among their
    morphemes nor as a substring: Kiwi may split a term differently inside a longer sentence)."""
    text = "\n".join(cited).lower()
    known = key_terms(text) if cited else set()
    return {t for t in key_terms(answer) if t not in known and t not in text}


def cited_passages(citations: Sequence[str] | None, passages: Sequence[str]) -> list[str]:
    """Texts of the passages the citations name (labels outside ``1..len(passages)`` skipped)."""
    return [passages[int(c) - 1] for c in dict.fromkeys(citations or ())
            if c.isdigit() and 1 <= int(c) <= len(passages)]


def _morphemes(text: str) -> list[tuple[str, str]]:
    return [(t.form, t.tag.split("-")[0]) for t in korean.kiwi().tokenize(text)] if text.strip() else []


def _is_clause(morphemes: Sequence[tuple[str, str]]) -> bool:
    last = [tag for _, tag in morphemes if tag not in _PUNCTUATION_TAGS][-1:]
    return bool(last) and (last[0] in _PREDICATE_TAGS or (last[0].startswith("E") and last[0] != "ETM"))


def is_negative_ko(text: str) -> bool:
    """True if Kiwi finds a negation morpheme of `NEGATIONS_KO` in ``text`` ("복용할 수 없다", "가지 않았다")."""
    return any(m in NEGATIONS_KO for m in _morphemes(text))


def polarity_agrees(answer: str, cited: Sequence[str]) -> bool:
    """Whether ``answer`` agrees in negation with its supporting sentence: among the ``cited`` passage
    sentences sharing the most key terms with it (at least one; 있/없 left out, they are the polarity
    judged), one whose `is_negative_ko` equals the answer's. A negative answer is always checked; a
    positive one only when it is a clause (ends in a predicate or a final/connective ending: "복용할 수
    있다"): a noun or number span asserts no polarity. True when no sentence shares a term (the terms
    check judges that answer)."""
    morphemes = _morphemes(answer)
    negative = any(m in NEGATIONS_KO for m in morphemes)
    if not negative and not _is_clause(morphemes):
        return True
    terms = key_terms(answer) - {"있", "없"}
    scored = [(len(terms & key_terms(s)), s) for text in cited for s in split_sentences_ko(text)]
    best = max((n for n, _ in scored), default=0)
    return best == 0 or any(is_negative_ko(s) == negative for n, s in scored if n == best)


def numbers_ko(text: str) -> set[str]:
    """The numbers written in ``text`` as digits, thousands commas dropped, leading zeros dropped from
    whole numbers: "1,947미터" -> {"1947"}, "3.5%" -> {"3.5"}, "2010-09-28" -> {"2010", "9", "28"}."""
    out = set()
    for m in _NUMBER.findall(text):
        n = m.replace(",", "")
        out.add(n if "." in n else str(int(n)))
    return out


def question_share(question: str, sentence: str) -> tuple[int, float]:
    """``(n, share)``: how many of the question's non-number key terms the sentence holds (as morphemes or
    substrings, like `unsupported_terms`), and that count over the question's terms (1.0 for a question with
    none)."""
    asked = {t for t in key_terms(question) if not _NUMBER.fullmatch(t)}
    shared = held_terms(asked, sentence)
    return shared, shared / len(asked) if asked else 1.0


def held_terms(terms: set[str], sentence: str) -> int:
    """How many of ``terms`` the sentence holds as a Kiwi morpheme or as a substring (Kiwi reads "영업시간" in a
    sentence as one morpheme where the question's "영업 시간" gives two)."""
    morphemes, low = key_terms(sentence), sentence.lower()
    return sum(t in morphemes or t in low for t in terms)


def choose_question_share(supported: Sequence[float], unsupported: Sequence[float],
                          grid: Sequence[float]) -> tuple[float, list[dict]]:
    """The ``min_question_share`` of ``grid`` that best separates sentences that answer the question from sentences
    that do not: maximise Youden's J = (share of ``supported`` >= value) - (share of ``unsupported`` >= value)
    (Youden 1950); ties: the lower value (fewer right answers lost). ``supported``: per question, the
    `question_share` of the sentence holding the gold answer; ``unsupported``: per question, that of the best
    sentence when the gold passage is left out. Returns ``(value, table)``, one table row per grid value:
    ``{min_question_share, supported_kept, unsupported_kept, j}``. Raises ValueError for an empty input."""
    if not len(supported) or not len(unsupported) or not len(grid):
        raise ValueError("choose_question_share needs supported and unsupported shares and a grid")
    pos, neg = np.asarray(supported, float), np.asarray(unsupported, float)
    table = []
    for v in sorted(float(x) for x in grid):
        kept, leaked = float(np.mean(pos >= v)), float(np.mean(neg >= v))
        table.append({"min_question_share": v, "supported_kept": round(kept, 4), "unsupported_kept": round(leaked, 4),
                      "j": round(kept - leaked, 4)})
    best = max(table, key=lambda r: (r["j"], -r["min_question_share"]))
    return best["min_question_share"], table


class ShareSupport:
    """The rule: a sentence supports an answer to a question when it holds at least one and at least ``min_score`` of
    the question's non-number key terms (`question_share`), or all of them. ``scores`` is that share (1.0 for a
    question with no such terms), or -1 for a sentence sharing none; a sentence is supported when its score is at
    least ``min_score``. ``order`` ranks the extractive candidates: how many distinct question key terms, numbers
    included, a sentence holds (`held_terms`); a best candidate holding none is never said.

    The protocol `rag.ko.support.LearnedSupport` also follows: ``scores(question, sentences, shown)`` and
    ``order(question, sentences, shown)`` -> (len(sentences),) float64, ``min_score``."""

    name = "share"

    def __init__(self, min_score: float = MIN_QUESTION_SHARE):
        if not 0.0 <= min_score <= 1.0:
            raise ValueError(f"min_question_share must be in [0, 1], got {min_score}")
        self.min_score = float(min_score)

    def scores(self, question: str, sentences: Sequence[str], shown: Sequence[str] = ()) -> np.ndarray:
        """(len(sentences),) float64: each sentence's `question_share` (-1 when it shares no term and the question
        has some); ``shown`` (the passages shown) is not read by the rule."""
        out = []
        for s in sentences:
            shared, share = question_share(question, s)
            out.append(share if share == 1.0 or shared >= 1 else -1.0)
        return np.array(out, dtype=np.float64)

    def order(self, question: str, sentences: Sequence[str], shown: Sequence[str] = ()) -> np.ndarray:
        """(len(sentences),) float64: distinct question key terms (numbers included) each sentence holds."""
        q = key_terms(question)
        return np.array([held_terms(q, s) for s in sentences], dtype=np.float64)


DEFAULT_SUPPORT = ShareSupport()


def sentence_support(answer: str, cited: Sequence[str], question: str | None = None,
                     support=DEFAULT_SUPPORT, shown: Sequence[str] | None = None,
                     min_score: float | None = None) -> str | None:
    """None when ONE cited sentence (`split_sentences_ko`) supports the answer as an answer to ``question``, else
    the failure reason.

    ``number_not_in_cited``: a number of the answer is not a number of any cited sentence (compared as
    numbers, so "192년" is not found in "1920년"). Otherwise some sentence must hold all the answer's numbers,
    all its other key terms (as morphemes or substrings, like `unsupported_terms`) and, when ``question`` is
    given, reach ``support.min_score`` under ``support`` (`ShareSupport`, the rule: at least one and
    ``min_question_share`` of the question's key terms; or `rag.ko.support.LearnedSupport`, scored with all the
    ``shown`` passages, default ``cited``; ``min_score`` in place of the support's own when given): a span answer
    ("1919년", "멜론") carries no topic of its own, the question does; a span copied from a sentence about something else fails (``number_not_with_terms`` for an
    answer with numbers, ``not_with_question_terms`` for one without)."""
    nums = numbers_ko(answer)
    sentences = [s for text in cited for s in split_sentences_ko(text)]
    if nums and not nums <= set().union(*(numbers_ko(s) for s in sentences)):
        return "number_not_in_cited"
    terms = {t for t in key_terms(answer) if not _NUMBER.fullmatch(t)}
    holding = []
    for s in sentences:
        if not nums <= numbers_ko(s):
            continue
        morphemes, low = key_terms(s), s.lower()
        if all(t in morphemes or t in low for t in terms):
            holding.append(s)
    if not holding:
        return "number_not_with_terms" if nums else "not_with_question_terms"
    if question is None:
        return None
    shown = list(cited if shown is None else shown)  # scored among every shown sentence, as the support was fitted
    pool = list(dict.fromkeys([s for text in shown for s in split_sentences_ko(text)] + holding))
    scores = dict(zip(pool, support.scores(question, pool, shown)))
    if max(scores[s] for s in holding) >= (support.min_score if min_score is None else min_score):
        return None
    return "number_not_with_terms" if nums else "not_with_question_terms"


def verify_ko(answer: str, citations: Sequence[str] | None, passages: Sequence[str],
              question: str | None = None, support=DEFAULT_SUPPORT, min_score: float | None = None) -> tuple[bool, str]:
    """Whether an answer may be said; ``(ok, reason)``.

    reason: ``abstained`` (ok: the abstention sentence cited "none"), ``supported`` (ok),
    ``invalid_citation`` (`citations_valid` fails), ``no_key_terms`` (an answer with no content
    morpheme, e.g. "네"), ``polarity`` (it lacks a negation its supporting cited sentence has, or the
    reverse: `polarity_agrees`; checked before the terms, since "복용할 수 있다" against "복용할 수 없다"
    also has a term, 있, missing), ``terms_not_in_cited`` (a key term absent from the cited passages),
    ``number_not_in_cited`` / ``number_not_with_terms`` / ``not_with_question_terms`` (`sentence_support`;
    ``question`` adds the ``support`` test: `ShareSupport` or `rag.ko.support.LearnedSupport`, at ``min_score``
    when given, else at the support's own).
    """
    if not citations_valid(answer, citations, len(passages)):
        return False, "invalid_citation"
    if is_abstention(answer):
        return True, "abstained"
    if not key_terms(answer):
        return False, "no_key_terms"
    cited = cited_passages(citations, passages)
    if not polarity_agrees(answer, cited):
        return False, "polarity"
    if unsupported_terms(answer, cited):
        return False, "terms_not_in_cited"
    reason = sentence_support(answer, cited, question, support, passages, min_score)
    if reason:
        return False, reason
    return True, "supported"


def split_sentences_ko(text: str) -> list[str]:
    """Sentences of a Korean passage: whitespace folded, split after ``.``, ``!`` or ``?`` + space."""
    return [s for s in _SENTENCE_END.split(" ".join(text.split())) if s]


def headed(heading: str, text: str) -> str:
    """``text`` with each of its sentences (`split_sentences_ko`) led by ``heading`` ("서울 지점: 영업시간은 ..."):
    what a passage of a KB folder is shown and said as, so that a sentence read alone keeps which branch, product or
    section its heading says it is about (the way a Markdown list item keeps its lead-in on the English track,
    `rag.voice.verify.split_sentences`). A sentence that already starts with the heading, or an empty heading, is
    left as it is; whitespace is folded."""
    heading = " ".join(heading.split()).rstrip(":")
    return " ".join(s if not heading or s.startswith(heading) else f"{heading}: {s}" for s in split_sentences_ko(text))


CUT = "…"  # ends a sentence `focus` cut: shown to the model, never said


def focus(question: str, text: str, max_chars: int) -> str:
    """At most ``max_chars`` characters of a passage to show the model: its sentences
    (`split_sentences_ko`) taken by most distinct question morphemes shared (ties: the earlier
    sentence) while they fit, then put back in text order and joined by a space. The first pick is
    cut to ``max_chars`` if alone too long, its last character replaced by `CUT` so that `extractive_ko` never says
    the fragment (a cut sentence can lose its negation: "...하지 않습니다"). The whole passage when it fits (prompt cost: SmolLM2
    spends about 2 tokens per Hangul character, so a 460-character passage is ~950 tokens)."""
    text = " ".join(text.split())
    if len(text) <= max_chars:
        return text
    q = key_terms(question)
    sents = split_sentences_ko(text)
    order = sorted(range(len(sents)), key=lambda i: (-len(q & key_terms(sents[i])), i))
    picked, used = [], 0
    for i in order:
        extra = len(sents[i]) + (1 if picked else 0)
        if used + extra <= max_chars:
            picked.append(i)
            used += extra
    if not picked:
        return sents[order[0]][:max_chars - 1] + CUT
    return " ".join(sents[i] for i in sorted(picked))


def extractive_ko(question: str, passages: Sequence[str], support=DEFAULT_SUPPORT) -> tuple[str, str] | None:
    """The sentence to say instead of a failed answer, as ``(sentence, label)``: the passage sentence first in
    ``support.order`` (`ShareSupport`: the most distinct question morphemes, numbers included, as morphemes or
    substrings; a learned `rag.ko.support.LearnedSupport`: its score; ties: the earlier passage, then the earlier
    sentence; a sentence `focus` cut, ending in `CUT`, is never one). None when there is none, the best holds nothing
    of the question (order 0) or its score is under ``support.min_score`` (the test an LLM answer's sentence must
    pass too)."""
    cands = [(s, str(i)) for i, text in enumerate(passages, 1) for s in split_sentences_ko(text) if not s.endswith(CUT)]
    if not cands:
        return None
    sentences = [s for s, _ in cands]
    order = support.order(question, sentences, passages)
    best = int(np.argmax(order))  # the first of the best
    if order[best] <= 0 or support.scores(question, [sentences[best]], passages)[0] < support.min_score:
        return None
    return cands[best]


@dataclass(frozen=True)
class AnswerGate:
    """What a generator's answer needs besides `verify_ko`'s checks to be said: its sentence's support score at least
    ``min_support`` (None: the support's own ``min_score``, the one the extractive fallback needs), and the mean
    log-probability (natural log, per token, the generator's own: `answer_token_logprobs`) of its answer's tokens at
    least ``min_mean_logprob`` (None: not asked). A confidence threshold is the generator's own calibration, so
    params name the model a gate was chosen for (``ko_gen.answer_gate``); ``AnswerGate()`` is the verifier alone.
    Source of the signal: the sequence-probability baseline of Jiang et al. 2021, "How can we know when language
    models know?" (TACL)."""

    min_support: float | None = None
    min_mean_logprob: float | None = None

    def __post_init__(self):
        if self.min_support is not None and not 0.0 <= self.min_support <= 1.0:
            raise ValueError(f"min_support must be in [0, 1] or null, got {self.min_support}")
        if self.min_mean_logprob is not None and not -1e9 < self.min_mean_logprob <= 0.0:
            raise ValueError(f"min_mean_logprob must be a log-probability (<= 0) or null, got {self.min_mean_logprob}")

    @classmethod
    def from_params(cls, g: Mapping, llm: Mapping) -> "AnswerGate":
        """The gate of params ``ko_gen.answer_gate`` (``{model, min_support, min_mean_logprob}``; either threshold may
        be null) when its ``model`` is the one that answers (``llm.model`` for a server at ``llm.url``, else
        ``llm.local_model``); ``AnswerGate()`` for any other model or no entry. Raises ValueError naming the key for
        an unknown key or a bad value."""
        entry = g.get("answer_gate") or {}
        if not isinstance(entry, Mapping) or set(entry) - {"model", "min_support", "min_mean_logprob"}:
            raise ValueError("params ko_gen.answer_gate must map model, min_support and min_mean_logprob, got "
                             f"{entry!r}")
        served = (llm.get("model") if llm.get("url") else llm.get("local_model")) or ""
        if not entry or entry.get("model") != served:
            return cls()
        try:
            return cls(**{k: None if v is None else float(v) for k, v in entry.items() if k != "model"})
        except (TypeError, ValueError) as e:
            raise ValueError(f"params ko_gen.answer_gate: {e}") from None

    def confident(self, answer_logprobs: Sequence[float] | None) -> str | None:
        """None when the answer's token log-probabilities pass ``min_mean_logprob`` (or it is not asked), else the
        reason: ``no_logprobs`` (the server sent none) or ``low_confidence``."""
        if self.min_mean_logprob is None:
            return None
        mean = mean_logprob(answer_logprobs)
        if mean is None:
            return "no_logprobs"
        return None if mean >= self.min_mean_logprob else "low_confidence"


def mean_logprob(answer_logprobs: Sequence[float] | None) -> float | None:
    """The mean (natural-log, per token) of an answer's token log-probabilities (`answer_token_logprobs`): the
    generator's confidence that `AnswerGate` reads; None for none."""
    return sum(answer_logprobs) / len(answer_logprobs) if answer_logprobs else None


def decide_ko(question: str, answer: str | None, citations: Sequence[str] | None, passages: Sequence[str],
              error: str | None = None, support=DEFAULT_SUPPORT, gate: AnswerGate = AnswerGate(),
              answer_logprobs: Sequence[float] | None = None) -> dict:
    """What is finally said: ``{say, citations, status, reason}``.

    status: ``llm`` (a verified answer that also passes ``gate`` with its ``answer_logprobs``,
    `answer_token_logprobs`), ``abstained`` (the model's verified abstention), ``extractive`` (a passage sentence,
    `extractive_ko`), ``fallback_abstained`` (the abstention sentence because no sentence reaches
    ``support.min_score``). reason: the verifier's reason (`verify_ko`, given the question, its support test at
    ``gate.min_support``), the gate's (`AnswerGate.confident`), or ``llm_<error code>`` when the call failed.
    """
    if error is None and answer is not None:
        ok, reason = verify_ko(answer, citations, passages, question, support, gate.min_support)
        if ok and reason == "supported" and (why := gate.confident(answer_logprobs)):
            ok, reason = False, why
        if ok:
            return {"say": ABSTAIN if reason == "abstained" else answer,
                    "citations": ["none"] if reason == "abstained" else list(dict.fromkeys(citations)),
                    "status": "abstained" if reason == "abstained" else "llm", "reason": reason}
    else:
        reason = f"llm_{error or 'no_answer'}"
    pick = extractive_ko(question, passages, support)
    if pick is None:
        return {"say": ABSTAIN, "citations": ["none"], "status": "fallback_abstained", "reason": reason}
    return {"say": pick[0], "citations": [pick[1]], "status": "extractive", "reason": reason}


def decide_reply(row: Mapping, support=DEFAULT_SUPPORT, gate: AnswerGate = AnswerGate()) -> dict:
    """`decide_ko` on one stored reply: ``row`` holds ``question``, ``passages`` (the texts shown), ``raw_answer``,
    ``raw_citations``, ``error`` and ``answer_logprobs`` (a row without them fails a gate that reads them)."""
    failed = bool(row["error"])
    return decide_ko(row["question"], None if failed else row["raw_answer"], None if failed else row["raw_citations"],
                     row["passages"], row["error"], support, gate, row.get("answer_logprobs"))


def parse_raw(raw: str) -> tuple[str | None, list[str] | None]:
    """``(answer, citations)`` read leniently from the model's raw text (JSON with those keys);
    ``(None, None)`` when it is not such JSON. Used to score the raw output even when
    `rag.llm.client.validate_cited` rejected it."""
    try:
        obj = json.loads(raw)
    except (json.JSONDecodeError, TypeError):
        return None, None
    if not isinstance(obj, dict) or not isinstance(obj.get("answer"), str):
        return None, None
    cits = obj.get("citations")
    cits = [str(c) for c in cits] if isinstance(cits, list) else None
    return obj["answer"], cits


_ANSWER_KEY = re.compile(r'"answer"\s*:\s*"')


def answer_token_logprobs(token_logprobs: Sequence[tuple[str, float]] | None) -> list[float]:
    """The log-probabilities (natural log, the generator's own, `rag.llm.client.LLMReply.token_logprobs`) of the
    tokens that spell the ``"answer"`` string of a cited reply, in order: every token that overlaps the characters
    between the string's opening quote and its closing (unescaped) one, in the tokens' joined text. ``[]`` when there
    are no logprobs, no ``"answer"`` string, or it is empty."""
    if not token_logprobs:
        return []
    starts, text = [], ""
    for token, _ in token_logprobs:
        starts.append(len(text))
        text += token
    m = _ANSWER_KEY.search(text)
    if m is None:
        return []
    i = begin = m.end()
    while i < len(text) and text[i] != '"':
        i += 2 if text[i] == "\\" else 1
    if i == begin:
        return []
    return [lp for (token, lp), a in zip(token_logprobs, starts) if a < i and a + len(token) > begin]


def span_match(answer: str | None, golds: Sequence[str]) -> bool:
    """Answer-span match: some gold answer text occurs in ``answer`` (all whitespace removed on both
    sides; Korean spacing varies). False for None, the abstention sentence or no gold."""
    if not answer or is_abstention(answer):
        return False
    a = "".join(answer.split())
    return any(g.strip() and "".join(g.split()) in a for g in golds)


def hallucinated(answer: str | None, citations: Sequence[str] | None, passages: Sequence[str],
                 gold_excluded: bool) -> bool:
    """Hallucination: a non-abstaining answer in the gold-excluded condition, or one with a key term
    absent from its cited passages (no valid cited passage: every key term counts as absent; an
    answer with no key term at all, e.g. "네", counts too: nothing in it is grounded).
    None (no answer) and the abstention sentence are not hallucinations."""
    if answer is None or is_abstention(answer):
        return False
    if gold_excluded:
        return True
    terms = key_terms(answer)
    return not terms or bool(unsupported_terms(answer, cited_passages(citations, passages)))


@dataclass(frozen=True)
class KoSettings:
    """Korean answer settings (params.yaml ``ko_gen`` and ``llm``: `from_params`)."""

    prompt: str = "B_fewshot"
    max_len: int = 60          # characters of an answer (maxLength in the schema)
    max_tokens: int = 160
    timeout_s: float = 60.0
    temperature: float = 0.0
    seed: int = 0
    model: str | None = None
    support: object = DEFAULT_SUPPORT  # does an answer's sentence answer the question (`ShareSupport` protocol)
    gate: AnswerGate = AnswerGate()    # what else the model's answer needs (``ko_gen.answer_gate``, for its model)

    @classmethod
    def from_params(cls, g: Mapping, llm: Mapping, prompt: str, support) -> "KoSettings":
        """From the ``ko_gen`` and ``llm`` sections of the params (dicts); ``prompt`` one of `PROMPTS`
        (`build_ko_messages` rejects another); ``support`` from `rag.ko.support.from_params` (it needs the KB). The
        gate is `AnswerGate.from_params`. Raises ValueError for a bad gate."""
        return cls(prompt=prompt, max_len=int(g["max_len"]), max_tokens=int(g["max_tokens"]),
                   timeout_s=float(g["timeout_s"]), temperature=float(llm["temperature"]), seed=int(llm["seed"]),
                   model=llm.get("model") or None, support=support, gate=AnswerGate.from_params(g, llm))


def ask_ko(url: str, question: str, passages: Sequence[str], s: KoSettings) -> LLMReply:
    """One schema-bound call (`rag.llm.client.ask` with `rag.llm.client.cited_schema`) over passages in rank order,
    the tokens' log-probabilities asked for (`AnswerGate`)."""
    return ask(url, build_ko_messages(question, passages, s.prompt), cited_schema(labels(len(passages)), s.max_len),
               max_tokens=s.max_tokens, timeout_s=s.timeout_s, temperature=s.temperature, seed=s.seed,
               model=s.model, logprobs=True)


def answer_ko(url: str | None, question: str, passages: Sequence[str], s: KoSettings) -> dict:
    """Ask (`ask_ko`), read the raw reply (`parse_raw`) and decide what is said (`decide_ko`).

    url None (no server could be started) gives error "unreachable" without a call. Returns
    ``{raw, raw_answer, raw_citations, answer_logprobs, error, total_ms, final}``; ``answer_logprobs`` as
    `answer_token_logprobs` (``[]`` without a reply); ``final`` as `decide_ko` under ``s.gate``.
    """
    if url is None:
        raw, error, total, lps = "", "unreachable", None, []
    else:
        reply = ask_ko(url, question, passages, s)
        raw, error, total = reply.raw, reply.error, reply.total_ms
        lps = answer_token_logprobs(reply.token_logprobs)
    raw_answer, raw_cits = parse_raw(raw)
    final = decide_ko(question, None if error else raw_answer, None if error else raw_cits, passages, error,
                      s.support, s.gate, lps)
    return {"raw": raw, "raw_answer": raw_answer, "raw_citations": raw_cits, "answer_logprobs": lps, "error": error,
            "total_ms": None if total is None else round(total, 1), "final": final}


def score_rows(rows: Sequence[Mapping]) -> dict:
    """Rule-based metrics of one ablation cell. Each row: ``k``, ``gold_excluded`` (bool), ``golds``
    (answer texts), ``passages`` (texts shown), ``raw_answer``/``raw_citations`` (`parse_raw` of the
    model's text; None when unparsable), ``error`` (LLM error code or None), ``final`` (`decide_ko`).

    Returns counts and rates for ``raw`` (the model's output) and ``final`` (what is said). Every rate
    is over all n questions of the cell, so none is NaN: answered + abstained (+ no_output for raw) = n.
    ``span_match_answered`` is over answered questions only, 0.0 with ``answered`` = 0. ``abstention_ci``,
    ``hallucination_ci``, ``span_match_ci``: the rates' 95 % percentile-bootstrap intervals over the cell's
    questions (`rag.eval.intervals.bootstrap_interval`, seed 0), ``[low, high]``.
    """
    n = len(rows)
    out = {"n": n}
    for side in ("raw", "final"):
        answered = abstained = valid = halluc = span = no_output = 0
        per_question: dict[str, list[bool]] = {"abstention": [], "hallucination": [], "span_match": []}
        for r in rows:
            if side == "raw":
                answer, cits = r["raw_answer"], r["raw_citations"]
            else:
                answer, cits = r["final"]["say"], r["final"]["citations"]
            if answer is None:
                no_output += 1
                for v in per_question.values():
                    v.append(False)
                continue
            if is_abstention(answer):
                abstained += 1
            else:
                answered += 1
            valid += citations_valid(answer, cits, r["k"])
            h, sp = hallucinated(answer, cits, r["passages"], r["gold_excluded"]), span_match(answer, r["golds"])
            halluc += h
            span += sp
            for name, v in (("abstention", is_abstention(answer)), ("hallucination", h), ("span_match", sp)):
                per_question[name].append(v)
        rate = (lambda x: round(x / n, 4)) if n else (lambda x: 0.0)
        m = {"answered": answered, "abstained": abstained, "citation_valid": valid, "hallucinated": halluc,
             "span_match": span, "abstention_rate": rate(abstained), "citation_validity": rate(valid),
             "hallucination_rate": rate(halluc), "span_match_rate": rate(span),
             "span_match_answered": round(span / answered, 4) if answered else 0.0,
             **{f"{name}_ci": list(bootstrap_interval(v)) for name, v in per_question.items()}}
        if side == "raw":
            m["no_output"] = no_output
            m["no_output_rate"] = rate(no_output)
        out[side] = m
    errors: dict[str, int] = {}
    statuses: dict[str, int] = {}
    for r in rows:
        if r["error"]:
            errors[r["error"]] = errors.get(r["error"], 0) + 1
        statuses[r["final"]["status"]] = statuses.get(r["final"]["status"], 0) + 1
    out["llm_errors"] = errors
    out["final_status"] = statuses
    return out
