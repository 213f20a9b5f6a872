"""Answer sentence selection: does a KB sentence *answer* the question, or is it only about the same topic?

A small learned scorer over features that need no table written for a KB (source of the task: answer sentence
selection, Wang et al. 2007; near-miss negatives the way SQuAD 2.0 made unanswerable questions, Rajpurkar et al.
2018). For a question and its candidate sentences (those of the retrieved documents) each candidate gets
`FEATURES`:

- MiniLM cosine with the question, and its gap to the best candidate's; the same for multilingual-e5-small's
  question / passage cosine (trained on question-answer pairs: it tells the sentence that answers from one on the
  same topic; Wang et al. 2024, arXiv:2402.05672);
- coverage of the question's key terms (content words, weighted by their IDF over the KB's sentences) by the
  sentence, by the sentence with the one before it (a sentence can lose its subject: "It takes about 90 minutes."),
  and by the whole document, matching spelling or sound (metaphone: the recogniser's "guise" is "guys"), and the
  same graded by how close the sounds are (`sound_similarity`: the recogniser's "boring" is one sound from
  "boarding", "growing" from "grooming");
- the rarest question term missing from the document (a "rabies shot" question over the flu-shot document);
- what the sentence adds (share of its content words the question lacks) and its length;
- generic answer types: what the question asks for (money, duration, clock time, date, count, phone number,
  place, yes/no) against what the sentence holds, found by regular expressions over digits *and* number words.

`AnswerScorer` is the fitted model (logistic regression or a one-hidden-layer MLP, scikit-learn, trained on each
candidate alone; or ``listwise``: a linear score trained on each question's candidates together, `fit_listwise`),
shipped as JSON and run in numpy: ``scores(...)`` gives each candidate's score in [0, 1] that it answers the
question. It ranks the extractive candidates, gates (no candidate scores ``min_score`` -> refuse) and checks LLM
answers.
"""
from __future__ import annotations

import copy
import functools
import json
import math
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import jellyfish
import numpy as np

from rag.retrieval.e5 import BASE_MODEL, E5Cosines, cosines_of
from rag.retrieval.phonetic import phonetic_key
from rag.retrieval.indexes import word_tokens

DESIGNS = ("rules", "linear", "mlp", "listwise", "cross")  # rules: the answer-type tables and the retrieval ranking (no model)
THRESHOLDED = ("linear", "mlp", "cross")  # the designs whose score is a level: below min_score, refuse (listwise only ranks)

# Generic English function words (not a KB's table): what a "key term" of a question is not.
STOPWORDS = frozenset("""a an the and or but if of at by for with about to from in on off out up over into onto
do does did doing done is are was were be been being have has had having can could will would should shall may
might must i me my you your yours we our us it its they them their he him his she her this that these those what
which who whom whose when where why how there here any some just get got go going much many long take need want
know tell please s t not no yes also than then so as very more most one ones all each other such only own same
too let lets like""".split())

_NUM_WORD = (r"(?:zero|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen|"
             r"sixteen|seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety|hundred|"
             r"thousand|million|billion|a few|several|half an?)")
