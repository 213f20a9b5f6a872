"""Selective recall (issue 19, seed 004): which earlier turns of a call join the current question as evidence.

Plain history concatenation carries every earlier topic and every earlier recogniser error into the search;
selective recall scores the call's earlier turns against the current question like passages (cosine of their
sentence embeddings) and keeps only those at or above a threshold. `recall` is the selection; `with_memory` writes
the search text a chain without an LLM uses (the recalled turns, oldest first, then the question). Stage dialogues
compares no memory, the last turn, the full history and selective recall (per-turn accuracy, tokens, time).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np


def recall(question: np.ndarray, earlier: np.ndarray, min_cosine: float) -> list[int]:
    """Indices (ascending: oldest first) of the earlier turns whose cosine with the question is >= ``min_cosine``.

    question: (d,) float32, L2-normalised (`rag.retrieval.embed`); earlier: (n, d) float32, L2-normalised rows, the
    call's earlier turns oldest first (n may be 0); min_cosine in [-1, 1] (cosine; above 1 recalls nothing).
    Raises ValueError when the widths differ or ``earlier`` is not 2-D.
    """
    earlier = np.asarray(earlier, dtype=np.float32)
    if earlier.ndim != 2 or (len(earlier) and earlier.shape[1] != np.shape(question)[0]):
        raise ValueError(f"earlier turns must be (n, {np.shape(question)[0]}), got {earlier.shape}")
    if not len(earlier):
        return []
    return [int(i) for i in np.flatnonzero(earlier @ np.asarray(question, dtype=np.float32) >= min_cosine)]


def with_memory(question: str, earlier: Sequence[str], picked: Sequence[int]) -> str:
    """The search text: the picked earlier turns (indices into ``earlier``, kept in call order) and then the
    question, joined by spaces; the question alone when nothing is picked."""
    return " ".join([earlier[i] for i in sorted(picked)] + [question])
