"""Selective recall (rag.memory.recall): which earlier turns of a call join the question."""
from pathlib import Path

import numpy as np
import pytest

from rag.memory.recall import recall, with_memory


def unit(*xs):
    v = np.asarray(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


def test_recall_keeps_the_earlier_turns_at_or_above_the_cosine_oldest_first():
    q = unit(1, 0, 0)
    earlier = np.stack([unit(0, 1, 0), unit(1, 1, 0), unit(1, 0, 0), unit(-1, 0, 0)])  # cosines 0, 0.707, 1, -1
    assert recall(q, earlier, 0.7) == [1, 2]
    assert recall(q, earlier, 1.0) == [2]
    assert recall(q, earlier, -1.0) == [0, 1, 2, 3]
    assert recall(q, earlier, 1.01) == []


def test_recall_with_no_earlier_turn_and_bad_shapes():
    q = unit(1, 0, 0)
    assert recall(q, np.zeros((0, 3), dtype=np.float32), 0.5) == []
    with pytest.raises(ValueError, match=r"\(n, 3\)"):
        recall(q, np.zeros((2, 4), dtype=np.float32), 0.5)
    with pytest.raises(ValueError, match=r"\(n, 3\)"):
        recall(q, np.zeros(3, dtype=np.float32), 0.5)


def test_with_memory_puts_the_picked_turns_first_in_call_order():
    earlier = ["do you do video visits", "how much is a flu shot", "when are they"]
    assert with_memory("how much do they cost", earlier, [2, 0]) == (
        "do you do video visits when are they how much do they cost")
    assert with_memory("how much do they cost", earlier, []) == "how much do they cost"


def test_the_dialogues_stage_checks_its_grid(params, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "stages"))
    from dialogues import recall_grid

    assert recall_grid(params) == [float(x) for x in params["memory"]["recall_grid"]]
    from rag.io import InputError

    for bad in ([], [0.5, 2], ["0.5"], None, [True]):
        with pytest.raises(InputError, match=r"params\.yaml: memory\.recall_grid must be a non-empty list"):
            recall_grid({"memory": {"recall_grid": bad}})


def test_the_dialogues_stage_picks_the_cosine_on_the_choose_kbs_pooled(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "stages"))
    from dialogues import CHOOSE, pick_min_cosine

    assert CHOOSE == ("clinic", "dental", "salon")  # the vet dialogues only report
    m = lambda acc, n, tok: {"factual_accuracy": acc, "n_answerable": n, "search_tokens": tok}  # noqa: E731
    clinic = {0.2: m(0.5, 62, 600), 0.6: m(31 / 62 - 1 / 62, 62, 400)}  # 31 right vs 30
    dental = {0.2: m(20 / 54, 54, 500), 0.6: m(22 / 54, 54, 300)}       # 20 right vs 22
    assert pick_min_cosine([0.2, 0.6], [clinic]) == 0.2        # the clinic alone: one turn more at 0.2
    assert pick_min_cosine([0.2, 0.6], [clinic, dental]) == 0.6  # pooled: 51 vs 52 turns right
    tie = {0.2: m(0.5, 10, 100), 0.6: m(0.5, 10, 90), 0.8: m(0.5, 10, 90)}
    assert pick_min_cosine([0.8, 0.2, 0.6], [tie]) == 0.6      # equal right: fewer tokens, then the lower cosine
