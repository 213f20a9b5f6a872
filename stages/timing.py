"""Per-query latency of several models in one stage run (stages finetune_eval and ko_embed_e5)."""
import statistics
import time
from typing import Callable


def one_query_ms(models: dict[str, Callable[[str], object]], texts: list[str], rounds: int = 5) -> dict:
    """``{name: {"p50", "p95"}}`` ms of ``models[name](text)`` (one query embedded alone), each model warmed up once.
    In each of ``rounds`` rounds every model runs all ``texts`` in turn, model after model, so load drifts over the
    models alike. Not per text in turn: then each model ran while the one before still had onnxruntime's intra-op
    threads spinning for work, which took the 2 cores and inflated every p50 2.5-3x (session 48: e5 fine-tuned 32.7 vs
    9.8 ms, MiniLM 13.1 vs 3.9). Raises ValueError for no texts or fewer than one round."""
    if not texts or rounds < 1:
        raise ValueError(f"one_query_ms: needs texts and rounds >= 1, got {len(texts)} texts, {rounds} rounds")
    times = {name: [] for name in models}
    for fn in models.values():
        fn("warm up")
    for _ in range(rounds):
        for name, fn in models.items():
            for text in texts:
                t0 = time.perf_counter()
                fn(text)
                times[name].append(1000 * (time.perf_counter() - t0))
    return {name: {"p50": round(statistics.median(v), 2), "p95": round(sorted(v)[int(0.95 * (len(v) - 1))], 2)}
            for name, v in times.items()}