_NUM = rf"(?:\d[\d,.]*|{_NUM_WORD}(?:[ -]{_NUM_WORD})*)"
# What a sentence holds (case-insensitive).
HOLDS = {
    "money": re.compile(rf"[$£€¥]\s?\d|\b{_NUM} (?:dollars?|cents?|pounds?|euros?|yen|marks|francs)\b|\bfree\b|"
                        r"\bno (?:charge|cost)\b", re.I),
    "duration": re.compile(rf"\b{_NUM} (?:to {_NUM} )?(?:business |working )?(?:seconds?|minutes?|hours?|days?|"
                           r"weeks?|months?|years?|decades?|centur(?:y|ies))\b|\b(?:overnight|same day|same-day)\b",
                           re.I),
    "time": re.compile(r"\b\d{1,2}(?::\d\d)? ?[ap]\.?m\b|\b\d{1,2}:\d\d\b|\bnoon\b|\bmidnight\b|"
                       r"\b(?:morning|afternoon|evening)s?\b|\b24 hours\b", re.I),
    "date": re.compile(r"\b1\d{3}s?\b|\b20\d\ds?\b|\b(?:january|february|march|april|may|june|july|august|september|"
                       r"october|november|december|spring|summer|autumn|fall|winter|century)\b|\b\d{1,2}(?:st|nd|rd|th)\b",
                       re.I),
    "count": re.compile(rf"\b{_NUM}\b", re.I),
    "phone": re.compile(r"\b\d{3}[-. ]\d{4}\b|\b1?-?800\b|\bextension\b|\bext\.? ?\d", re.I),
    "place": re.compile(r"\b(?:in|at|on|near|from|to) (?:the )?[A-Z][a-z]+|\b(?:floor|room|building|street|avenue|"
                        r"road|suite|entrance|lot|garage)\b", re.I),
    "person": re.compile(r"(?<=[a-z,] )[A-Z][a-z]+(?: [A-Z][a-z]+)*"),
}
# What a question asks for (on the lower-case, rewritten question).
ASKS = {
    "money": re.compile(r"\bhow much\b|\bcost|\bprice|\bfees?\b|\bcharge|\bpay\b|\bdollars?\b"),
    "duration": re.compile(r"\bhow long\b|\bhow soon\b|\bhow many (?:days|hours|weeks|minutes|months|years)\b"),
    "time": re.compile(r"\bwhat time\b|\bwhat hours\b|\bwhich hours\b|\bhow late\b|\bhow early\b|\bwhen (?:do|does|is|are|will|can)\b.*\b(?:open|close|start|end)"),
    "date": re.compile(r"\bwhat year\b|\bwhich year\b|\bwhen (?:was|were|did)\b|\bwhat date\b|\bwhat century\b|\bin what year\b"),
    "count": re.compile(r"\bhow many\b|\bwhat number\b|\bwhat percentage\b|\bhow old\b|\bhow big\b|\bhow far\b"),
    "phone": re.compile(r"\bphone\b|\bnumber to call\b|\bcall\b|\bwhat is \d"),
    "place": re.compile(r"\bwhere\b|\bwhat (?:city|country|place|state|address)\b"),
    "person": re.compile(r"^(?:\w+ )*?who\b|\bwhose\b|\bwhat (?:person|man|woman|name)\b"),
}
_YES_NO = re.compile(r"^(?:do|does|did|is|are|was|were|can|could|will|would|should|may|have|has)\b")
TYPES = tuple(ASKS)
FEATURES = ("cosine", "cosine_gap", "cover_sentence", "cover_sentence_gap", "cover_context", "cover_context_gap",
            "cover_doc", "cover_sentence_sound", "bigrams", "doc_rank", "missing_doc", "missing_kb", "adds", "length",
            "yes_no_cover", "near_sound_sentence", "near_sound_sentence_gap", "near_sound_context", "near_sound_missing_doc",
            *(f"{t}_{k}" for t in TYPES for k in ("held", "missing")), "e5_cosine", "e5_cosine_gap")


def sound_similarity(a: str, b: str) -> float:
    """How alike two phonetic keys (`rag.retrieval.phonetic.phonetic_key`) are: 1 - Levenshtein distance / the
    longer key's length, in [0, 1] ("brnk" boring vs "brtnk" boarding: 0.8); keys without a letter (numbers) are
    alike only when equal."""
    if a == b:
        return 1.0
    if not a or not b or not (any(c.isalpha() for c in a) and any(c.isalpha() for c in b)):
        return 0.0
    return 1.0 - jellyfish.levenshtein_distance(a, b) / max(len(a), len(b))


NEAR_SOUND = 0.75  # a key within one edit of a 4-sound key is a near sound; shorter keys must be equal


