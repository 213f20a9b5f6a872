"""Confidence intervals of a rate over questions: the percentile bootstrap (Efron & Tibshirani 1993, ch. 13),
computed by ``scipy.stats.bootstrap``."""
from __future__ import annotations

from typing import Sequence

import numpy as np
from scipy import stats


def bootstrap_interval(values: Sequence[float], confidence: float = 0.95, resamples: int = 2000,
                       seed: int = 0) -> tuple[float, float]:
    """The ``confidence`` percentile-bootstrap interval of the mean of ``values`` (e.g. 0/1 per question: a rate),
    ``resamples`` resamples drawn with ``seed`` (repeatable), rounded to 4 places.

    Never NaN: no values gives (0.0, 0.0); values all equal give (v, v) (every resample has the same mean).
    Raises ValueError for a confidence outside (0, 1)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return 0.0, 0.0
    if np.all(x == x[0]):
        return round(float(x[0]), 4), round(float(x[0]), 4)
    res = stats.bootstrap((x,), np.mean, confidence_level=confidence, n_resamples=resamples, method="percentile",
                          rng=np.random.default_rng(seed))
    return round(float(res.confidence_interval.low), 4), round(float(res.confidence_interval.high), 4)
