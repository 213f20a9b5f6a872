"""SQuAD-v1.1-style JSON -> a BEIR-style retrieval set (passages, queries, qrels), and a split by article.

Used for KorQuAD 1.0 (Korean track) and HeySQuAD (English voice track); both are SQuAD v1.1 JSON:
``{"data": [{"title": str, "paragraphs": [{"context": str, "qas": [{"id": str, "question": str,
"answers": [...]}, ...]}, ...]}, ...]}`` (Rajpurkar et al. 2016; BEIR layout: Thakur et al. 2021).

Conversion:
- every paragraph is a passage ``{"_id": f"{article_idx}_{para_idx}", "title", "text", "article"}``
  (indices from 0, in file order);
- every question is a query ``{"_id": question id, "text", "article", "passage"}``;
- qrels = ``{query_id: {passage_id: 1}}`` (the paragraph the question was asked on).

Duplicate passages: a SQuAD file may hold the same paragraph text more than once (KorQuAD 1.0 dev:
68_3 = 68_4 = 68_5 and 125_36 = 125_46). Two identical passages get identical scores from any retriever,
so the question's "own" copy is not identifiable. ``dedupe_passages`` (on by default in ``load_squad``) keeps
the first copy (file order) of each text repeated *within one article*, points the qrels of the other copies'
questions at it, and lists the dropped ids in ``SquadSet.aliases`` (dropped id -> kept id). Copies in different
articles are kept apart, so a split by article never shares a passage between train and test.
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

from rag.io import InputError


@dataclass
class SquadSet:
    """A BEIR-style retrieval set built from one SQuAD JSON file.

    passages: list of dicts ``_id, title, text, article`` (file order, duplicates removed if deduped);
    queries: list of dicts ``_id, text, article, passage`` (file order; ``passage`` = the paragraph it was
    asked on, before dedupe); qrels: ``{query_id: {passage_id: 1}}``; aliases: dropped passage id -> kept id;
    articles: the article titles, by article index.
    """

    passages: list[dict]
    queries: list[dict]
    qrels: dict[str, dict[str, int]]
    articles: list[str]
    aliases: dict[str, str] = field(default_factory=dict)


def _need(obj, key, kind, where, path):
    if not isinstance(obj, dict) or key not in obj:
        raise InputError(f"{path}: {where}: missing field {key!r}")
    value = obj[key]
    if not isinstance(value, kind):
        raise InputError(f"{path}: {where}: field {key!r} should be {kind.__name__}, got {type(value).__name__}")
    return value


def parse_squad(doc: dict, path: str | Path = "<memory>", dedupe_passages: bool = True) -> SquadSet:
    """Convert an already-parsed SQuAD v1.1 document (see module docstring) into a ``SquadSet``.

    ``path`` is only used in error messages. Raises ``InputError`` (naming ``path`` and the article /
    paragraph / question position) for a missing or mistyped field, an empty question text or a
    duplicated question id.
    """
    data = _need(doc, "data", list, "top level", path)
    passages: list[dict] = []
    queries: list[dict] = []
    qrels: dict[str, dict[str, int]] = {}
    articles: list[str] = []
    aliases: dict[str, str] = {}
    first_by_text: dict[tuple[int, str], str] = {}
    for a, article in enumerate(data):
        title = _need(article, "title", str, f"article {a}", path)
        articles.append(title)
        for p, para in enumerate(_need(article, "paragraphs", list, f"article {a}", path)):
            where = f"article {a} paragraph {p}"
            text = _need(para, "context", str, where, path)
            pid = f"{a}_{p}"
            key = (a, text)
            if dedupe_passages and key in first_by_text:
                aliases[pid] = first_by_text[key]
            else:
                first_by_text[key] = pid
                passages.append({"_id": pid, "title": title, "text": text, "article": a})
            target = aliases.get(pid, pid)
            for q, qa in enumerate(_need(para, "qas", list, where, path)):
                qwhere = f"{where} question {q}"
                qid = _need(qa, "id", str, qwhere, path)
                question = _need(qa, "question", str, qwhere, path)
                if not question.strip():
                    raise InputError(f"{path}: {qwhere} (id {qid}): empty question")
                if qid in qrels:
                    raise InputError(f"{path}: {qwhere}: duplicate question id {qid!r}")
                queries.append({"_id": qid, "text": question, "article": a, "passage": pid})
                qrels[qid] = {target: 1}
    return SquadSet(passages, queries, qrels, articles, aliases)


def _read_json(path: Path):
    """Parsed JSON of ``path``; InputError naming it for a missing file, invalid JSON or non-UTF-8."""
    if not path.is_file():
        raise InputError(f"{path}: file not found")
    try:
        with path.open(encoding="utf-8-sig") as f:
            doc = json.load(f)
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: invalid JSON at line {e.lineno} ({e.msg})") from None
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not UTF-8 ({e.reason})") from None
    return doc


def load_squad(path: str | Path, dedupe_passages: bool = True) -> SquadSet:
    """Read a SQuAD v1.1 JSON file and convert it (see ``parse_squad``).

    Raises ``InputError`` naming ``path`` for a missing file, invalid JSON or a malformed document.
    """
    path = Path(path)
    return parse_squad(_read_json(path), path, dedupe_passages)


def passage_text(passage: dict, with_title: bool) -> str:
    """Text a retriever indexes for a passage dict: ``"title\\ntext"`` or just ``text``."""
    return f"{passage['title']}\n{passage['text']}" if with_title else passage["text"]


def split_articles(n_articles: int, test_fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """Seeded split of article indices ``0..n_articles-1`` into ``(train, test)``, both sorted.

    The test side gets ``round(test_fraction * n_articles)`` articles drawn by ``random.Random(seed)``
    (Python's Mersenne Twister: the same seed gives the same split on every platform). Splitting by article
    keeps every passage and all its questions on one side, so no article is in both.
    Raises ValueError unless ``0 < test_fraction < 1`` and both sides end up non-empty.
    """
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    n_test = round(test_fraction * n_articles)
    if n_test < 1 or n_test >= n_articles:
        raise ValueError(f"test_fraction {test_fraction} of {n_articles} articles leaves a side empty")
    order = list(range(n_articles))
    random.Random(seed).shuffle(order)
    test = sorted(order[:n_test])
    train = sorted(order[n_test:])
    return train, test


def split_queries(queries: list[dict], test_articles: list[int]) -> tuple[list[dict], list[dict]]:
    """Partition queries (dicts with an ``article`` index) into ``(train, test)``, keeping file order."""
    test_set = set(test_articles)
    train = [q for q in queries if q["article"] not in test_set]
    test = [q for q in queries if q["article"] in test_set]
    return train, test


def answer_texts(doc: dict, path: str | Path = "<memory>") -> dict[str, list[str]]:
    """Gold answer strings per question id of an already-parsed SQuAD v1.1 document:
    ``{question id: [answers[i]["text"], ...]}`` (file order, duplicates kept out, possibly empty).

    Used by the Korean generation stage (answer-span match). Raises ``InputError`` (naming ``path``)
    for a missing ``data``/``paragraphs``/``qas``/``id`` field or an answer without a string ``text``.
    """
    out: dict[str, list[str]] = {}
    for a, article in enumerate(_need(doc, "data", list, "top level", path)):
        for p, para in enumerate(_need(article, "paragraphs", list, f"article {a}", path)):
            for q, qa in enumerate(_need(para, "qas", list, f"article {a} paragraph {p}", path)):
                where = f"article {a} paragraph {p} question {q}"
                qid = _need(qa, "id", str, where, path)
                texts = [_need(ans, "text", str, f"{where} answer {i}", path)
                         for i, ans in enumerate(qa.get("answers", []))]
                out[qid] = list(dict.fromkeys(texts))
    return out


def load_answers(path: str | Path) -> dict[str, list[str]]:
    """``answer_texts`` of a SQuAD v1.1 JSON file; the same ``InputError``s as ``load_squad``."""
    path = Path(path)
    return answer_texts(_read_json(path), path)
