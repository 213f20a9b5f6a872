"""The committed run of the frozen stage ko_generate_models (issue 12, part 4) is the run params.yaml describes: every
cell of ``ko_gen_models.grid`` on ``ko_gen_models.sample`` test questions, both conditions, every rate with its
bootstrap interval. A change to the grid or the sample without a rerun fails here."""
import json
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
RATES = {"final": ["span_match", "hallucination", "abstention"], "raw": ["span_match", "hallucination", "abstention"]}


@pytest.fixture(scope="module")
def committed():
    p = yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))["ko_gen_models"]
    m = json.loads((ROOT / "metrics" / "ko" / "generation_models.json").read_text(encoding="utf-8"))
    return p, m


def test_issue_12_part_4_grid_is_in_params():
    p = yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))["ko_gen_models"]
    assert p["sample"] >= 50
    assert {prompt: sorted(ks) for prompt, ks in p["grid"].items()} == {"A_baseline": [1, 3, 5],
                                                                         "B_fewshot": [1, 3, 5]}


def test_every_cell_of_the_grid_was_run_on_the_sample(committed):
    p, m = committed
    assert (m["sample"], m["seed"], m["grid"]) == (p["sample"], p["seed"], p["grid"])
    for model in p["models"]:
        run = m["runs"][model]
        assert run["split"] == "test" and run["questions"] == p["sample"] and run["server_started"] is True
        want = {f"{prompt}/k={k}/{cond}" for prompt, ks in p["grid"].items() for k in ks
                for cond in ("gold_included", "gold_excluded")}
        assert set(run["cells"]) == want
        assert run["calls"] == len(want) * p["sample"]
        for support_cells in run["cells_by_support"].values():
            assert set(support_cells) == want


def test_every_rate_carries_an_interval_that_holds_it(committed):
    p, m = committed
    for model in p["models"]:
        for name, cell in m["runs"][model]["cells"].items():
            assert cell["n"] == p["sample"], name
            for part, rates in RATES.items():
                for rate in rates:
                    lo, hi = cell[part][f"{rate}_ci"]
                    assert 0.0 <= lo <= cell[part][f"{rate}_rate"] <= hi <= 1.0, (name, part, rate)