def _near_sound(keys: Sequence[str], heard: set[str]) -> list[float]:
    """For each key of ``keys``, its best `sound_similarity` to a key of ``heard`` when at least `NEAR_SOUND`,
    else 0 (partial matches of short keys are noise: "tk" dog vs "tlr" dollar)."""
    best = [max((sound_similarity(k, h) for h in heard), default=0.0) for k in keys]
    return [b if b >= NEAR_SOUND else 0.0 for b in best]


def _stem(word: str) -> str:
    w = word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word
    return w[:7]


def terms(text: str) -> list[str]:
    """Key terms of a text: lower-case word tokens minus `STOPWORDS`, crudely stemmed (plural s off, first 7
    characters), in order, duplicates kept."""
    return [_stem(t) for t in word_tokens(text, STOPWORDS)]


def sounds(text: str) -> set[str]:
    """Metaphone keys of a text's key-term words (`rag.retrieval.phonetic.phonetic_key`)."""
    return {phonetic_key(t) for t in word_tokens(text, STOPWORDS)}


@dataclass
class TermStats:
    """Sentence frequencies of key terms over one KB: IDF = ln((n + 1) / (df + 0.5)), for unseen terms too."""

    n: int
    df: Counter

    @classmethod
    def of(cls, sentences: Iterable[str]) -> "TermStats":
        """Count, for every key term (`terms`), the sentences holding it."""
        df, n = Counter(), 0
        for s in sentences:
            df.update(set(terms(s)))
            n += 1
        return cls(n, df)

    def idf(self, term: str) -> float:
        return math.log((self.n + 1) / (self.df.get(term, 0) + 0.5))


def _cover(weights: Mapping[str, float], present) -> float:
    total = sum(weights.values())
    return sum(w for t, w in weights.items() if present(t)) / total if total else 0.0


