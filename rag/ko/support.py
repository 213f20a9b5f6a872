"""Does a Korean sentence answer the question? A support score learned from KorQuAD train (issue 12's Korean goal).

`rag.ko.answer.ShareSupport`, the rule, says a sentence answers when it holds at least ``min_question_share`` of the
question's key terms. On KorQuAD train, at the shipped 0.6, that keeps 0.76 of the gold answers' sentences while 0.22
of the best sentences of passages *lacking* the answer pass too (`metrics/ko/question_share.md`): a near-topic
sentence shares the question's words. `LearnedSupport` is a logistic regression over `FEATURES` of (question, sentence, passages
shown): the share, the same share weighted by IDF (a rare name counts more than 하다), the IDF of the rarest
question term the sentence (and all the shown passages) lack, character-bigram overlap (Kiwi splits a compound
differently in a question and in a sentence), the multilingual-e5-small cosine of question and sentence (``query:`` /
``passage:``; trained on question / answer-passage pairs) and its gap to the best shown sentence, the sentence's
length, whether it holds a number and whether the question asks for one, and the IDF-weighted share held by the
shown passage the sentence is read from (a sentence of the passage the question was asked about, beside one of a
near-topic passage; added 2026-12-04, chosen on train out of fold). Fitted by stage ``ko_support`` on
train-split questions only (`fit_support`), its ``min_score`` chosen there too (`choose_min_score`); shipped as
JSON (``models/ko-support.json``) and run in numpy + onnxruntime. IDF comes from the KB being searched
(`TermStats`), so the model carries to a user's own Korean folder.
"""
from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np

from rag.ko.answer import DEFAULT_SUPPORT, ShareSupport, key_terms, question_share, split_sentences_ko

FEATURES = ("share", "idf_share", "rarest_missing", "rarest_missing_shown", "e5_cosine", "e5_gap", "log_chars",
            "has_digits", "bigram_share", "asks_number_has_digits", "passage_idf_share")
# A question asking for a number or a date: 몇 (how many), 언제 (when), 얼마 (how much), 연도/년도 (year), 며칠, 나이.
ASKS_NUMBER = re.compile(r"몇|언제|얼마|연도|년도|며칠|나이")
_PUNCT = re.compile(r"[?？.!,·\"'()\[\]]")


@dataclass(frozen=True)
class TermStats:
    """Document frequencies of Kiwi content morphemes over a KB's passages (``df``: term -> passages holding it,
    ``n``: passages). ``idf(t)`` = ln((n + 1) / (df + 0.5)), the BM25 form without its floor; a term the KB lacks gets
    the largest value, ``max_idf``."""

    df: Mapping[str, int]
    n: int

    @classmethod
    def from_tokens(cls, tokens: Iterable[Sequence[str]]) -> "TermStats":
        """From each passage's Kiwi tokens (`rag.ko.tokenize.kiwi_tokens_batch`)."""
        df: Counter = Counter()
        n = 0
        for ts in tokens:
            df.update(set(ts))
            n += 1
        return cls(dict(df), n)

    @property
    def max_idf(self) -> float:
        return math.log((self.n + 1) / 0.5)

    def idf(self, term: str) -> float:
        return math.log((self.n + 1) / (self.df.get(term, 0) + 0.5))


def _bigrams(text: str) -> set[str]:
    t = "".join(_PUNCT.sub("", text).split())
    return {t[i:i + 2] for i in range(len(t) - 1)}


def features(question: str, sentences: Sequence[str], shown: Sequence[str], stats: TermStats,
             cosines: np.ndarray) -> np.ndarray:
    """(len(sentences), len(FEATURES)) float64 features of each sentence as an answer to ``question``. ``shown``: all
    the passage texts the model was shown (the rarest question term none of them holds; ``passage_idf_share`` is
    the largest IDF share of the shown passages that hold the sentence as one of their sentences
    (`split_sentences_ko`; a sentence only quoted inside a longer one does not count), or its own when none does);
    ``stats``: the KB's `TermStats`; ``cosines``: (len(sentences),) e5 cosines of question and sentences."""
    asked = key_terms(question)
    weight = sum(stats.idf(t) for t in asked) or 1.0

    def held_and_missing(text: str) -> tuple[float, float]:  # IDF share of the asked terms held; rarest missing
        morphemes, low = key_terms(text), text.lower()
        held = [t in morphemes or t in low for t in asked]
        return (sum(stats.idf(t) for t, h in zip(asked, held) if h) / weight,
                max((stats.idf(t) for t, h in zip(asked, held) if not h), default=0.0) / stats.max_idf)

    passage_share = {t: held_and_missing(t)[0] for t in dict.fromkeys(shown)}
    sentences_of = {t: set(split_sentences_ko(t)) for t in passage_share}  # whole sentences, not substrings
    low_shown = " ".join(shown).lower()
    in_shown = key_terms(" ".join(shown)) if shown else set()
    missing_shown = [stats.idf(t) for t in asked if t not in in_shown and t not in low_shown]
    rarest_shown = max(missing_shown, default=0.0) / stats.max_idf
    q_bigrams = _bigrams(question)
    asks_number = bool(ASKS_NUMBER.search(question))
    best = float(np.max(cosines)) if len(cosines) else 0.0
    rows = []
    for s, c in zip(sentences, cosines):
        share, rarest = held_and_missing(s)
        homes = [v for t, v in passage_share.items() if " ".join(s.split()) in sentences_of[t]]
        digits = any(ch.isdigit() for ch in s)
        rows.append([question_share(question, s)[1], share, rarest, rarest_shown, float(c), best - float(c),
                     math.log1p(len(s)), float(digits), len(q_bigrams & _bigrams(s)) / max(len(q_bigrams), 1),
                     float(asks_number and digits), max(homes, default=share)])
    return np.array(rows, dtype=np.float64).reshape(len(sentences), len(FEATURES))


