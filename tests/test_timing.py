"""`timing.one_query_ms` (stages finetune_eval, ko_embed_e5): each model runs all texts in turn, never one text per
model in turn (which let the previous model's spinning onnxruntime threads slow the next: 2.5-3x)."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "stages"))
from timing import one_query_ms  # noqa: E402  (a stage-local module)


def test_each_model_runs_all_texts_in_turn_for_each_round_after_one_warm_up():
    calls = []
    models = {name: (lambda t, name=name: calls.append((name, t))) for name in ("a", "b")}
    out = one_query_ms(models, ["x", "y"], rounds=2)
    assert calls == [("a", "warm up"), ("b", "warm up"),
                     ("a", "x"), ("a", "y"), ("b", "x"), ("b", "y"),
                     ("a", "x"), ("a", "y"), ("b", "x"), ("b", "y")]
    assert set(out) == {"a", "b"} and all(set(v) == {"p50", "p95"} and v["p50"] >= 0 for v in out.values())


def test_the_p50_is_the_median_of_the_models_own_calls():
    import time

    slow = lambda t: time.sleep(0.02 if t != "warm up" else 0)   # noqa: E731
    out = one_query_ms({"slow": slow, "fast": lambda t: None}, ["q"], rounds=3)
    assert 18 <= out["slow"]["p50"] < 200
    assert out["fast"]["p50"] < 5


def test_no_texts_or_no_rounds_is_an_error():
    with pytest.raises(ValueError, match="needs texts"):
        one_query_ms({"a": len}, [])
    with pytest.raises(ValueError, match="rounds >= 1"):
        one_query_ms({"a": len}, ["x"], rounds=0)
