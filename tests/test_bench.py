"""The latency benchmark's whole turn runs the real turn code (a change to a step's signature breaks it here, not in
the repro)."""
from conftest import ROOT
from rag import config
from rag.bench.latency import TURN_STEPS, summary, whole_turn
from rag.retrieval.embed import query_embedder
from rag.voice.gate import Gate
from rag.retrieval.kb_cache import open_kb
from rag.voice.pipeline import gate_function


def test_summary_percentiles():
    assert summary([]) == {"n": 0, "p50": 0.0, "p95": 0.0}
    assert summary([1.0, 2.0, 3.0, 4.0]) == {"n": 4, "p50": 2.5, "p95": 3.85}


def test_whole_turn_times_every_step(params, tmp_path):
    p = params
    kb = open_kb(ROOT / "fixtures" / "voice" / "kb", config.hybrid_config(p), tmp_path)
    gate = gate_function(Gate.load(ROOT / "models" / "gate.json"), kb.index, p)
    out = whole_turn(kb.index, kb.docs, kb.sentences, ["UM WHAT TIME DO YOU OPEN ON SATURDAY", "WHO WON THE GAME"],
                     config.rewrite_rules(p, kb.index.passages), config.answer_settings(p, 0.0),
                     config.verify_rules(p), gate, query_embedder(), 2)
    assert set(out) == {*TURN_STEPS, "turn"}
    assert all(out[s]["n"] == 4 for s in out)  # 2 texts x 2 timed passes (the warm-up pass is not counted)
    assert out["turn"]["p50"] >= max(out[s]["p50"] for s in TURN_STEPS)


def test_isolated_query_ms_times_each_encoder_in_every_round_against_the_baseline():
    import pytest

    from rag.bench.latency import isolated_query_ms
    from rag.retrieval.embed import Encoder

    packaged = Encoder(name="minilm")
    out = isolated_query_ms({"base": packaged, "other": packaged}, "base", ["where do I park", "who is doctor patel"],
                            rounds=2, passes=2)
    for name in ("base", "other"):
        timing = out["encoders"][name]
        assert timing["n"] == 8                      # 2 rounds x 2 passes x 2 texts; the warm-up is not counted
        assert len(timing["round_p50"]) == 2 and 0 < timing["p50"] <= timing["p95"]
    assert out["ratio_to_baseline"]["base"] == {"median": 1.0, "min": 1.0, "max": 1.0, "per_round": [1.0, 1.0]}
    other = out["ratio_to_baseline"]["other"]
    assert other["per_round"] == pytest.approx([a / b for a, b in zip(out["encoders"]["other"]["round_p50"],
                                                                      out["encoders"]["base"]["round_p50"])], abs=0.002)
    assert other["min"] <= other["median"] <= other["max"]
    with pytest.raises(ValueError, match="baseline"):
        isolated_query_ms({"base": packaged}, "missing", ["x"], rounds=1, passes=1)
    with pytest.raises(ValueError, match="rounds"):
        isolated_query_ms({"base": packaged}, "base", ["x"], rounds=0, passes=1)
