"""Training pairs for a bi-encoder: (query, positive passage[, hard negative passage]), or (query, answer sentence,
hard negative sentence of the same paragraph).

Only queries a split marks "train" are used (HeySQuAD: `rag.bench.heysquad.article_split`, even articles train and
odd ones report), so no paragraph and no question of the report half reaches training. Pure Python.
"""
from __future__ import annotations

from typing import Callable, Mapping, Sequence

FORMS = ("typed", "human", "machine")  # HeySQuAD's question texts: typed, human ASR, machine ASR


def training_pairs(passages: Sequence[Mapping], queries: Sequence[Mapping], split: Mapping[str, str],
                   forms: Sequence[str] = FORMS,
                   hard_negative: Callable[[str, str], str | None] | None = None) -> list[dict]:
    """Rows ``{"id", "form", "query", "positive"[, "negative"]}`` for every answerable "train" query and form.

    Texts are kept as written; a (lower-cased query, paragraph) repeated across forms (a transcript equal to the
    typed question) is kept once, in the first form of ``forms``. ``hard_negative(query, gold id)``, when given,
    returns the id of a wrong paragraph of the same KB (e.g. the best BM25 one) or None (that row then has no
    negative and is left out, so every row has the same columns). Order: queries as given, then forms.
    Raises ValueError for a form a query lacks.
    """
    text = {p["_id"]: p["text"] for p in passages}
    seen: set[tuple[str, str]] = set()
    rows = []
    for q in queries:
        if split[q["id"]] != "train" or not q.get("answerable", True):
            continue
        gold = q["relevant"][0]
        for form in forms:
            if not isinstance(q.get(form), str) or not q[form].strip():
                raise ValueError(f"query {q['id']}: no {form!r} text")
            key = (q[form].lower().strip(), gold)
            if key in seen:
                continue
            seen.add(key)
            row = {"id": q["id"], "form": form, "query": q[form], "positive": text[gold]}
            if hard_negative is not None:
                neg = hard_negative(q[form], gold)
                if neg is None:
                    continue
                row["negative"] = text[neg]
            rows.append(row)
    return rows


def split_pairs(queries: Sequence[Mapping], qrels: Mapping[str, Mapping[str, int]], texts: Mapping[str, str],
                split: str = "train") -> list[dict]:
    """Rows ``{"id", "query", "positive"}`` for every query of BEIR-style ``queries`` (``_id``, ``text``, ``split``)
    in ``split``, one per relevant passage (grade > 0) of ``qrels``, ``positive`` = ``texts[passage id]``, in
    query order. Queries of other splits never appear. Raises KeyError naming the query for a query without qrels
    or a relevant passage missing from ``texts``."""
    rows = []
    for q in queries:
        if q["split"] != split:
            continue
        if q["_id"] not in qrels:
            raise KeyError(f"query {q['_id']}: not in qrels")
        for pid, grade in sorted(qrels[q["_id"]].items()):
            if int(grade) > 0:
                if pid not in texts:
                    raise KeyError(f"query {q['_id']}: relevant passage {pid} not among the passages")
                rows.append({"id": q["_id"], "query": q["text"], "positive": texts[pid]})
    return rows


def holds_span(sentence: str, answers: Sequence[str]) -> bool:
    """Whether ``sentence`` holds one of the gold ``answers`` spans (case-insensitive substring): SQuAD's answer
    sentence test, shared by the training rows and the evaluation labels (`rag.train.evaluate.span_labels`)."""
    low = sentence.lower()
    return any(a.lower() in low for a in answers)


def answer_sentence_pairs(queries: Sequence[Mapping], texts: Mapping[str, Mapping[str, str]],
                          sentences_of: Callable[[str], Sequence[str]], split: Mapping[str, str],
                          hardest: Callable[[str, Sequence[str]], str], forms: Sequence[str] = FORMS) -> list[dict]:
    """Rows ``{"id", "form", "doc", "query", "positive", "negative"}`` teaching which *sentence* answers (not which is
    about the topic): for every answerable "train" query (``answers``: gold spans, ``relevant``: [gold paragraph id])
    and form, ``doc`` = the gold paragraph id, ``query`` = ``texts[form][id]`` (e.g. the rewritten transcript; a query
    missing there is skipped), ``positive`` = the first sentence of the gold paragraph (``sentences_of(doc)``) holding
    a gold span (case-insensitive; when several do, the others are neither positive nor negative), ``negative`` =
    ``hardest(query, the paragraph's sentences holding no span)`` (e.g. the one the untrained encoder ranks highest: a
    mined hard negative). A paragraph with no sentence holding a span, or none without, gives no row. A (lower-cased
    query, question) repeated across forms is kept once, in the first form. Order: queries as given, then forms."""
    rows = []
    for q in queries:
        if split[q["id"]] != "train" or not q.get("answerable", True):
            continue
        sents = list(sentences_of(q["relevant"][0]))
        holds = [holds_span(s, q["answers"]) for s in sents]
        positives = [s for s, h in zip(sents, holds) if h]
        negatives = [s for s, h in zip(sents, holds) if not h]
        if not positives or not negatives:
            continue
        seen: set[str] = set()
        for form in forms:
            text = texts[form].get(q["id"])
            if text is None or text.lower().strip() in seen:
                continue
            seen.add(text.lower().strip())
            rows.append({"id": q["id"], "form": form, "doc": q["relevant"][0], "query": text, "positive": positives[0],
                         "negative": hardest(text, negatives)})
    return rows
