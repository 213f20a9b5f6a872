"""Every retrieval mode x query form in one run, and the tables and curves made from it.

A *matrix* is ``{form: {mode: metrics}}``: ``form`` names a set of query texts (e.g. ``raw`` ASR vs
``rewritten``), ``mode`` is one of `rag.retrieval.search.MODES`, ``metrics`` is what
`rag.eval.evaluate.retrieval_metrics` returns (``"recall@5"``, ``"mrr@10"``, ... in [0, 1]).
"""
from __future__ import annotations

from typing import Mapping, Sequence

from rag.eval.evaluate import doc_runs, embed_texts, retrieval_metrics
from rag.retrieval.search import MODES, PassageIndex

CURVE_KS = tuple(range(1, 11))  # recall@k curves: k = 1..10 (doc_runs keeps the top 10)


def evaluate_matrix(index: PassageIndex, queries: Sequence[dict], forms: Mapping[str, Mapping[str, str]],
                    modes: Sequence[str] = MODES, ks: Sequence[int] = CURVE_KS,
                    embedder=None) -> dict[str, dict[str, dict]]:
    """``{form: {mode: metrics at ks}}`` for every form and mode.

    queries: dicts with ``id``, ``relevant`` (gold document names) and ``answerable``; only answerable
    ones are scored. forms: ``{form: {query_id: text}}``; each form's texts are embedded once, in one batch,
    and shared by the modes. embedder: the one that embedded ``index`` (default: the packaged MiniLM).
    """
    out: dict[str, dict[str, dict]] = {}
    for form, texts in forms.items():
        vectors = embed_texts(texts, embedder)
        out[form] = {mode: retrieval_metrics(queries, doc_runs(index, texts, mode, vectors), ks)
                     for mode in modes}
    return out


def select(matrix: Mapping[str, Mapping[str, Mapping[str, float]]], names: Sequence[str]) -> dict:
    """The same matrix with only the metrics in ``names`` (e.g. ``["recall@1", "mrr@10"]``)."""
    return {form: {mode: {n: m[n] for n in names} for mode, m in by_mode.items()}
            for form, by_mode in matrix.items()}


def recall_curves(matrix: Mapping[str, Mapping[str, Mapping[str, float]]],
                  ks: Sequence[int] = CURVE_KS) -> list[dict]:
    """Plot rows for recall@k curves: one row per k, ``{"k": k, "<mode>_<form>": recall@k, ...}``.

    One column per variant (not one row per variant and k) because DVC's built-in plot templates
    draw one series per y field.
    """
    return [{"k": k, **{f"{mode}_{form}": m[f"recall@{k}"]
                        for form, by_mode in matrix.items() for mode, m in by_mode.items()}}
            for k in ks]


def score_points(per_query: Sequence[Mapping], tau: float) -> list[dict]:
    """Plot rows for the abstention gate: queries by gate score ascending, ``{"rank": 1.., "id",
    "answerable": score or None, "unanswerable": score or None, "tau": tau}``.

    per_query: rows with ``id``, ``answerable`` and ``score`` (the gate score, ``abstain.signal``; data/voice/per_query.jsonl);
    tau: the fitted threshold (metrics/voice/threshold.json). The empty class is None (JSON null), which
    Vega-Lite leaves out, so each class is its own series and tau draws a flat line.
    """
    ordered = sorted(per_query, key=lambda r: (r["score"], r["id"]))
    return [{"rank": i, "id": r["id"], "answerable": r["score"] if r["answerable"] else None,
             "unanswerable": None if r["answerable"] else r["score"], "tau": tau}
            for i, r in enumerate(ordered, 1)]


def markdown_table(header: Sequence[str], rows: Sequence[Sequence]) -> str:
    """A GitHub Markdown table; floats are written with 3 decimals."""
    def cell(x):
        return f"{x:.3f}" if isinstance(x, float) else str(x)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(x) for x in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def csv_text(rows: Sequence[Mapping]) -> str:
    """Rows of equal keys as CSV text (header = the first row's keys); floats as written by ``str``."""
    keys = list(rows[0])
    return "".join(",".join(map(str, r)) + "\n" for r in [keys] + [[row[k] for k in keys] for row in rows])