class LearnedSupport:
    """A fitted support score: P(the sentence answers the question) = sigmoid(coef . (x - mean) / scale + intercept)
    over `features`; a sentence is supported when it is at least ``min_score``. ``stats``: the searched KB's
    `TermStats` (bind with `for_kb`); ``e5_model``: the e5 ONNX file of the cosine feature (sha256 checked)."""

    name = "learned"

    def __init__(self, mean, scale, coef, intercept: float, min_score: float, e5_model: str | Path,
                 e5_sha256: str | None = None, stats: TermStats | None = None, meta: Mapping | None = None):
        self.mean, self.scale = np.asarray(mean, float), np.asarray(scale, float)
        self.coef, self.intercept = np.asarray(coef, float), float(intercept)
        if not self.mean.shape == self.scale.shape == self.coef.shape == (len(FEATURES),):
            raise ValueError(f"a support model needs {len(FEATURES)} features: {FEATURES}")
        if not (np.isfinite(np.r_[self.mean, self.scale, self.coef, self.intercept]).all() and (self.scale > 0).all()):
            raise ValueError("mean, scale, coef and intercept must be finite numbers, scale > 0")
        if not 0.0 <= float(min_score) <= 1.0:
            raise ValueError(f"min_score must be in [0, 1], got {min_score}")
        self.min_score, self.e5_model, self.e5_sha256 = float(min_score), Path(e5_model), e5_sha256
        self.stats, self.meta = stats, dict(meta or {})

    def for_kb(self, stats: TermStats) -> "LearnedSupport":
        """This model scoring on a KB with document frequencies ``stats``."""
        return LearnedSupport(self.mean, self.scale, self.coef, self.intercept, self.min_score, self.e5_model,
                              self.e5_sha256, stats, self.meta)

    def cosines(self, question: str, sentences: Sequence[str]) -> np.ndarray:
        from rag.retrieval.e5 import cosines_of

        return cosines_of(self.e5_model, self.e5_sha256).cosines(question, sentences) if sentences else np.zeros(0)

    def probabilities(self, x: np.ndarray) -> np.ndarray:
        """(n,) P(supported) of features x (n, len(FEATURES))."""
        z = (np.asarray(x, float) - self.mean) / self.scale
        return 1.0 / (1.0 + np.exp(-(z @ self.coef + self.intercept)))

    def scores(self, question: str, sentences: Sequence[str], shown: Sequence[str] = ()) -> np.ndarray:
        """(len(sentences),) float64 P(supported) of each sentence for ``question``, with ``shown`` the passages
        shown. Raises RuntimeError when unbound (`for_kb`)."""
        if self.stats is None:
            raise RuntimeError("LearnedSupport needs the KB's TermStats: call for_kb first")
        if not sentences:
            return np.zeros(0)
        return self.probabilities(features(question, sentences, shown, self.stats, self.cosines(question, sentences)))

    def order(self, question: str, sentences: Sequence[str], shown: Sequence[str] = ()) -> np.ndarray:
        """The extractive candidates' ranking: `scores`."""
        return self.scores(question, sentences, shown)

    def to_json(self) -> dict:
        """The model as JSON values; mean, scale, coef and intercept to 12 significant digits (`_stable`), so a
        refit whose float sums ran in another order writes the same bytes."""
        return {"features": list(FEATURES), "mean": _stable(self.mean), "scale": _stable(self.scale),
                "coef": _stable(self.coef), "intercept": _stable([self.intercept])[0], "min_score": self.min_score,
                "e5_model": self.e5_model.name, "e5_sha256": self.e5_sha256, "meta": self.meta}

    def save(self, path: str | Path) -> None:
        """Write the model as JSON, atomically (`e5_model` by its file name, beside the model)."""
        from rag.io import write_json

        write_json(path, self.to_json())

    @classmethod
    def load(cls, path: str | Path) -> "LearnedSupport":
        """Read a model `save` wrote (its e5 file named relative to the model's folder); InputError naming the file
        when it is not one or its features are not `FEATURES`."""
        from rag.io import InputError

        try:
            m = json.loads(Path(path).read_text(encoding="utf-8"))
            if tuple(m["features"]) != FEATURES:
                raise ValueError(f"features {m['features']} are not {list(FEATURES)}")
            return cls(m["mean"], m["scale"], m["coef"], m["intercept"], m["min_score"],
                       Path(path).parent / m["e5_model"], m.get("e5_sha256"), meta=m.get("meta"))
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise InputError(f"{path}: not a Korean support model ({e})") from None


