"""Choosing the Korean answer gate on replies (`rag.ko.gate_choice`): hand-made replies whose right choice is
worked out below, and the AUROC of the confidence."""
import pytest

from rag.ko.answer import ABSTAIN, ShareSupport, mean_logprob
from rag.ko.gate_choice import auroc, choose_answer_gate, confidence_auroc

APP = "멜론은 음원 서비스이다. 이 쇼케이스는 유튜브를 통해 최초로 공개되었다."
SHOWCASE = "쇼케이스가 최초로 공개된 사이트는?"  # the 유튜브 sentence holds 3 of its 4 terms (support 0.75)
CAPITAL, SEOUL = "대한민국의 수도는 어디인가?", "서울은 대한민국의 수도이다. 인구는 약 950만 명이다."


def reply(question, passages, answer, cits, logprobs, golds, excluded):
    return {"question": question, "passages": passages, "raw_answer": answer, "raw_citations": cits, "error": None,
            "answer_logprobs": logprobs, "golds": golds, "gold_excluded": excluded}


ROWS = [
    reply(SHOWCASE, [APP], "유튜브", ["1"], [-0.02, -0.1], ["유튜브"], False),   # right, confident (mean -0.06),
    #                                                   but its sentence's support 0.75 is under the verifier's 0.8
    reply(CAPITAL, [SEOUL], "서울", ["1"], [-0.5], ["서울"], False),            # right, unsure; the extractive
    #                                                   sentence (support 1) holds 서울 too
    reply(SHOWCASE, [APP], "유튜브", ["1"], [-0.3], [], True),                   # gold excluded: a hallucination
    reply(CAPITAL, ["부산은 항구 도시이다."], ABSTAIN, ["none"], [-0.01], [], True),  # gold excluded, abstains
]


def test_the_gate_is_chosen_for_span_hit_within_the_hallucination_bound():
    out = choose_answer_gate(ROWS, ShareSupport(0.8), [0.0, 0.5], max_hallucination=0.1, min_gain=0.04)
    # the verifier alone (support 0.8) refuses 유튜브 and has no sentence to say instead: 1 of 2 spans
    assert out["baseline"] == {"min_support": None, "min_mean_logprob": None, "span_hit": 0.5, "hallucination": 0.0,
                               "llm_said": 1}
    # support 0.5 lets 유튜브 through in both conditions; a confidence of -0.06 keeps the right one (-0.06) and drops
    # the gold-excluded one (-0.3); support 0.0 scores the same, and the tie goes to the stricter 0.5
    assert out["chosen"] == {"min_support": 0.5, "min_mean_logprob": pytest.approx(-0.06), "span_hit": 1.0,
                             "hallucination": 0.0, "llm_said": 1}
    assert out["adopt"] is True
    assert [(p["min_support"], p["span_hit"]) for p in out["frontier"]] == [(0.0, 1.0), (0.5, 1.0), (0.8, 0.5)]
    # without the confidence, support 0.5 says the gold-excluded 유튜브 too (hallucination 0.5): with a bound that
    # allows it, the same span hit still goes to the stricter gate
    loose = choose_answer_gate(ROWS, ShareSupport(0.8), [0.5], max_hallucination=0.5, min_gain=0.04)
    assert loose["chosen"]["min_mean_logprob"] == pytest.approx(-0.06) and loose["chosen"]["hallucination"] == 0.0
    assert loose["points"] == 4 + 2   # at 0.5: none and the 3 means said; at 0.8: none and 서울's


def test_a_gain_under_min_gain_is_not_adopted_and_bad_replies_are_refused():
    assert choose_answer_gate(ROWS, ShareSupport(0.8), [0.5], 0.1, min_gain=0.6)["adopt"] is False
    with pytest.raises(ValueError, match="gold-included and gold-excluded"):
        choose_answer_gate(ROWS[:2], ShareSupport(0.8), [0.5], 0.1, 0.04)


def test_auroc_and_the_confidence_of_right_answers():
    assert auroc([0.9, 0.8], [0.1]) == 1.0 and auroc([0.1], [0.9, 0.8]) == 0.0 and auroc([0.5], [0.5]) == 0.5
    assert auroc([], [0.1]) is None
    assert mean_logprob([-0.02, -0.1]) == pytest.approx(-0.06) and mean_logprob([]) is None
    # right answers at -0.06 and -0.5, the gold-excluded one at -0.3: one of the two pairs ranks right above it
    assert confidence_auroc(ROWS) == {"right_vs_gold_excluded": 0.5, "right_vs_wrong": None, "right": 2, "wrong": 0,
                                      "gold_excluded": 1}


def test_params_hold_the_gate_its_stage_chose():
    """params.yaml's ``ko_gen.answer_gate`` is the one stage ko_answer_gate chose and adopted (metrics/ko/answer_gate.json):
    a rerun that chooses another gate fails here until params follow it."""
    import json
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parent.parent
    m = json.loads((root / "metrics" / "ko" / "answer_gate.json").read_text(encoding="utf-8"))
    gate = yaml.safe_load((root / "params.yaml").read_text(encoding="utf-8"))["ko_gen"]["answer_gate"]
    assert m["adopt"] is True and m["params_gate_agrees"] is True and m["run"]["split"] == "train"
    assert gate["model"] == m["settings"]["model"] and gate["min_support"] == m["chosen"]["min_support"]
    # params round the chosen confidence down to 4 decimals (it then decides every train reply the same way)
    assert m["chosen"]["min_mean_logprob"] - 1e-4 <= gate["min_mean_logprob"] <= m["chosen"]["min_mean_logprob"]


def test_the_stage_refuses_to_choose_on_the_test_split_or_a_bad_sample():
    import copy
    import sys
    from pathlib import Path

    import yaml

    from rag.io import InputError

    root = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root / "stages"))
    import ko_answer_gate

    p = yaml.safe_load((root / "params.yaml").read_text(encoding="utf-8"))
    g, llm = ko_answer_gate.settings(p)
    assert g["grid"] == {"A_baseline": [3]} and g["sample"] == 100 and llm["local_model"] == "qwen2.5-coder-1.5b"
    for key, value, message in (("split", "test", "must not be test"), ("sample", 0, "sample must be an integer"),
                                ("servers", "2", "servers must be an integer"),
                                ("max_hallucination", 1.5, "max_hallucination must be in"),
                                ("max_hallucination", "low", "max_hallucination must be in"),
                                ("min_supports", 0.2, "min_supports must be in"),
                                ("min_supports", [0.0, -1], "min_supports must be in")):
        bad = copy.deepcopy(p)
        bad["ko_answer_gate"][key] = value
        with pytest.raises(InputError, match=message):
            ko_answer_gate.settings(bad)