def features(query: str, vector: np.ndarray, candidates: Sequence[tuple[str, str, np.ndarray]],
             contexts: Sequence[str], docs: Mapping[str, str], stats: TermStats,
             e5: E5Cosines | None = None) -> np.ndarray:
    """`FEATURES` of every candidate: (len(candidates), len(FEATURES)) float64.

    query: the rewritten question; vector: its (384,) unit embedding; candidates: ``(sentence, doc, (384,) unit
    vector)``; contexts: for each candidate, the sentence before it in its document ("" for the first);
    docs: ``{doc: full text}`` holding every candidate's doc; stats: the KB's `TermStats`. ``e5_cosine``: the
    question and the sentence under multilingual-e5-small (``e5``, default the packaged weights,
    `rag.retrieval.e5.cosines_of`; e5 was trained on question / answer-passage pairs, so it rewards the sentence
    that answers, where MiniLM's cosine rewards the same topic). A scorer must get the e5 it was fitted with
    (`AnswerScorer.e5`).
    """
    q_terms = list(dict.fromkeys(terms(query)))
    q_words = {_stem(w): w for w in word_tokens(query, STOPWORDS)}
    weights = {t: stats.idf(t) for t in q_terms}
    top = math.log(stats.n + 1) / 0.5 if stats.n else 1.0
    asks = {t: bool(r.search(query.lower())) for t, r in ASKS.items()}
    yes_no = bool(_YES_NO.search(query.lower()))
    if not candidates:
        return np.zeros((0, len(FEATURES)))
    cos = np.array([float(v @ vector) for _, _, v in candidates])
    e5 = (e5 or cosines_of()).cosines(query, [s for s, _, _ in candidates])
    doc_terms = {d: set(terms(docs[d])) for d in {d for _, d, _ in candidates}}
    doc_sounds = {d: sounds(docs[d]) for d in doc_terms}
    doc_rank = {d: i for i, d in enumerate(dict.fromkeys(d for _, d, _ in candidates))}
    q_bigrams = set(zip(q_terms, q_terms[1:]))
    q_keys = [phonetic_key(q_words.get(t, t)) for t in q_terms]
    q_w = np.array([weights[t] for t in q_terms])
    total = q_w.sum() or 1.0

    def near(heard: set[str]) -> np.ndarray:  # each question term's best sound match among ``heard``
        return np.array(_near_sound(q_keys, heard)) if q_keys else np.zeros(0)
    doc_near = {d: near(doc_sounds[d]) for d in doc_terms}
    rows = []
    for (sentence, doc, _), context, c, e in zip(candidates, contexts, cos, e5):
        s_terms, ctx_terms = set(terms(sentence)), set(terms(context))
        s_sounds = sounds(sentence)

        def heard(t, words, keys):
            return t in words or phonetic_key(q_words.get(t, t)) in keys
        missing = [weights[t] for t in q_terms if not heard(t, doc_terms[doc], doc_sounds[doc])]
        s_list, cover_s = terms(sentence), _cover(weights, lambda t: t in s_terms)
        row = [c, c - cos.max(), cover_s, 0.0,
               _cover(weights, lambda t: t in s_terms | ctx_terms), 0.0,
               _cover(weights, lambda t: heard(t, doc_terms[doc], doc_sounds[doc])),
               _cover(weights, lambda t: heard(t, s_terms, s_sounds)),
               len(q_bigrams & set(zip(s_list, s_list[1:]))) / max(len(q_bigrams), 1),
               doc_rank[doc], max(missing, default=0.0) / top,
               _cover(weights, lambda t: stats.df.get(t, 0) == 0),
               len(s_terms - set(q_terms)) / max(len(s_terms), 1),
               math.log1p(len(sentence.split())),
               yes_no * cover_s]
        s_near = near(s_sounds)
        row += [float(q_w @ s_near) / total, 0.0, float(q_w @ np.maximum(s_near, near(sounds(context)))) / total,
                float(np.max(q_w * (1.0 - doc_near[doc]), initial=0.0)) / top]
        for t in TYPES:
            held = bool(HOLDS[t].search(sentence))
            row += [asks[t] and held, asks[t] and not held]
        rows.append(row + [e, 0.0])
    x = np.array(rows, dtype=np.float64)
    for gap, of in ((3, 2), (5, 4), (16, 15), (len(FEATURES) - 1, len(FEATURES) - 2)):  # below the best candidate
        x[:, gap] = x[:, of] - x[:, of].max()
    return x


