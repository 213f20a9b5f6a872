"""The committed run of the frozen stage heysquad_llm (issue 12, part 3) is the run params.yaml describes: every model
of ``heysquad_llm.models`` in every mode and form on ``heysquad_llm.n`` report-half questions, with counts that add
up. A change to the models, modes or sample without a rerun fails here."""
import json
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def committed():
    p = yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))["heysquad_llm"]
    m = json.loads((ROOT / "metrics" / "heysquad" / "llm.json").read_text(encoding="utf-8"))
    return p, m


def test_issue_12_part_3_asks_for_every_model_in_both_modes_on_100_questions():
    p = yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))["heysquad_llm"]
    assert p["n"] >= 100
    assert set(p["models"]) == {"smollm2-135m-q8", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"}
    assert sorted(p["modes"]) == ["choose", "free"]


def test_every_model_mode_and_form_was_run_on_the_sample(committed):
    p, m = committed
    assert (m["models"], m["n"], m["seed"], m["threads"]) == (p["models"], p["n"], p["seed"], p["threads"])
    assert set(m["results"]) == {f"{model}/{form}/{mode}" for model in p["models"] for form in p["forms"]
                                 for mode in p["modes"]}
    for name, r in m["results"].items():
        assert r["questions"] == p["n"], name
        assert p["n"] - r["llm_errors"] <= r["first_token_ms"]["n"] <= p["n"], name  # every reply that came had a first token


def test_counts_add_up_and_llm_off_is_one_chain_for_every_model(committed):
    p, m = committed
    for form in p["forms"]:
        off = {r["llm_off_right"] for name, r in m["results"].items() if f"/{form}/" in name}
        assert len(off) == 1, (form, off)  # the same questions, the same chain with the model unreachable
    for name, r in m["results"].items():
        right_on = round(r["llm_on_right"] * r["questions"])
        assert right_on + r["said_wrong_on"] + r["refused_on"] == r["questions"], name
        assert 0 <= r["kept_right"] <= r["kept"] <= r["questions"] - r["refused_on"], name
        assert sum(r["reasons"].values()) == r["questions"], name
