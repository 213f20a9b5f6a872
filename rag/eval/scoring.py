"""Answer key for what was said: factual accuracy, refusals, unsupported and grounded-but-wrong sentences."""
from __future__ import annotations

from collections import Counter
from typing import Mapping, Sequence

from rag.voice.answer import STATUSES
from rag.voice.verify import answer_claims, number_facts
from rag.voice.rewrite import DEFAULT_RULES


def has_facts(say: str, facts: Sequence[str]) -> bool:
    """True if ``say`` contains every fact string, case-insensitive (an empty list is never a hit)."""
    return bool(facts) and all(f.lower() in say.lower() for f in facts)


def unsupported(row: dict, kb: Mapping[str, str]) -> bool:
    """A said (llm/extractive) sentence with a number or time absent from its cited document."""
    if row["status"] == "refused":
        return False
    doc = kb.get(row["source"])
    return doc is None or not answer_claims(row["say"], DEFAULT_RULES) <= number_facts(doc)


def _ratio(num: int, den: int) -> float:
    return round(num / den, 6) if den else 0.0


def status_counts(final_rows: Sequence[dict]) -> dict:
    """What needs no labels: ``n_queries``, ``n_<status>`` for each of `rag.voice.answer.STATUSES` and ``reasons``
    (count of each reason of a row not verified from the LLM)."""
    counts = Counter(r["status"] for r in final_rows)
    return {"n_queries": len(final_rows), **{f"n_{s}": counts.get(s, 0) for s in STATUSES},
            "reasons": dict(sorted(Counter(r["reason"] for r in final_rows if r["status"] != "llm").items()))}


def final_metrics(queries: Sequence[dict], final_rows: Sequence[dict], kb: Mapping[str, str]) -> dict:
    """Metrics of the final answers (ratios are 0.0, never NaN, when the denominator is 0).

    - `status_counts`: status counts (llm / extractive / refused) and ``reasons``;
    - factual_accuracy: answerable questions whose ``say`` contains every ``facts`` string;
    - refusal_accuracy (= refusal_recall): unanswerable questions that were refused;
    - refusal_precision: refused questions that were unanswerable;
    - answerable_refused: answerable questions refused;
    - unsupported_said: said sentences with a number or time not in the cited document;
    - grounded_wrong_said: said sentences (llm or extractive) that do not answer: an answerable question's
      missing a fact, or any said to an unanswerable question.
    """
    by_id = {r["id"]: r for r in final_rows}
    rows = [(q, by_id[q["id"]]) for q in queries]
    said = [(q, r) for q, r in rows if r["status"] != "refused"]
    answerable = [(q, r) for q, r in rows if q["answerable"]]
    unanswerable = [(q, r) for q, r in rows if not q["answerable"]]
    refused = [(q, r) for q, r in rows if r["status"] == "refused"]
    return {
        **status_counts([r for _, r in rows]),
        "factual_accuracy": _ratio(sum(has_facts(r["say"], q["facts"]) for q, r in answerable), len(answerable)),
        "refusal_accuracy": _ratio(sum(r["status"] == "refused" for _, r in unanswerable), len(unanswerable)),
        "refusal_precision": _ratio(sum(not q["answerable"] for q, _ in refused), len(refused)),
        "refusal_recall": _ratio(sum(r["status"] == "refused" for _, r in unanswerable), len(unanswerable)),
        "answerable_refused": sum(r["status"] == "refused" for _, r in answerable),
        "unsupported_said": sum(unsupported(r, kb) for _, r in said),
        "grounded_wrong_said": sum(not (q["answerable"] and has_facts(r["say"], q["facts"])) for q, r in said),
    }
