"""Embedding on a distributed engine (issue 16): the same batch function on Ray tasks, locally or on a cluster.

`embed_passages` cuts the texts into chunks of whole embedder batches (``batch_size`` texts each, so every text is
padded and pooled with the same neighbours as in one local pass) and embeds each chunk with the passage side of an
`rag.retrieval.embed.Encoder` (default: the process-wide one, params ``embed.model``):
in this process (``engine="local"``) or as Ray tasks (``engine="ray"``; a local Ray started with ``workers`` CPUs,
or the cluster at ``address``). The vectors are the same either way, row for row (tests/test_distributed.py).
"""
from __future__ import annotations

import functools
import os
from typing import Sequence

import numpy as np

ENGINES = ("local", "ray")


@functools.lru_cache(maxsize=1)
def _worker_embedder(batch_size: int, threads: int, encoder):
    from rag.retrieval.embed import load_sides

    return load_sides(encoder, threads, batch_size)[1]


def _embed_chunk(texts: list[str], batch_size: int, threads: int, encoder) -> np.ndarray:
    """One task: (len(texts), 384) float32 unit rows, the worker's embedder loaded once per process."""
    return _worker_embedder(batch_size, threads, encoder).embed(texts)


def chunks(n: int, batch_size: int, batches_per_task: int) -> list[range]:
    """Consecutive index ranges covering ``range(n)``, each ``batch_size * batches_per_task`` long (the last shorter)."""
    step = batch_size * batches_per_task
    return [range(i, min(i + step, n)) for i in range(0, n, step)]


def embed_passages(texts: Sequence[str], engine: str = "local", workers: int = 2, address: str = "",
                   batch_size: int = 32, batches_per_task: int = 4, threads: int = 1, encoder=None) -> np.ndarray:
    """(len(texts), 384) float32 unit rows, row i = texts[i].

    engine: ``local`` (this process) or ``ray`` (tasks of ``batches_per_task`` batches; ``address`` "" starts a
    local Ray with ``workers`` CPUs and stops it after, else joins that cluster and leaves it running); threads:
    onnxruntime threads per task (one per CPU Ray gives a task); encoder: an `rag.retrieval.embed.Encoder` (None: the
    process-wide one; `Encoder.verified` where each process loads it). Raises ValueError for an unknown engine,
    ImportError (naming the pip command) when Ray is missing.
    """
    if engine not in ENGINES:
        raise ValueError(f"embed.engine must be one of {ENGINES}, got {engine!r}")
    if encoder is None:
        from rag.retrieval.embed import current_encoder

        encoder = current_encoder()
    texts = list(texts)
    parts = chunks(len(texts), batch_size, batches_per_task)
    if engine == "local":
        return np.concatenate([_embed_chunk(texts[r.start:r.stop], batch_size, threads, encoder) for r in parts]
                              or [np.zeros((0, 384), np.float32)])
    try:
        import ray
    except ImportError:
        raise ImportError("embed.engine ray needs Ray: pip install ray==2.60.0") from None
    started = not ray.is_initialized()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # never phone home
    if started:
        ray.init(address=address or None, num_cpus=None if address else int(workers), include_dashboard=False,
                 log_to_driver=False, configure_logging=False)
    try:
        task = ray.remote(num_cpus=1)(_embed_chunk)
        out = ray.get([task.remote(texts[r.start:r.stop], batch_size, threads, encoder) for r in parts])
    finally:
        if started:
            ray.shutdown()
    return np.concatenate(out or [np.zeros((0, 384), np.float32)])
