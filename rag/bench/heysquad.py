"""HeySQuAD dev-common (Wu et al. 2023, arXiv:2304.13689) as a spoken-question retrieval benchmark.

Three SQuAD v1.1 files ask the same 1,002 questions on the same 311 paragraphs of 16 articles:
``typed`` (the original SQuAD text), ``human`` (human-spoken audio, machine-transcribed) and ``machine``
(TTS audio, machine-transcribed). A passage is a paragraph (id ``"{article}_{paragraph}"``, see
`rag.bench.squad`); a question's one relevant passage is the paragraph it was asked on.
"""
from __future__ import annotations

import random
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np

from rag.retrieval.chunk import Passage
from rag.io import InputError
from rag.retrieval.search import HybridConfig
from rag.retrieval.sentences import SentenceIndex
from rag.bench.squad import load_answers, load_squad
from rag.voice.verify import VerifyRules

SOURCES = {"typed": "dev-common-original-1002.json",
           "human": "dev-common-human-transcribed-1002.json",
           "machine": "dev-common-machine-transcribed-1002.json"}


def load_heysquad(folder: str | Path) -> tuple[list[dict], list[dict]]:
    """Read the three files of ``folder`` (names in ``SOURCES``) into ``(passages, queries)``.

    passages: ``{"_id", "title", "text", "article"}`` in file order. queries: ``{"id", "relevant":
    [passage id], "answerable": True, "typed", "human", "machine", "answers"}`` (the three question texts
    and the typed file's gold answer strings), in file order.
    Raises InputError naming the file when a file is missing or malformed, or when the spoken files'
    passages, question ids or gold paragraphs differ from the typed file's.
    """
    folder = Path(folder)
    sets = {name: load_squad(folder / file) for name, file in SOURCES.items()}
    typed = sets["typed"]
    for name, s in sets.items():
        where = folder / SOURCES[name]
        if [(p["_id"], p["text"]) for p in s.passages] != [(p["_id"], p["text"]) for p in typed.passages]:
            raise InputError(f"{where}: paragraphs differ from {SOURCES['typed']}")
        if [q["_id"] for q in s.queries] != [q["_id"] for q in typed.queries] or s.qrels != typed.qrels:
            raise InputError(f"{where}: question ids or their paragraphs differ from {SOURCES['typed']}")
    texts = {name: [q["text"] for q in s.queries] for name, s in sets.items()}
    answers = load_answers(folder / SOURCES["typed"])
    queries = [{"id": q["_id"], "relevant": list(typed.qrels[q["_id"]]), "answerable": True,
                **{name: texts[name][i] for name in SOURCES}, "answers": answers[q["_id"]]}
               for i, q in enumerate(typed.queries)]
    return typed.passages, queries


def read_prepared(data_dir: str | Path) -> tuple[list[dict], list[dict]]:
    """``(passages, queries)`` from the prepared files of ``data_dir`` (stage fetch_data: passages.jsonl with ``_id``,
    ``text``, ``article``; queries.jsonl with ``id``, ``relevant`` and the three forms of ``SOURCES``). Raises
    InputError naming the file and line of a row that lacks a field."""
    from rag.io import read_jsonl

    data = Path(data_dir)
    return (read_jsonl(data / "passages.jsonl", required=("_id", "text", "article")),
            read_jsonl(data / "queries.jsonl", required=("id", "relevant", *SOURCES)))


def sample(passages: Sequence[dict], queries: Sequence[dict], n_passages: int,
           seed: int) -> tuple[list[dict], list[dict]]:
    """``n_passages`` passages drawn by ``random.Random(seed)`` and the questions asked on them, both in
    file order; ``n_passages = 0`` keeps everything. Raises ValueError unless 0 <= n_passages <= len(passages).
    """
    if not 0 <= n_passages <= len(passages):
        raise ValueError(f"n_passages must be in [0, {len(passages)}], got {n_passages}")
    if n_passages == 0:
        return list(passages), list(queries)
    kept = set(random.Random(seed).sample(range(len(passages)), n_passages))
    chosen = [p for i, p in enumerate(passages) if i in kept]
    ids = {p["_id"] for p in chosen}
    return chosen, [q for q in queries if q["relevant"][0] in ids]


def as_passages(rows: Sequence[dict]) -> list[Passage]:
    """Index passages: each paragraph is its own "document" (``doc = id``), so document-level metrics
    (`rag.eval.evaluate`) are paragraph-level here."""
    return [Passage(r["_id"], r["_id"], r["text"]) for r in rows]


def as_transcripts(queries: Sequence[dict], source: str) -> list[dict]:
    """One source's questions in the voice-track query shape (``id``, ``asr``, ``context`` = None), for
    `rag.voice.queries.raw_queries` / `rewrite_queries`. HeySQuAD has no follow-ups."""
    return [{"id": q["id"], "asr": q[source], "context": None} for q in queries]


def asr_penalty(matrix: Mapping[str, Mapping[str, Mapping[str, Mapping[str, float]]]], spoken: str,
                metric: str = "mrr@10") -> dict[str, dict[str, float]]:
    """``{form: {mode: (typed - spoken) / typed}}`` of ``metric``: the relative drop from typed to spoken
    questions (0.10 = 10 % worse; negative = spoken is better). matrix: ``{source: {form: {mode: metrics}}}``.
    """
    typed = matrix["typed"]
    return {form: {mode: round((m[metric] - matrix[spoken][form][mode][metric]) / m[metric], 6)
                   for mode, m in by_mode.items()}
            for form, by_mode in typed.items()}