class AnswerScorer:
    """A fitted answer-selection model: ``scores`` = P(the sentence answers the question), in [0, 1].

    design: "linear" (logistic regression), "mlp" (one hidden ReLU layer, logistic output) or "listwise" (a linear
    score through the logistic function, fitted by `fit_listwise`: it ranks a question's candidates, its level is not
    a probability); the inputs are `FEATURES` standardised with ``mean`` / ``scale``. ``min_score``: below it a
    candidate is not an answer (the gate refuses when no candidate reaches it; an LLM answer under it fails
    verification); 0 for ``listwise``, which only ranks. ``e5_model`` / ``e5_sha256``: the e5 encoder whose cosine
    the model was fitted on, a file in ``folder`` (the scorer's JSON's folder when loaded); None = the packaged
    weights (`rag.retrieval.e5.BASE_MODEL`).
    """

    def __init__(self, design: str, mean, scale, layers: list[tuple[list, list]], min_score: float,
                 features: Sequence[str] = FEATURES, meta: Mapping | None = None, e5_model: str | None = None,
                 e5_sha256: str | None = None, folder: str | Path | None = None):
        if design not in ("linear", "mlp", "listwise"):
            raise ValueError(f"unknown feature-model design {design!r}; expected linear, mlp or listwise")
        if tuple(features) != FEATURES:
            raise ValueError(f"the model was fitted on features {list(features)}, this code computes {list(FEATURES)}")
        self.design, self.min_score, self.meta = design, float(min_score), dict(meta or {})
        if e5_model is not None and (Path(e5_model).name != e5_model or not e5_sha256):
            raise ValueError(f"e5_model must be a file name next to the scorer with its sha256, got {e5_model!r}")
        self.e5_model, self.e5_sha256 = e5_model, e5_sha256
        self.folder = Path(folder) if folder is not None else Path(__file__).resolve().parents[2] / "models"
        self.mean, self.scale = np.asarray(mean, float), np.asarray(scale, float)
        self.layers = [(np.asarray(w, float), np.asarray(b, float)) for w, b in layers]
        n = len(FEATURES)
        if self.mean.shape != (n,) or self.scale.shape != (n,) or not (np.isfinite(self.scale) & (self.scale > 0)).all():
            raise ValueError(f"mean and scale must be {n} finite numbers, scale > 0")
        if not self.layers or not np.isfinite(self.min_score) or not 0.0 <= self.min_score <= 1.0:
            raise ValueError("a model needs at least one layer and a min_score in [0, 1]")
        width = n
        for i, (w, b) in enumerate(self.layers):
            if w.ndim != 2 or w.shape[0] != width or b.shape != (w.shape[1],) or not np.isfinite(w).all():
                raise ValueError(f"layer {i}: weights must be ({width}, k) finite numbers and biases (k,)")
            width = w.shape[1]
        if width != 1:
            raise ValueError(f"the last layer must give one logit, gives {width}")

    def probabilities(self, x: np.ndarray) -> np.ndarray:
        """(n,) probabilities for an (n, len(FEATURES)) feature matrix."""
        h = (np.asarray(x, float) - self.mean) / self.scale
        for i, (w, b) in enumerate(self.layers):
            h = h @ w + b
            if i < len(self.layers) - 1:
                h = np.maximum(h, 0.0)
        from scipy.special import expit  # the logistic function without overflow warnings for large logits

        return expit(h.reshape(len(h), -1)[:, 0]) if len(h) else np.zeros(0)

    def scores(self, query: str, vector: np.ndarray, candidates: Sequence[tuple[str, str, np.ndarray]],
               contexts: Sequence[str], docs: Mapping[str, str], stats: TermStats) -> np.ndarray:
        """(len(candidates),) probabilities that each candidate answers ``query`` (arguments as `features`)."""
        return self.probabilities(features(query, vector, candidates, contexts, docs, stats, self.e5()))

    def e5(self) -> E5Cosines:
        """The `E5Cosines` of the encoder this model was fitted with (built once per process). Raises RuntimeError
        when that file's sha256 is not the recorded one, FileNotFoundError when it is missing."""
        if self.e5_model is None:
            return cosines_of()
        return cosines_of(self.folder / self.e5_model, self.e5_sha256)

    def to_json(self) -> dict:
        out = {"design": self.design, "features": list(FEATURES), "mean": self.mean.tolist(),
               "scale": self.scale.tolist(), "layers": [[w.tolist(), b.tolist()] for w, b in self.layers],
               "min_score": self.min_score, "meta": self.meta}
        return out | ({"e5_model": self.e5_model, "e5_sha256": self.e5_sha256} if self.e5_model else {})

    def save(self, path: str | Path) -> None:
        """Write the model as JSON, atomically."""
        from rag.io import write_json

        write_json(path, self.to_json())

    @classmethod
    def load(cls, path: str | Path) -> "AnswerScorer":
        """Read a model `save` wrote; InputError naming the file when it is not one."""
        from rag.io import InputError

        try:
            m = json.loads(Path(path).read_text(encoding="utf-8"))
            return cls(m["design"], m["mean"], m["scale"], m["layers"], m["min_score"], m["features"], m.get("meta"),
                       m.get("e5_model"), m.get("e5_sha256"), Path(path).parent)
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise InputError(f"{path}: not an answer-selection model ({e})") from None


