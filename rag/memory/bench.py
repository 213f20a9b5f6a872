"""What memory adds to a turn: one `Store.append` plus one `Store.turns` read, timed per backend."""
from __future__ import annotations

import time
import uuid

from rag.bench.latency import summary
from rag.memory.store import Store, Turn


def turn_overhead_ms(store: Store, turns: int = 200, limit: int = 8) -> dict:
    """Time ``turns`` turns of one fresh session on ``store``: each one append and one read of the last ``limit``
    turns (wall-clock, ``time.perf_counter``). Returns ``{"backend", "turns", "p50", "p95"}`` with the latencies
    in milliseconds (`rag.bench.latency.summary`). The session is forgotten afterwards. Raises what the store raises
    (MemoryUnavailable when its server is gone)."""
    session = f"bench-{uuid.uuid4().hex}"
    ms = []
    try:
        for n in range(1, turns + 1):
            turn = Turn(session, n, "how much is a flu shot", "how much is a flu shot",
                        "A flu shot costs $25.", "extractive", "kb-vaccines", "")
            t0 = time.perf_counter()
            store.append(turn)
            store.turns(session, limit)
            ms.append((time.perf_counter() - t0) * 1000.0)
    finally:
        store.forget(session)
    s = summary(ms)
    return {"backend": store.name, "turns": s["n"], "p50": s["p50"], "p95": s["p95"]}
