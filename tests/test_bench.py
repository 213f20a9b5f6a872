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
