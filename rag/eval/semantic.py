"""Semantic generation metrics in the RAGAS sense, judged by a local LLM bound to JSON schemas (issue 19).

Es, James, Espinosa-Anke & Schockaert, "RAGAS: Automated Evaluation of Retrieval Augmented Generation" (EACL 2024
demos), define, for a question q, an answer a and the context c the generator was given:

- **faithfulness** = |V| / |S|: the judge splits a into statements S (one or more per sentence, pronouns
  resolved), then gives each a verdict, supported by c or not; V are the supported ones. 1 = every claim is in the
  context. It rewards an answer faithful to a wrongly retrieved context: it is not correctness.
- **answer relevancy** = mean cosine between q and n questions the judge writes for a alone (a relevant answer is
  one from which the question can be recovered). Embeddings: the caller's (stage semantic: all-MiniLM-L6-v2 for
  English, USE multilingual for Korean); RAGAS uses any embedding model. RAGAS also zeroes an answer the judge finds noncommittal;
  here a refusal is never judged (the stage counts refusals apart), so that flag is left out.

`faithfulness` and `answer_relevancy` take the judge as a callable ``ask(messages, schema) -> LLMReply`` (a closure
over `rag.llm.client.ask` with the server's url, temperature 0) so they run against any OpenAI-compatible server and
are tested without one. A judge failure (server down, malformed JSON, schema ignored) gives score None and the
error code: never a guessed score.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from rag.llm.client import LLMReply, list_schema

Ask = Callable[[list, dict], LLMReply]

STATEMENTS_PROMPT = (
    "Given a question and an answer, break the answer into one or more short, self-contained statements: one or "
    "more per sentence of the answer, every pronoun replaced by what it refers to. Write the statements in the "
    "answer's language. Add nothing that the answer does not say. Reply with JSON: {\"statements\": [...]}.")
VERDICTS_PROMPT = (
    "You are given a context and numbered statements. For each statement, in order, answer \"yes\" if the "
    "statement can be directly inferred from the context, \"no\" if it cannot (not stated, or contradicted). Judge "
    "only against the context, not your own knowledge. Reply with JSON: {\"verdicts\": [...]}, one verdict per "
    "statement.")
QUESTIONS_PROMPT = (
    "Write {n} different questions that the given answer answers, in the answer's language, each one a question a "
    "caller could have asked to get exactly this answer. Reply with JSON: {{\"questions\": [...]}}.")


@dataclass
class Judgement:
    """One semantic score. score: in [0, 1] (faithfulness) or [-1, 1] (answer relevancy, cosine); None only when
    the judge failed, with ``error`` its `rag.llm.client.ERRORS` code. parts: the statements or the generated
    questions; verdicts: "yes"/"no" per statement (faithfulness only)."""

    score: float | None
    parts: list[str] = field(default_factory=list)
    verdicts: list[str] = field(default_factory=list)
    error: str | None = None


def faithfulness(ask: Ask, question: str, answer: str, context: str, max_statements: int = 6) -> Judgement:
    """RAGAS faithfulness of ``answer`` to ``context`` (the passages the generator was given, as one text): two judge
    calls, statements (1..``max_statements``) then one verdict per statement; score = share of "yes".
    Raises ValueError for an empty answer (a refusal is not judged)."""
    if not answer.strip():
        raise ValueError("faithfulness of an empty answer: count refusals apart, do not judge them")
    r = ask([{"role": "system", "content": STATEMENTS_PROMPT},
             {"role": "user", "content": f"Question: {question}\nAnswer: {answer}"}],
            list_schema("statements", 1, max_statements))
    if r.error:
        return Judgement(None, error=r.error)
    statements = r.items
    numbered = "\n".join(f"{i + 1}. {s}" for i, s in enumerate(statements))
    v = ask([{"role": "system", "content": VERDICTS_PROMPT},
             {"role": "user", "content": f"Context:\n{context}\n\nStatements:\n{numbered}"}],
            list_schema("verdicts", len(statements), len(statements), enum=("yes", "no")))
    if v.error:
        return Judgement(None, statements, error=v.error)
    return Judgement(round(v.items.count("yes") / len(statements), 6), statements, v.items)


def answer_relevancy(ask: Ask, embed: Callable[[Sequence[str]], np.ndarray], question: str, answer: str,
                     n: int = 3) -> Judgement:
    """RAGAS answer relevancy: the judge writes ``n`` questions for ``answer`` alone; score = mean cosine of their
    embeddings with the question's (``embed``: texts -> (len, d) float32, L2-normalised rows). Raises ValueError
    for an empty answer or n < 1."""
    if not answer.strip():
        raise ValueError("answer relevancy of an empty answer: count refusals apart, do not judge them")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    r = ask([{"role": "system", "content": QUESTIONS_PROMPT.format(n=n)},
             {"role": "user", "content": f"Answer: {answer}"}], list_schema("questions", n, n))
    if r.error:
        return Judgement(None, error=r.error)
    vectors = np.asarray(embed([question, *r.items]), dtype=np.float32)
    return Judgement(round(float(np.mean(vectors[1:] @ vectors[0])), 6), r.items)
