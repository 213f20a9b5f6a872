"""Choosing a generator's `rag.ko.answer.AnswerGate` on its own replies (issue 12; stage ko_answer_gate).

A gate has two thresholds: the support score an LLM answer's sentence needs (``min_support``) and the mean
log-probability of the answer's tokens (``min_mean_logprob``, the generator's confidence: Jiang et al. 2021, "How
can we know when language models know?", TACL). `choose_answer_gate` scores every pair of a grid on replies to
questions asked twice, with the gold passage among those shown (gold-included: the span hit is counted) and
without it (gold-excluded: any answer but the abstention is a hallucination, `rag.ko.answer.hallucinated`), and
picks the pair with the best span hit whose hallucination stays within a bound. The replies are decided exactly
as `rag.ko.answer.decide_ko` decides them; only what is said is scored, as `rag.ko.answer.score_rows` does.
"""
from __future__ import annotations

from typing import Mapping, Sequence

from rag.ko.answer import AnswerGate, decide_ko, decide_reply, hallucinated, is_abstention, mean_logprob, span_match


def _rates(rows: Sequence[Mapping], finals: Sequence[dict]) -> tuple[float, float, int]:
    """(gold-included span hit, gold-excluded hallucination, LLM answers said) of one decision per row."""
    inc = [(r, f) for r, f in zip(rows, finals) if not r["gold_excluded"]]
    exc = [(r, f) for r, f in zip(rows, finals) if r["gold_excluded"]]
    span = sum(span_match(f["say"], r["golds"]) for r, f in inc) / len(inc)
    halluc = sum(hallucinated(f["say"], f["citations"], r["passages"], True) for r, f in exc) / len(exc)
    return round(span, 4), round(halluc, 4), sum(f["status"] == "llm" for f in finals)


def auroc(positive: Sequence[float], negative: Sequence[float]) -> float | None:
    """Area under the ROC curve of a score separating ``positive`` from ``negative`` values: the probability that a
    random positive scores above a random negative, ties counting one half (Mann-Whitney U / (n+ n-)). None when
    either side is empty."""
    if not positive or not negative:
        return None
    wins = sum((p > n) + 0.5 * (p == n) for p in positive for n in negative)
    return round(wins / (len(positive) * len(negative)), 4)


def confidence_auroc(rows: Sequence[Mapping]) -> dict:
    """How well the mean token log-probability (`mean_logprob`) tells a right answer (gold-included, the reply holds
    a gold span) from a gold-excluded answer (anything but the abstention: the passages lacked it) and from a wrong
    gold-included one: ``{right_vs_gold_excluded, right_vs_wrong, right, wrong, gold_excluded}`` (AUROCs and
    counts; replies without an answer or log-probabilities are left out)."""
    right, wrong, excluded = [], [], []
    for r in rows:
        m = mean_logprob(r.get("answer_logprobs"))
        if r["error"] or m is None or not r["raw_answer"] or is_abstention(r["raw_answer"]):
            continue
        if r["gold_excluded"]:
            excluded.append(m)
        else:
            (right if span_match(r["raw_answer"], r["golds"]) else wrong).append(m)
    return {"right_vs_gold_excluded": auroc(right, excluded), "right_vs_wrong": auroc(right, wrong),
            "right": len(right), "wrong": len(wrong), "gold_excluded": len(excluded)}


def choose_answer_gate(rows: Sequence[Mapping], support, min_supports: Sequence[float],
                       max_hallucination: float, min_gain: float) -> dict:
    """Choose ``(min_support, min_mean_logprob)`` on replies.

    rows: one per call, each with ``question``, ``passages`` (the texts shown), ``raw_answer``, ``raw_citations``,
    ``error``, ``answer_logprobs``, ``gold_excluded`` (bool) and ``golds``; both conditions present. support: the
    sentence support (`rag.ko.answer.ShareSupport` or `rag.ko.support.LearnedSupport`). The grid: every
    ``min_supports`` value and the support's own ``min_score`` (the verifier alone), times no confidence threshold
    and every mean log-probability of an answer that the verifier passes at that support (between two of them
    nothing changes). Chosen: the best gold-included span hit with gold-excluded hallucination <= max_hallucination;
    ties go to the larger min_support, then the larger min_mean_logprob (the stricter gate). Baseline: the verifier
    alone, ``AnswerGate()``. ``adopt`` is True when the chosen span hit beats the baseline's by >= min_gain.

    Returns ``{baseline, chosen, adopt, frontier, points}``: baseline and chosen as ``{min_support,
    min_mean_logprob, span_hit, hallucination, llm_said}`` (rates over the condition's questions, None for a
    threshold not used); frontier: the best point within the bound for each min_support; points: pairs scored.
    Raises ValueError when a condition has no rows or no point is within the bound.
    """
    if not any(r["gold_excluded"] for r in rows) or all(r["gold_excluded"] for r in rows):
        raise ValueError("choose_answer_gate needs gold-included and gold-excluded replies")
    # what a gate that fails an answer's confidence says instead (decide_ko's fallback does not read the answer)
    fallback = [decide_ko(r["question"], None, None, r["passages"], "low_confidence", support) for r in rows]
    means = [mean_logprob(r.get("answer_logprobs")) for r in rows]

    def point(s: float | None, c: float | None, finals: list[dict]) -> dict:
        span, halluc, said = _rates(rows, finals)
        return {"min_support": s, "min_mean_logprob": c, "span_hit": span, "hallucination": halluc,
                "llm_said": said}

    baseline = point(None, None, [decide_reply(r, support, AnswerGate()) for r in rows])
    best, frontier, scored = None, [], 0
    for s in sorted({float(x) for x in min_supports} | {float(support.min_score)}):
        verified = [decide_reply(r, support, AnswerGate(min_support=s)) for r in rows]
        said = sorted({m for v, m in zip(verified, means) if v["status"] == "llm" and m is not None})
        top = None
        for c in [None, *said]:
            finals = [v if v["status"] != "llm" or c is None or (m is not None and m >= c) else fb
                      for v, m, fb in zip(verified, means, fallback)]
            p = point(s, c, finals)
            scored += 1
            if p["hallucination"] > max_hallucination:
                continue
            key = (p["span_hit"], s, -float("inf") if c is None else c)
            if top is None or key > top[0]:
                top = (key, p)
        if top is not None:
            frontier.append(top[1])
            if best is None or top[0] > best[0]:
                best = top
    if best is None:
        raise ValueError(f"no gate keeps gold-excluded hallucination <= {max_hallucination} on these replies")
    chosen = best[1]
    return {"baseline": baseline, "chosen": chosen, "adopt": chosen["span_hit"] - baseline["span_hit"] >= min_gain,
            "frontier": frontier, "points": scored}
