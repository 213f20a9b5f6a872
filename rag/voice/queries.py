"""Voice-track queries: loading with checks, and rewriting follow-ups in order."""
from __future__ import annotations

import unicodedata
from difflib import get_close_matches
from pathlib import Path

from rag.io import InputError, normalise_text, read_jsonl
from rag.voice.rewrite import DEFAULT_RULES, RewriteRules, rewrite

REQUIRED = ("id", "asr")
LABELS = ("relevant", "answerable", "facts")
KNOWN = (*REQUIRED, "context", *LABELS, "spoken")  # other fields are kept and ignored, unless one is a typo of these


def load_queries(path: str | Path) -> list[dict]:
    """Read a queries.jsonl: ``id`` and ``asr`` (the transcript) required; ``context`` (the id of an earlier
    query this one follows up; default none); the labels ``relevant`` (gold document names), ``answerable`` and
    ``facts`` (strings a right answer contains) on every row or on none (`is_labelled`); ``spoken`` optional.

    The file is read as ``utf-8-sig`` (a byte-order mark is dropped); ``asr``, ``spoken`` and ``facts`` are
    Unicode-normalised as KB text is (`rag.io.normalise_text`).
    Raises InputError naming ``path:line`` for a missing field, a wrong type, a duplicate id, a
    context that is not the id of an EARLIER query, or labels on some rows only.
    """
    rows = read_jsonl(path, required=REQUIRED)
    if not rows:
        raise InputError(f"{path}: no queries")
    seen: set[str] = set()
    line_of = _line_numbers(path)
    labelled = any(k in rows[0] for k in LABELS)
    for row, line in zip(rows, line_of):
        where = f"{path}:{line} (query {row.get('id')!r})"
        row.setdefault("context", None)
        missing = [k for k in LABELS if k not in row] if labelled else [k for k in LABELS if k in row]
        if missing:
            raise InputError(f"{where}: labels ({', '.join(LABELS)}) must be on every query or on none; this one "
                             f"{'lacks' if labelled else 'has'} {', '.join(missing)}")
        if not isinstance(row["id"], str) or not row["id"]:
            raise InputError(f"{where}: id must be a non-empty string")
        if any(unicodedata.category(c) in ("Cc", "Zl", "Zp") for c in row["id"]):
            raise InputError(f"{where}: id holds a control character or a line break")
        typo = next((k for k in row if k not in KNOWN and get_close_matches(k, KNOWN, 1, 0.8)), None)
        if typo is not None:
            raise InputError(f"{where}: unknown field {typo!r} (did you mean "
                             f"{get_close_matches(typo, KNOWN, 1, 0.8)[0]!r}?)")
        if row["id"] in seen:
            raise InputError(f"{where}: duplicate id")
        if not isinstance(row["asr"], str):
            raise InputError(f"{where}: asr must be a string")
        if row["context"] is not None and (not isinstance(row["context"], str) or row["context"] not in seen):
            raise InputError(f"{where}: context {row['context']!r} is not an earlier query id")
        if labelled:
            _check_labels(row, where)
            row["facts"] = [normalise_text(f) for f in row["facts"]]
        seen.add(row["id"])
        row["asr"] = normalise_text(row["asr"])
        if isinstance(row.get("spoken"), str):
            row["spoken"] = normalise_text(row["spoken"])
    return rows


def _check_labels(row: dict, where: str) -> None:
    if not isinstance(row["answerable"], bool):
        raise InputError(f"{where}: answerable must be true or false")
    for key in ("relevant", "facts"):
        if not isinstance(row[key], list) or not all(isinstance(x, str) for x in row[key]):
            raise InputError(f"{where}: {key} must be a list of strings")
    if row["answerable"] and not row["relevant"]:
        raise InputError(f"{where}: an answerable query needs at least one relevant document")
    if row["answerable"] and (not row["facts"] or not all(f.strip() for f in row["facts"])):
        raise InputError(f"{where}: an answerable query needs facts, each a non-empty string a right answer holds "
                         "(no facts can never be scored right; an empty one matches every sentence)")


def is_labelled(queries: list[dict]) -> bool:
    """True when the queries carry labels (``answerable``, ``relevant``, ``facts``; `load_queries` ensures all
    rows or none do)."""
    return bool(queries) and "answerable" in queries[0]


def check_against_kb(queries: list[dict], docs: set[str], source: str = "") -> None:
    """Raise InputError unless some query is answerable and every ``relevant`` name is a KB document
    (a misspelt gold name would otherwise count silently as a retrieval miss); ``source``, the queries file, leads
    the message when given."""
    lead = f"{source}: " if source else ""
    if not any(q["answerable"] for q in queries):
        raise InputError(f"{lead}no answerable query: retrieval metrics and tau need at least one")
    for q in queries:
        unknown = sorted(set(q["relevant"]) - docs)
        if unknown:
            raise InputError(f"{lead}query {q['id']!r}: relevant document(s) {unknown} not in the KB")


def _line_numbers(path: str | Path) -> list[int]:
    with open(path, encoding="utf-8-sig") as f:
        return [n for n, line in enumerate(f, 1) if line.strip()]


def rewrite_queries(queries: list[dict], rules: RewriteRules = DEFAULT_RULES) -> dict[str, str]:
    """``{query_id: rewritten query}``; a follow-up is resolved against its context's REWRITTEN
    query, so chains of follow-ups carry the first question along."""
    out: dict[str, str] = {}
    for q in queries:
        out[q["id"]] = rewrite(q["asr"], out.get(q["context"]) if q["context"] else None, rules)
    return out


def raw_queries(queries: list[dict]) -> dict[str, str]:
    """``{query_id: asr text}``: the recogniser output as is."""
    return {q["id"]: q["asr"] for q in queries}
