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


def _one_encoder_ms(encoder, texts: Sequence[str], passes: int, threads: int) -> list[float]:
    """Milliseconds of each question embedded alone by ``encoder``'s query side (loaded here, as the chain serves
    it), ``passes`` passes over ``texts`` after one untimed warm-up call. Runs in a fresh process
    (`isolated_query_ms`)."""
    from rag.retrieval.embed import load_sides

    query_side = load_sides(encoder, threads=threads)[0]
    query_side.embed_one("warm up")
    return [_ms(query_side.embed_one, text)[1] for _ in range(passes) for text in texts]


def isolated_query_ms(encoders: Mapping[str, object], baseline: str, texts: Sequence[str], rounds: int,
                      passes: int, threads: int = 2) -> dict:
    """Question-embedding latency of each encoder (`rag.retrieval.embed.Encoder`) as a server holds it: alone in a
    fresh process (multiprocessing's spawn), so no other model's onnxruntime threads share the cores (in one
    process they inflated each other's p50 2.5-3x, README). In each of ``rounds`` rounds every encoder runs once,
    in the order given on even rounds and reversed on odd ones, so drift in the machine's load falls on all alike.

    Returns ``{"encoders": {name: {"n", "p50", "p95", "round_p50": [ms per round]}}, "ratio_to_baseline": {name:
    {"median", "min", "max", "per_round"}}}``: ms (`summary` over all rounds' calls), and each round's p50 over
    ``baseline``'s p50 of the same round (the median of those is the reading to quote). Raises ValueError for no
    texts, fewer than one round or pass, or a ``baseline`` not among ``encoders``."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    if not texts or rounds < 1 or passes < 1 or baseline not in encoders:
        raise ValueError(f"isolated_query_ms: needs texts, rounds >= 1, passes >= 1 and baseline among "
                         f"{sorted(encoders)}; got {len(texts)} texts, {rounds} rounds, {passes} passes, "
                         f"baseline {baseline!r}")
    names = list(encoders)
    calls = {name: [] for name in names}
    round_p50 = {name: [] for name in names}
    context = multiprocessing.get_context("spawn")
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
                ms = pool.submit(_one_encoder_ms, encoders[name], list(texts), passes, threads).result()
            calls[name] += ms
            round_p50[name].append(float(np.percentile(ms, 50)))
    ratios = {name: [a / b for a, b in zip(round_p50[name], round_p50[baseline])] for name in names}
    return {"encoders": {name: {**summary(calls[name]), "round_p50": [round(v, 3) for v in round_p50[name]]}
                         for name in names},
            "ratio_to_baseline": {name: {"median": round(float(np.median(v)), 3), "min": round(min(v), 3),
                                         "max": round(max(v), 3), "per_round": [round(x, 3) for x in v]}
                                  for name, v in ratios.items()}}
