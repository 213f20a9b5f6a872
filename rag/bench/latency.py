"""Per-turn latency: the retrieval steps (rewrite, query embedding, search), the whole turn without the LLM
(`whole_turn`: + gate, pick, verify), and embedding throughput.

Times are wall-clock (``time.perf_counter``) on this machine, one call at a time; they depend on the CPU
and its load, so quote the medians (p50) and read p95 as the tail.
"""
from __future__ import annotations

import time
from typing import Callable, Mapping, Sequence

import numpy as np

from rag.voice.rewrite import RewriteRules, rewrite
from rag.retrieval.search import MODES, PassageIndex


def summary(ms: Sequence[float]) -> dict[str, float]:
    """``{"n", "p50", "p95"}`` of latencies in milliseconds (numpy's linear percentiles), rounded to 0.001 ms;
    p50 = p95 = 0.0 for no samples."""
    if not len(ms):
        return {"n": 0, "p50": 0.0, "p95": 0.0}
    return {"n": len(ms), "p50": round(float(np.percentile(ms, 50)), 3), "p95": round(float(np.percentile(ms, 95)), 3)}


def _ms(fn, *args, **kwargs):
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, (time.perf_counter() - t0) * 1000.0


def turn_latency(index: PassageIndex, queries: Sequence[dict], rules: RewriteRules, embedder, k: int,
                 repeats: int, modes: Sequence[str] = MODES) -> dict:
    """Latency per turn of each step, over ``repeats`` passes of ``queries`` (after one untimed warm-up pass).

    A turn: rewrite the transcript (``asr``, with its ``context`` question's rewrite, as
    `rag.voice.queries.rewrite_queries` does), embed the rewrite once, then search it top-``k`` in every mode with
    that vector. Returns ``{"rewrite": summary, "embed_query": summary, "search": {mode: summary}}`` (ms).
    """
    times: dict[str, list[float]] = {"rewrite": [], "embed_query": [], **{m: [] for m in modes}}
    for rep in range(repeats + 1):
        done: dict[str, str] = {}
        for q in queries:
            text, t_rw = _ms(rewrite, q["asr"], done.get(q["context"]) if q["context"] else None, rules)
            done[q["id"]] = text
            vector, t_emb = _ms(embedder.embed_one, text)
            t_search = {m: _ms(index.search, text, k, m, vector)[1] for m in modes}
            if rep:  # pass 0 warms up onnxruntime and builds the BM25 index
                times["rewrite"].append(t_rw)
                times["embed_query"].append(t_emb)
                for m in modes:
                    times[m].append(t_search[m])
    return {"rewrite": summary(times["rewrite"]), "embed_query": summary(times["embed_query"]),
            "search": {m: summary(times[m]) for m in modes}}


def embed_throughput(embedder, texts: Sequence[str], repeats: int) -> float:
    """Median passages/s of ``embedder.embed(texts)`` (one batched call) over ``repeats`` timed calls."""
    embedder.embed(texts[:1])  # warm-up
    return round(float(np.median([len(texts) / (_ms(embedder.embed, texts)[1] / 1000.0) for _ in range(repeats)])), 2)


TURN_STEPS = ("rewrite", "embed_query", "search", "gate", "pick", "verify")


def whole_turn(index: PassageIndex, kb: Mapping[str, str], sentences, texts: Sequence[str], rules: RewriteRules,
               settings, verify_rules, gate: Callable[[str, np.ndarray], float], embedder, repeats: int) -> dict:
    """Latency of a whole turn without the LLM, per step, over ``repeats`` passes of ``texts`` (after one
    untimed warm-up pass): rewrite the transcript, embed it, search (``settings.mode``, top ``settings.k``),
    gate (``gate(query, vector)`` -> score), pick what is said with the LLM down (`rag.voice.answer.decide`:
    candidate scoring and the extractive pick, with the KB's precomputed `rag.retrieval.sentences.SentenceIndex`
    ``sentences``, or None to split and embed the retrieved documents per question, the old path), and
    verify the picked sentence as if the LLM had said it (`rag.voice.verify.verify`).

    Returns ``{step: summary, "turn": summary}`` in ms (`summary`), ``turn`` the sum of the steps per question.
    """
    from rag.voice.answer import decide, retrieve
    from rag.voice.verify import verify

    times: dict[str, list[float]] = {s: [] for s in (*TURN_STEPS, "turn")}
    for rep in range(repeats + 1):
        for n, asr in enumerate(texts):
            t: dict[str, float] = {}
            text, t["rewrite"] = _ms(rewrite, asr, None, rules)
            vector, t["embed_query"] = _ms(embedder.embed_one, text)
            (_, docs, _), t["search"] = _ms(retrieve, index, text, vector, settings)
            _, t["gate"] = _ms(gate, text, vector)
            row = {"id": str(n), "query": text, "retrieved": docs, "gated": False, "answer": None, "source": None,
                   "error": "unreachable"}
            said, t["pick"] = _ms(decide, row, kb, vector, settings, verify_rules, sentences)
            _, t["verify"] = _ms(verify, said["say"], said["source"], docs, kb, text, verify_rules)
            if rep:
                for step, ms in t.items():
                    times[step].append(ms)
                times["turn"].append(sum(t.values()))
    return {step: summary(ms) for step, ms in times.items()}
