"""Whether to answer at all: refuse when the gate score is under a threshold tau.

`choose_tau` fits tau on labelled questions; `Gate` is the shipped artifact (signal, model, tau, embedder,
retrieval settings, what it was fitted on) that `run` and `ask` apply to any KB; `fit_gate` makes one.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:
    from rag.voice.abstain import CombinedModel

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


class GateMismatch(ValueError):
    """A shipped gate used with settings it was not fitted for (another signal, embedder or retrieval)."""


GATE_VERSION = 1


@dataclass(frozen=True)
class Gate:
    """The answer gate as one versioned artifact: refuse when ``score < tau``.

    signal: one of `rag.voice.abstain.ALL_SIGNALS`; model: the `rag.voice.abstain.CombinedModel` (``combined`` only, else
    None); tau: the threshold on that score; embedder: `rag.retrieval.embed.EMBEDDER_ID` of the vectors the signals were
    computed from; retrieval: the search settings the signals depend on (`rag.config.gate_retrieval`);
    fitted_on: what it was fitted on (KB, queries file, class counts, tau policy) for the reader.
    """

    signal: str
    tau: float
    model: "CombinedModel | None"
    embedder: str
    retrieval: Mapping
    fitted_on: Mapping

    def scores(self, signals: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
        """``{query_id: gate score}`` (rounded to 6 decimals) from `rag.voice.abstain.features` rows."""
        from rag.voice.abstain import signal_scores

        return {q: round(s, 6) for q, s in signal_scores(self.signal, signals, self.model).items()}

    def check(self, signal: str, embedder: str, retrieval: Mapping) -> None:
        """Raise GateMismatch unless the gate was fitted for this signal, embedder and retrieval settings."""
        if signal != self.signal:
            raise GateMismatch(f"the gate was fitted for signal {self.signal!r}, the params ask for {signal!r}")
        if embedder != self.embedder:
            raise GateMismatch(f"the gate was fitted on vectors of {self.embedder!r}, this is {embedder!r}")
        differ = sorted(k for k in set(self.retrieval) | set(retrieval) if self.retrieval.get(k) != retrieval.get(k))
        if differ:
            raise GateMismatch("the gate was fitted with other retrieval settings: " + ", ".join(
                f"{k} {self.retrieval.get(k)!r} there, {retrieval.get(k)!r} here" for k in differ))

    def to_dict(self) -> dict:
        """JSON-ready; `Gate.from_dict` reads it back."""
        return {"version": GATE_VERSION, "signal": self.signal, "tau": self.tau, "embedder": self.embedder,
                "retrieval": dict(self.retrieval), "fitted_on": dict(self.fitted_on),
                "model": None if self.model is None else self.model.to_dict()}

    @classmethod
    def from_dict(cls, d: Mapping) -> "Gate":
        """Inverse of `to_dict`. Raises ValueError for another version, an unknown signal or a wrong shape."""
        from rag.voice.abstain import ALL_SIGNALS, CombinedModel

        if d.get("version") != GATE_VERSION:
            raise ValueError(f"gate version {d.get('version')!r}, expected {GATE_VERSION}")
        if d["signal"] not in ALL_SIGNALS:
            raise ValueError(f"unknown signal {d['signal']!r}")
        model = None if d["model"] is None else CombinedModel.from_dict(d["model"])
        if (model is None) == (d["signal"] == "combined"):
            raise ValueError("a combined gate needs a model, and only a combined gate has one")
        return cls(d["signal"], float(d["tau"]), model, str(d["embedder"]), dict(d["retrieval"]), dict(d["fitted_on"]))

    @classmethod
    def load(cls, path: str | Path) -> "Gate":
        """Read a gate file (models/gate.json). Raises InputError naming ``path`` when it is missing or bad."""
        from rag.io import InputError

        try:
            d = json.loads(Path(path).read_text(encoding="utf-8"))
            return cls.from_dict(d)
        except FileNotFoundError:
            raise InputError(f"{path}: no gate file (make repro writes models/gate.json; `rag run KB QUESTIONS "
                             "--save-gate FILE` fits one on labelled questions and writes it)") from None
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise InputError(f"{path}: not a gate file ({type(e).__name__}: {e})") from None


def fit_gate(signals: Mapping[str, Mapping[str, float]], answerable: Mapping[str, bool], signal: str,
             policy: str, epsilon: float, seed: int, embedder: str, retrieval: Mapping,
             fitted_on: Mapping) -> tuple[Gate, dict]:
    """Fit the gate on labelled questions: the combined model (`rag.voice.abstain.fit_combined`, ``signal`` combined
    only) on ``signals`` (`rag.voice.abstain.features` rows) and ``answerable``, then tau on the same questions'
    scores (`choose_tau` with ``policy``/``epsilon``). Returns ``(gate, choose_tau's report + signal)``.
    Raises ThresholdError when the labels hold one class, or as `choose_tau` does."""
    from rag.voice.abstain import fit_combined

    ids = list(signals)
    if len({bool(answerable[q]) for q in ids}) < 2:
        raise ThresholdError("fitting the gate needs answerable and unanswerable questions")
    model = fit_combined([signals[q] for q in ids], [answerable[q] for q in ids], seed) if signal == "combined" else None
    gate = Gate(signal, 0.0, model, embedder, dict(retrieval), {})
    report = choose_tau(gate.scores(signals), answerable, policy, epsilon)
    fitted = {**fitted_on, "questions": len(ids), "answerable": sum(bool(answerable[q]) for q in ids),
              "policy": policy, "epsilon": epsilon}
    return Gate(signal, report["tau"], model, embedder, dict(retrieval), fitted), {"signal": signal, **report}
