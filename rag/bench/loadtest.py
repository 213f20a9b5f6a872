"""Concurrent callers through the voice turn (stage load, issue 17): N threads each run a session of questions
against one LLM server; every turn is timed, what it said is checked, exceptions are counted, never raised.

`run_level` runs one level (N callers, a bounded number of turns, a wall-clock bound); `check_said` decides
whether a said line is one the chain may say; `summarise` turns the per-turn records into the level's report.
"""
from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Callable, Mapping, Sequence

from rag.bench.latency import summary
from rag.voice.verify import DEFAULT_VERIFY, VerifyRules, split_sentences, verify


def check_said(final: Mapping, row: Mapping, kb: Mapping[str, str], refusal: str,
               rules: VerifyRules = DEFAULT_VERIFY) -> bool:
    """True when what a turn said is allowed: an ``llm`` line that is the model's error-free answer and passes
    `rag.voice.verify.verify` again here, an ``extractive`` line that is verbatim a sentence of its KB document (one
    of the retrieved), or the ``refused`` line that is exactly ``refusal``. Anything else is an unverified
    utterance."""
    status, say, source = final.get("status"), final.get("say"), final.get("source")
    if status == "refused":
        return say == refusal
    if status == "extractive":
        return source in kb and source in row.get("retrieved", ()) and say in split_sentences(kb[source])
    if status == "llm":
        if row.get("error") is not None or say != row.get("answer") or source != row.get("source"):
            return False
        return verify(say, source, row["retrieved"], kb, row["query"], rules)[0]
    return False


def run_level(callers: int, turns: int, questions: Sequence[str],
              turn: Callable[[str], tuple[Mapping, Mapping]], check: Callable[[Mapping, Mapping], bool],
              max_s: float) -> list[dict]:
    """Run ``turns`` turns spread over ``callers`` simultaneous sessions (threads, started together); turn ``j``
    asks ``questions[j % len(questions)]`` and belongs to caller ``j % callers``. A caller starts no new turn
    once ``max_s`` seconds have passed since the start (those turns are recorded as ``skipped``).

    ``turn(question) -> (final row, answer row)`` (`rag.voice.pipeline.answer_question`); ``check(final, row)``:
    `check_said`. Returns one record per turn ``{caller, question, ms, status, reason, llm_error, unverified,
    crash, skipped}``; an exception in a turn is a ``crash`` (its type and message), never raised.
    """
    if callers < 1 or turns < 0 or not questions:
        raise ValueError(f"need callers >= 1, turns >= 0 and questions; got {callers}, {turns}, {len(questions)}")
    records: list[dict] = []
    lock = threading.Lock()
    barrier = threading.Barrier(callers)
    stop_at: list[float] = []

    def session(c: int) -> None:
        barrier.wait()
        with lock:
            if not stop_at:
                stop_at.append(time.monotonic() + max_s)
        for j in range(c, turns, callers):
            q = questions[j % len(questions)]
            rec = {"caller": c, "question": q, "ms": None, "status": None, "reason": None, "llm_error": None,
                   "unverified": False, "crash": None, "skipped": False}
            if time.monotonic() > stop_at[0]:
                rec["skipped"] = True
            else:
                t0 = time.perf_counter()
                try:
                    final, row = turn(q)
                    rec["ms"] = (time.perf_counter() - t0) * 1000.0
                    rec.update(status=final["status"], reason=final["reason"], llm_error=row.get("error"),
                               unverified=not check(final, row))
                except Exception as e:  # a crash is counted, and the session goes on
                    rec["ms"] = (time.perf_counter() - t0) * 1000.0
                    rec["crash"] = f"{type(e).__name__}: {str(e)[:200]}"
            with lock:
                records.append(rec)

    threads = [threading.Thread(target=session, args=(c,), daemon=True) for c in range(callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return records


def summarise(records: Sequence[Mapping], deadline_s: float) -> dict:
    """The level's report: ``turns`` run, ``skipped``, p50/p95/max turn latency in ms (turns that ran, crashes
    included), ``deadline_misses`` (turns slower than ``deadline_s``; 0 deadline: none counted), ``unverified``
    utterances, ``crashes``, and counts of ``statuses``, ``reasons`` (the first reason of each, e.g.
    ``llm_timeout``) and ``llm_errors`` (null: the model answered)."""
    ran = [r for r in records if not r.get("skipped")]
    ms = [r["ms"] for r in ran if r.get("ms") is not None]
    said = [r for r in ran if not r.get("crash")]
    return {
        "turns": len(ran), "skipped": len(records) - len(ran),
        **{f"{k}_ms": v for k, v in summary(ms).items() if k != "n"},
        "max_ms": round(max(ms), 3) if ms else 0.0,
        "deadline_misses": sum(m > deadline_s * 1000.0 for m in ms) if deadline_s else 0,
        "unverified": sum(bool(r.get("unverified")) for r in said),
        "crashes": sum(bool(r.get("crash")) for r in ran),
        "statuses": dict(sorted(Counter(r["status"] for r in said).items())),
        "reasons": dict(sorted(Counter(str(r["reason"]).split(";")[0] for r in said).items())),
        "llm_errors": dict(sorted(Counter(str(r["llm_error"]) if r["llm_error"] else "none" for r in said).items())),
        "crash_messages": sorted({r["crash"] for r in ran if r.get("crash")})[:5],
    }