def sentence_picks(queries: Sequence[dict], texts: Mapping[str, str], vectors: Mapping[str, np.ndarray],
                   docs: Mapping[str, Sequence[str]], sentences: SentenceIndex, rules: VerifyRules, mode: str,
                   hybrid: HybridConfig) -> list[dict]:
    """The extractive fallback's pick for every query, scored against SQuAD's gold answer spans.

    For each query, the sentences of ``docs[id]`` (`rag.voice.answer.candidate_sentences`) are ranked by
    `rag.voice.answer.pick_sentence` with the (384,) query vector ``vectors[id]`` and the sentences' vectors
    precomputed in ``sentences`` (`rag.retrieval.sentences.SentenceIndex` of the passages). Returns one row per query, in order:
    ``{"id", "hit": the pick contains a gold answer (case-insensitive substring), "cosine": the pick's
    cosine with the query, "ceiling": some candidate contains one, "typed": the query asks for a known
    answer type (`rag.voice.verify.asked_types`)}``; a query without candidates has hit False, cosine None
    (the fallback refuses it). Raises InputError naming the query id unless ``answers`` is a list of
    non-empty strings.
    """
    from rag.voice.answer import candidate_sentences, pick_sentence
    from rag.voice.verify import asked_types

    rows = []
    for q in queries:
        if not isinstance(q["answers"], list) or not all(isinstance(a, str) and a.strip() for a in q["answers"]):
            raise InputError(f"query {q['id']}: answers must be a list of non-empty strings, got {q['answers']!r}")
        text, gold, v = texts[q["id"]], [a.lower() for a in q["answers"]], vectors[q["id"]]
        found = candidate_sentences(text, docs[q["id"]], sentences, rules)
        cands = [s for s, _, _ in found]
        holds = [any(a in s.lower() for a in gold) for s in cands]
        row = {"id": q["id"], "hit": False, "cosine": None, "ceiling": any(holds),
               "typed": bool(asked_types(text, rules))}
        if cands:
            matrix = np.stack([v for _, _, v in found])
            best = pick_sentence(text, v, cands, matrix, rules, mode, hybrid)
            row.update(hit=holds[best], cosine=float(matrix[best] @ v))
        rows.append(row)
    return rows


def selective_accuracy(picks: Sequence[dict], min_cosine: float) -> dict[str, float]:
    """Picks said only when their cosine is >= ``min_cosine`` (`rag.voice.answer.AnswerSettings.min_sentence_cosine`);
    a query without a pick (cosine None) is always refused.

    Returns ``said`` (share of queries said), ``hit_said`` / ``hit_refused`` (share of said / refused picks
    holding a gold answer; 0.0 when none) and ``wrong_said`` / ``right_refused`` (counts).
    """
    said = [p for p in picks if p["cosine"] is not None and p["cosine"] >= min_cosine]
    refused = [p for p in picks if p["cosine"] is None or p["cosine"] < min_cosine]
    def share(rows):
        return round(sum(p["hit"] for p in rows) / len(rows), 6) if rows else 0.0
    return {"said": round(len(said) / len(picks), 6) if picks else 0.0, "hit_said": share(said),
            "hit_refused": share(refused), "wrong_said": sum(not p["hit"] for p in said),
            "right_refused": sum(p["hit"] for p in refused)}


def article_split(passages: Iterable[Mapping], queries: Iterable[Mapping]) -> dict[str, str]:
    """``{query id: "train" | "report"}``: "train" when the article of the query's gold paragraph is even.

    passages: rows with ``_id`` and ``article`` (int); queries: rows with ``id`` and ``relevant`` (one gold
    paragraph id first). Raises KeyError naming a query whose gold paragraph is not among ``passages``.
    """
    article = {p["_id"]: int(p["article"]) for p in passages}
    out = {}
    for q in queries:
        gold = q["relevant"][0]
        if gold not in article:
            raise KeyError(f"query {q['id']}: gold paragraph {gold!r} is not in the passages")
        out[q["id"]] = "train" if article[gold] % 2 == 0 else "report"
    return out


def train_folds(passages: Iterable[Mapping], queries: Iterable[Mapping], k: int = 2) -> dict[str, int]:
    """``{query id: fold}`` for the queries of the train half (`article_split`), folds 0 .. k-1 by article: the
    train half's articles in ascending order, article i in fold ``i % k``: the folds of a cross-validation inside
    the train half (stage finetune_e5_sentences). Raises KeyError as `article_split`; ValueError if k < 2.
    """
    if k < 2:
        raise ValueError(f"train_folds: k must be at least 2, got {k}")
    queries = list(queries)
    article = {p["_id"]: int(p["article"]) for p in passages}
    split = article_split([{"_id": d, "article": a} for d, a in article.items()], queries)
    train = {q["id"]: article[q["relevant"][0]] for q in queries if split[q["id"]] == "train"}
    fold = {a: i % k for i, a in enumerate(sorted(set(train.values())))}
    return {qid: fold[a] for qid, a in train.items()}
