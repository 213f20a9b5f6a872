"""The embedding batch job gives the same vectors in this process and on Ray (issue 16)."""
import numpy as np
import pytest

from rag.retrieval.distributed import chunks, embed_passages
from rag.retrieval.embed import passage_embedder

TEXTS = [f"Passage {i}: the clinic is open from {8 + i % 3} a.m. on weekdays and {'closed' if i % 2 else 'open'} "
         f"on Sunday." + " More words." * (i % 7) for i in range(70)]


def test_chunks_are_whole_batches_in_order():
    assert chunks(70, 32, 1) == [range(0, 32), range(32, 64), range(64, 70)]
    assert chunks(70, 8, 4) == [range(0, 32), range(32, 64), range(64, 70)]
    assert chunks(0, 32, 4) == []


def test_local_and_ray_give_the_same_vectors_row_for_row():
    local = embed_passages(TEXTS, "local", batches_per_task=1)
    assert np.array_equal(local, passage_embedder().embed(TEXTS))  # the project's embedder, same batches
    on_ray = embed_passages(TEXTS, "ray", workers=2, batch_size=32, batches_per_task=1)
    assert on_ray.shape == (70, 384) and np.array_equal(on_ray, local)


def test_unknown_engine():
    with pytest.raises(ValueError, match="embed.engine must be one of"):
        embed_passages(TEXTS, "spark")