def fit(x: np.ndarray, y: np.ndarray, design: str, seed: int = 0, weights: np.ndarray | None = None) -> AnswerScorer:
    """Fit ``design`` on features x (n, len(FEATURES)) and labels y (n,) in {0, 1}, each row weighted by
    ``weights`` (n,) (default 1; the standardisation is weighted too); ``min_score`` 0.5 until `choose_min_score`
    sets it. Raises ValueError for one class only or an unknown design."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.neural_network import MLPClassifier

    y = np.asarray(y, int)
    if len(set(y.tolist())) < 2:
        raise ValueError("answer-selection training data needs positive and negative candidates")
    w = np.ones(len(y)) if weights is None else np.asarray(weights, float)
    mean = np.average(x, axis=0, weights=w)
    scale = np.sqrt(np.average((x - mean) ** 2, axis=0, weights=w))
    scale[scale == 0] = 1.0
    z = (x - mean) / scale
    if design == "linear":
        m = LogisticRegression(C=1.0, max_iter=2000, random_state=seed).fit(z, y, sample_weight=w)
        layers = [(m.coef_.T.tolist(), m.intercept_.tolist())]
    elif design == "mlp":
        m = MLPClassifier(hidden_layer_sizes=(16,), alpha=1e-3, max_iter=500, early_stopping=True,
                          random_state=seed).fit(z, y, sample_weight=w)
        layers = [(w.tolist(), b.tolist()) for w, b in zip(m.coefs_, m.intercepts_)]
    else:
        raise ValueError(f"unknown scorer design {design!r}; expected linear or mlp")
    return AnswerScorer(design, mean, scale, layers, 0.5)


def fit_listwise(groups: Sequence[tuple[np.ndarray, np.ndarray]], weights: Sequence[float] | None = None,
                 l2: float = 1e-2) -> AnswerScorer:
    """Fit a ``listwise`` scorer: a linear score w . z over standardised `FEATURES` whose softmax over one question's
    candidates puts its probability on the right ones (the conditional logit of McFadden 1973; ListNet's top-one
    cross-entropy, Cao et al. 2007): the loss of a question is -sum_i t_i log softmax(Z w)_i with t the right
    candidates, each of equal share; mean over questions, weighted, plus ``l2`` |w|^2; minimised by L-BFGS from 0
    (deterministic). It learns which candidate answers *best*, not whether any does: ``min_score`` is 0.

    groups: ``(x, y)`` per question, x (n_i, len(FEATURES)) features and y (n_i,) bools; a question without a right
    candidate teaches a ranking nothing and is left out. weights: per question (default 1; normalised to mean 1).
    Raises ValueError when no question has a right candidate."""
    from scipy.optimize import minimize

    pairs = [(np.asarray(x, float), np.asarray(y, bool), w) for (x, y), w in
             zip(groups, np.ones(len(groups)) if weights is None else weights) if np.asarray(y, bool).any()]
    if not pairs:
        raise ValueError("listwise training data needs questions with a right candidate")
    allx = np.vstack([x for x, _, _ in pairs])
    mean, scale = allx.mean(axis=0), allx.std(axis=0)
    scale[scale == 0] = 1.0
    zs = [(x - mean) / scale for x, _, _ in pairs]
    ts = [y / y.sum() for _, y, _ in pairs]
    ws = np.array([w for _, _, w in pairs], float)
    ws = ws / ws.mean()

    def loss(w: np.ndarray) -> tuple[float, np.ndarray]:
        total, grad = 0.0, np.zeros_like(w)
        for z, t, weight in zip(zs, ts, ws):
            s = z @ w
            p = np.exp(s - s.max())
            p /= p.sum()
            total -= weight * float(t @ np.log(p + 1e-12))
            grad -= weight * (z.T @ (t - p))
        return total / len(zs) + l2 * float(w @ w), grad / len(zs) + 2.0 * l2 * w

    w = minimize(loss, np.zeros(allx.shape[1]), jac=True, method="L-BFGS-B").x
    return AnswerScorer("listwise", mean, scale, [(w[:, None].tolist(), [0.0])], 0.0)


class CrossScorer:
    """The ``cross`` design: all-MiniLM-L6-v2 fine-tuned as a cross-encoder (stage train_cross) that reads the
    question and the sentence together ([CLS] question [SEP] sentence [SEP], Nogueira & Cho 2019) and gives
    P(the sentence answers the question); ONNX with int8 weights, run by onnxruntime. Same interface as
    `AnswerScorer` (``scores``, ``min_score``), so `rag.voice.answer.decide` takes either.

    onnx: the model file; raises RuntimeError when its sha256 differs from ``sha256`` (when given).
    """

    def __init__(self, onnx: str | Path, min_score: float, sha256: str | None = None, threads: int = 2,
                 max_tokens: int = 128):
        if not 0.0 <= float(min_score) <= 1.0:
            raise ValueError(f"min_score must be in [0, 1], got {min_score}")
        import onnxruntime as ort
        from tokenizers import Tokenizer

        from rag.io import sha256_of
        from rag.retrieval.embed import TOKENIZER_PATH

        if sha256 is not None and sha256_of(onnx) != sha256:
            raise RuntimeError(f"{onnx}: sha256 differs from {sha256}")
        self.min_score, self.design = float(min_score), "cross"
        self.tokenizer = Tokenizer.from_file(str(TOKENIZER_PATH))
        self.tokenizer.enable_truncation(max_length=max_tokens)
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
        self.session = ort.InferenceSession(str(onnx), so, providers=["CPUExecutionProvider"])

    def pair_scores(self, query: str, sentences: Sequence[str], batch: int = 32) -> np.ndarray:
        """(len(sentences),) probabilities that each sentence answers ``query``."""
        out = []
        for i in range(0, len(sentences), batch):
            enc = self.tokenizer.encode_batch([(query, s) for s in sentences[i:i + batch]])
            feed = {"input_ids": np.array([e.ids for e in enc], np.int64),
                    "attention_mask": np.array([e.attention_mask for e in enc], np.int64),
                    "token_type_ids": np.array([e.type_ids for e in enc], np.int64)}
            out.append(self.session.run(["logits"], feed)[0][:, 0])
        return 1.0 / (1.0 + np.exp(-np.concatenate(out))) if out else np.zeros(0)

    def scores(self, query: str, vector: np.ndarray, candidates: Sequence[tuple[str, str, np.ndarray]],
               contexts: Sequence[str], docs: Mapping[str, str], stats: TermStats) -> np.ndarray:
        """`AnswerScorer.scores`'s interface; only the question and the candidates' sentences are read."""
        return self.pair_scores(query, [s for s, _, _ in candidates])

    @classmethod
    def load(cls, path: str | Path) -> "CrossScorer":
        """Read selection-cross.json (the ONNX file next to it, its sha256 checked); InputError naming the file."""
        from rag.io import InputError

        path = Path(path)
        try:
            m = json.loads(path.read_text(encoding="utf-8"))
            return cls(path.parent / m["onnx"], m["min_score"], m["sha256"])
        except (OSError, ValueError, KeyError, TypeError, RuntimeError) as e:  # RuntimeError: sha256, onnxruntime
            raise InputError(f"{path}: not a cross-encoder model ({e})") from None


def choose_min_score(best: Sequence[float], right: Sequence[bool], answerable: Sequence[bool]) -> float:
    """The ``min_score`` that says the most right picks net of wrong ones: over questions with their best
    candidate's score ``best``, whether that pick holds the answer (``right``) and whether the question is
    answerable, maximise (right picks said) - (wrong picks said) - (unanswerable questions said); a question is
    said when its best score >= min_score. Ties: the highest such value (the fewest questions said); when saying
    nothing is best, just above the highest score. Raises ValueError for no questions."""
    if not len(best):
        raise ValueError("no questions to choose min_score on")
    gain = np.where(np.asarray(answerable) & np.asarray(right), 1.0, -1.0)
    order = np.argsort(-np.asarray(best, float), kind="stable")
    utility = np.concatenate([[0.0], np.cumsum(gain[order])])  # saying the top i questions
    i = int(np.argmax(utility))
    return float(np.asarray(best)[order][i - 1]) if i else float(np.max(best)) + 1e-6


def swap_key_term(question: str, evidence: str, pool: Sequence[str], stats: TermStats, rng) -> tuple[str, str] | None:
    """A near-miss copy of ``question`` (SQuAD 2.0's entity swap): its rarest key word found in ``evidence`` (the
    gold passage) replaced by a word of ``pool`` that ``evidence`` lacks, drawn with ``rng`` (`random.Random`).
    Returns ``(key word, new word)``, or None when no key word of the question is in the evidence."""
    held = set(terms(evidence))
    words = [w for w in word_tokens(question, STOPWORDS) if w.isalpha() and _stem(w) in held]
    if not words:
        return None
    key = max(words, key=lambda w: (stats.idf(_stem(w)), w))
    lacking = [w for w in pool if _stem(w.lower()) not in held]
    return (key, lacking[rng.randrange(len(lacking))]) if lacking else None


def replace_word(text: str, old: str, new: str) -> str | None:
    """``text`` with the whole word ``old`` replaced by ``new`` (lower-case texts, as the rewrite gives them);
    None when ``old`` is not one of its words."""
    words = text.split()
    return " ".join(new if w == old else w for w in words) if old in words else None


def candidate_features(query: str, vector: np.ndarray, docs: Sequence[str], sentences,
                       e5: E5Cosines | None = None) -> tuple[list, np.ndarray]:
    """Every sentence of ``docs`` (a `rag.retrieval.sentences.SentenceIndex`'s, in document order) as ``(sentence, doc,
    (384,) vector)`` candidates, and their `features` matrix (len(candidates), len(FEATURES)); ``e5`` as `features`."""
    cands = [(s, d, v) for d in docs for s, v in sentences.of(d)]
    return cands, features(query, vector, cands, sentences.contexts(cands), sentences.texts, sentences.stats, e5)


def load_scorer(design: str, model_dir: str | Path, key: str = "select.design", e5_model: str | None = None,
                min_score: float | None = None):
    """The shipped scorer of ``design``: None for ``rules`` (the table-driven pick), else ``model_dir``/
    selection-{design}.json (`AnswerScorer`, or `CrossScorer` for ``cross``), with ``min_score`` in place of the
    fitted one when given (a copy: the cached scorer keeps its own). Read once per process and file version
    (path, mtime, size): every turn of `rag.voice.pipeline.answer_query` asks again. Raises ValueError (naming the
    params ``key``) for an unknown design, InputError naming the file for a missing or bad model, or for a feature
    model fitted on another e5 encoder than ``e5_model`` (params ``select.e5_model``; None: not checked)."""
    if design not in DESIGNS:
        raise ValueError(f"{key} must be one of {DESIGNS}, got {design!r}")
    if design == "rules":
        return None
    path = Path(model_dir) / f"selection-{design}.json"
    try:
        st = path.resolve().stat()
    except OSError:
        return _read_scorer(design, str(path), 0, -1)   # raises the loader's InputError naming the file
    scorer = _read_scorer(design, str(path.resolve()), st.st_mtime_ns, st.st_size)
    fitted_on = None if design == "cross" else (scorer.e5_model or BASE_MODEL.name)
    if e5_model is not None and fitted_on is not None and fitted_on != e5_model:
        from rag.io import InputError

        raise InputError(f"{path}: fitted with the e5 encoder {fitted_on}, but select.e5_model is {e5_model}: refit "
                         "(dvc unfreeze fit_selection && dvc repro fit_selection && dvc freeze fit_selection)")
    if min_score is not None:
        scorer = copy.copy(scorer)
        scorer.min_score = float(min_score)
    return scorer


@functools.lru_cache(maxsize=8)
def _read_scorer(design: str, path: str, mtime_ns: int, size: int):
    return CrossScorer.load(path) if design == "cross" else AnswerScorer.load(path)