def _stable(values) -> list[float]:
    """``values`` (any float sequence) as a list of floats to 12 significant digits: the last digits of a fit move
    from run to run (summation order), these do not."""
    return [float(f"{float(v):.12g}") for v in values]


def fit_support(x: np.ndarray, y: np.ndarray, e5_model: str | Path, e5_sha256: str | None = None,
                c: float = 1.0) -> LearnedSupport:
    """L2 logistic regression (sklearn, lbfgs, inverse strength ``c``) on standardised features x (n, len(FEATURES)),
    labels y (n,) in {0, 1} (1: the sentence holds the gold answer); ``min_score`` 0.5 until `choose_min_score`.
    Raises ValueError for one class only."""
    from sklearn.linear_model import LogisticRegression

    x, y = np.asarray(x, float), np.asarray(y, int)
    if len(set(y.tolist())) < 2:
        raise ValueError("support training data needs sentences that answer and sentences that do not")
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale == 0] = 1.0
    m = LogisticRegression(C=c, max_iter=2000).fit((x - mean) / scale, y)
    return LearnedSupport(mean, scale, m.coef_[0], float(m.intercept_[0]), 0.5, e5_model, e5_sha256)


def choose_min_score(supported: Sequence[float], unsupported: Sequence[float], max_leaked: float) -> dict:
    """The lowest threshold at which at most ``max_leaked`` of ``unsupported`` (per question, the best score among
    sentences of passages lacking the answer) reach it, and what it keeps of ``supported`` (per question, the
    score of the sentence holding the gold answer): ``{min_score, supported_kept, unsupported_kept}``. The issue's
    goal is stated as hallucination <= 0.1 under gold-excluded passages, so the constraint is on leaks.
    ``min_score`` is rounded down to 12 decimals (a rerun's scores differ in the last bits, its threshold not). Raises
    ValueError for empty inputs or ``max_leaked`` outside [0, 1]."""
    if not len(supported) or not len(unsupported):
        raise ValueError("choose_min_score needs supported and unsupported scores")
    if not 0.0 <= max_leaked <= 1.0:
        raise ValueError(f"max_leaked must be in [0, 1], got {max_leaked}")
    pos, neg = np.asarray(supported, float), np.asarray(unsupported, float)
    for t in np.unique(np.r_[pos, neg, np.inf]):
        if np.mean(neg >= t) <= max_leaked:
            break
    t = math.floor(t * 1e12) / 1e12 if np.isfinite(t) else float(t)  # rounded down: reruns write the same value
    return {"min_score": float(t), "supported_kept": round(float(np.mean(pos >= t)), 4),
            "unsupported_kept": round(float(np.mean(neg >= t)), 4)}


def from_params(g: Mapping, passage_tokens: Iterable[Sequence[str]] | None = None,
                root: str | Path = ".") -> ShareSupport | LearnedSupport:
    """The support of params ``ko_gen``: ``support: share`` -> `ShareSupport` at ``min_question_share``;
    ``support: learned`` -> the model at ``support_model`` (relative to ``root``) bound to the KB whose passages'
    Kiwi tokens are ``passage_tokens`` (`rag.ko.tokenize.kiwi_tokens_batch`; its document frequencies). Raises
    InputError for another name or a bad model file, ValueError for learned without tokens."""
    from rag.io import InputError

    kind = g.get("support", "share")
    if kind == "share":
        return ShareSupport(float(g["min_question_share"])) if "min_question_share" in g else DEFAULT_SUPPORT
    if kind != "learned":
        raise InputError(f"params ko_gen.support must be share or learned, got {kind!r}")
    if passage_tokens is None:
        raise ValueError("learned support needs the KB's passage tokens (its document frequencies)")
    if not isinstance(g.get("support_model"), str) or not g["support_model"]:
        raise InputError(f"params ko_gen.support_model must name the model file, got {g.get('support_model')!r}")
    model = LearnedSupport.load(Path(root) / g["support_model"])
    from rag.retrieval.e5 import cosines_of

    try:  # its e5 encoder now, before any question is asked
        cosines_of(model.e5_model, model.e5_sha256)
    except (OSError, RuntimeError) as e:
        raise InputError(f"{Path(root) / g['support_model']}: its e5 encoder {model.e5_model}: {e}") from None
    return model.for_kb(TermStats.from_tokens(passage_tokens))

