"""Whether to answer at all: refuse when the retrieval signal is under a threshold tau."""
from __future__ import annotations

from typing import Mapping

POLICIES = ("midpoint", "above_unanswerable")


class ThresholdError(ValueError):
    """Answerable and unanswerable questions overlap: no tau separates them."""


def choose_tau(scores: Mapping[str, float], answerable: Mapping[str, bool], policy: str = "midpoint",
               epsilon: float = 0.01) -> dict:
    """Fit tau on labelled questions.

    scores: ``{query_id: top-1 signal}`` (cosine by default); answerable: ``{query_id: bool}``.
    ``midpoint`` (the seed's): tau = (answerable_min + unanswerable_max) / 2; needs answerable_min >
    unanswerable_max, else raises ThresholdError naming the questions responsible.
    ``above_unanswerable``: tau = unanswerable_max + ``epsilon``: never answer a question like the
    unanswerable ones; answerable questions scoring below tau are refused (``answerable_refused``).
    For a phone line a transfer to the front desk is cheaper than a wrong answer. Returns ``{tau, answerable_min, unanswerable_max, margin, policy}`` where
    margin = answerable_min - unanswerable_max (negative: overlap), answerable_refused. Raises ThresholdError naming the overlapping
    questions, ValueError for an unknown policy or a class with no question.
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown tau policy {policy!r}; expected one of {POLICIES}")
    pos = {q: s for q, s in scores.items() if answerable[q]}
    neg = {q: s for q, s in scores.items() if not answerable[q]}
    if not pos or not neg:
        raise ValueError("choosing tau needs at least one answerable and one unanswerable question")
    a_min, u_max = min(pos.values()), max(neg.values())
    if policy == "above_unanswerable":
        tau = u_max + epsilon
        return {"policy": policy, "tau": round(tau, 6), "answerable_min": round(a_min, 6),
                "unanswerable_max": round(u_max, 6), "margin": round(a_min - u_max, 6),
                "answerable_refused": sorted(q for q, s in pos.items() if s < tau)}
    if a_min <= u_max:
        low = sorted(q for q, s in pos.items() if s <= u_max)
        high = sorted(q for q, s in neg.items() if s >= a_min)
        raise ThresholdError(
            f"no tau separates the questions: answerable {low} score <= {u_max:.4f} "
            f"(best unanswerable) and unanswerable {high} score >= {a_min:.4f} (worst answerable)")
    return {"policy": policy, "tau": round((a_min + u_max) / 2, 6), "answerable_min": round(a_min, 6),
            "unanswerable_max": round(u_max, 6), "margin": round(a_min - u_max, 6), "answerable_refused": []}
