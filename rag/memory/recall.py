"""Selective recall (issue 19, seed 004): which earlier turns of a call join the current question as evidence.

Plain history concatenation carries every earlier topic and every earlier recogniser error into the search;
selective recall scores the call's earlier turns against the current question like passages (cosine of their
sentence embeddings) and keeps only those at or above a threshold. `recall` is the selection; `with_memory` writes
the search text a chain without an LLM uses (the recalled turns, oldest first, then the question). Stage dialogues
compares no memory, the last turn, the full history and selective recall (per-turn accuracy, tokens, time).

With an LLM, the recalled turns are evidence of another kind (`evidence`, `memory_lines`): the prompt lists them
after the documents as ``[memory n]`` (`rag.llm.client.build_messages`), the caller's words and what we said, never
a document the answer may cite (the reply's ``source`` enum holds the retrieved documents only, and the verifier
checks the answer against the cited document). Stage memory_evidence compares the four choices with the LLM on.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
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


@dataclass(frozen=True)
class EvidencePolicy:
    """Which earlier turns of a call the LLM sees (params ``memory.evidence``): those whose query's cosine with the
    current query is >= ``min_cosine`` (selective recall; -1 keeps every turn, the full history; above 1 none), the
    most recent ``max_items`` of them (1 with min_cosine -1: the last turn only), each text cut to ``max_chars``
    characters (`memory_lines`). ValueError naming the key for a value out of range."""

    min_cosine: float = 0.6
    max_items: int = 4
    max_chars: int = 300

    def __post_init__(self):
        if not -1.0 <= self.min_cosine <= 1.01:
            raise ValueError(f"memory.evidence.min_cosine must be in [-1, 1.01], got {self.min_cosine!r}")
        if self.max_items < 0 or self.max_chars < 1:
            raise ValueError(f"memory.evidence.max_items must be >= 0 and max_chars >= 1, got {self.max_items!r}, "
                             f"{self.max_chars!r}")


def evidence(question: np.ndarray, earlier: np.ndarray, policy: EvidencePolicy) -> list[int]:
    """Indices (oldest first) of the earlier turns the LLM sees: `recall` at ``policy.min_cosine``, the last
    ``policy.max_items`` of them. Shapes and errors as `recall`."""
    picked = recall(question, earlier, policy.min_cosine)
    return picked[-policy.max_items:] if policy.max_items else []


def memory_lines(turns: Sequence[tuple[str, str, str]], max_chars: int = 300) -> list[str]:
    """One prompt line per recalled turn ``(heard, say, status)``: what the caller said and what we answered
    ("we could not answer" for a refusal: its text is a stock phrase, not a fact). Each text is one line (every run
    of whitespace, line and paragraph separators included, is one space), cut to ``max_chars`` characters and
    quoted as a JSON string, so the caller's words cannot end the quote or start a line that looks like a document
    (``[kb-x] ...``) or another memory."""
    def quoted(text: str) -> str:
        return json.dumps(" ".join(text.split())[:max_chars], ensure_ascii=False)
    return [f"The caller said {quoted(heard)}; "
            + ("we could not answer." if status == "refused" else f"we said {quoted(say)}")
            for heard, say, status in turns]
