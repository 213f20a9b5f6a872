"""Stage semantic_models (issue 19): a weaker packaged model's replies collected for the judge, its checks and report."""
import contextlib
import json
import sys
from pathlib import Path

import pytest

from llm_stub import Stub
from rag.io import read_params

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "stages"))
import semantic_models  # noqa: E402  (a stage script, importable for its functions)

P = read_params(ROOT / "params.yaml")
SATURDAY = "On Saturday we are open from 9 a.m. to 1 p.m."


def test_a_generators_replies_are_the_chains_on_the_chosen_sets_with_no_turn_deadline(monkeypatch):
    seen = {}

    @contextlib.contextmanager
    def served(p, warn=None):
        seen["llm"], seen["answer"] = dict(p["llm"]), dict(p["answer"])
        yield stub.url

    monkeypatch.setattr(semantic_models, "llm_url", served)
    with Stub(json.dumps({"answer": SATURDAY, "source": "kb-hours"})) as stub:
        replies = semantic_models.replies_of(P, "qwen2.5-coder-0.5b", ["clinic"])
    # the model named, its prompt cache off, no turn deadline
    assert seen["llm"]["local_model"] == "qwen2.5-coder-0.5b" and seen["llm"]["cache_ram_mib"] == 0
    assert seen["answer"]["deadline_s"] == 0.0
    clinic = [q["id"] for q in map(json.loads, (ROOT / P["voice"]["queries"]).read_text().splitlines())]
    assert [r["id"] for r in replies] == clinic  # every clinic question, in order; no other set asked
    assert {(r["generator"], r["set"]) for r in replies} == {("qwen2.5-coder-0.5b", "clinic")}
    q01 = replies[0]
    assert (q01["id"], q01["answer"], q01["source"], q01["error"]) == ("q01", SATURDAY, "kb-hours", None)
    asked = [r for r in replies if not r["gated"]]
    assert len(stub.requests) == len(asked) > 0  # one call per question the gate let through

    from semantic import reply_items

    items = {x["id"]: x for x in reply_items(P, replies)}
    assert items["q01"]["skipped"] is None and items["q01"]["right"] and items["q01"]["supported"]
    assert items["q01"]["question"] == "Oh hi, um, what time do you guys open on Saturday?"  # the words said


@pytest.mark.parametrize("change, message", [
    ({"generator_sets": ["clinic", "dentist"]}, r"semantic.generator_sets: \['dentist'\] are not sets of stage selection"),
    ({"generators": ["qwen2.5-coder-1.5b"]}, r"semantic.generators: qwen2.5-coder-1.5b is the judge; it would grade itself"),
])
def test_a_bad_setting_stops_before_any_model_starts(tmp_path, monkeypatch, capsys, change, message):
    import re

    import common
    import yaml

    mine = tmp_path / "p.yaml"
    mine.write_text(yaml.safe_dump({**P, "semantic": {**P["semantic"], **change}}))
    monkeypatch.setattr(semantic_models, "llm_url", lambda *a, **k: pytest.fail("a model was started"))
    out = tmp_path / "metrics"
    out.mkdir()
    monkeypatch.setattr(semantic_models, "VOICE_METRICS", out)
    with pytest.raises(SystemExit) as stop:
        try:
            common.main(semantic_models.run, argv=["--params", str(mine)])
        finally:
            common._ARGS = None
    assert stop.value.code == 1 and re.search(message, capsys.readouterr().err)
    assert not list(out.iterdir())  # nothing written


def test_the_report_puts_the_shipped_generators_rows_beside_and_lists_disagreements(tmp_path, monkeypatch):
    monkeypatch.setattr(semantic_models, "VOICE_METRICS", tmp_path)
    m = {"replies": 3, "refusals": 1, "errors": 0, "judge_failed": 0, "judged": 2, "faithfulness": 1.0,
         "faithfulness_ci": (1.0, 1.0), "relevancy": 0.7, "relevancy_ci": (0.6, 0.8), "rule_supported": 2,
         "rule_right": 1, "semantic_pass": 2, "agree": 1}
    wrong = {"generator": "g", "set": "clinic", "id": "q05", "question": "can I get a flu shot", "skipped": None,
             "answer": "A flu shot costs $30.", "faithfulness": 1.0, "relevancy": 0.8, "right": False,
             "semantic_pass": True}
    out = {"judge": "j", "threads": 2, "loadavg_1_5_15": [0.5, 0.5, 0.5], "pass_faithfulness": 1.0,
           "pass_relevancy": 0.6, "sets": ["clinic"], "runs": {"g": {"clinic": m, "all": m}},
           "answers": [wrong, {**wrong, "id": "q06", "right": True}], "runtime_s": 10.0}
    semantic_models.write_report(out, {"generator": "shipped", "sets": {"clinic": {**m, "judged": 1}, "vet_clean": m}})
    md = (tmp_path / "semantic_models.md").read_text()
    assert "| shipped | clinic | 3 | 1 | 1 | 0 | 1.00 [1.00, 1.00] | 0.70 [0.60, 0.80] | 2 | 1 | 2 | 1 |" in md
    assert "| g | all | 3 | 1 | 2 |" in md and "vet_clean" not in md  # only the sets the stage ran
    assert "| g | clinic | q05 | can I get a flu shot | A flu shot costs $30. | 1.00 | 0.80 | wrong | pass |" in md
    assert "q06" not in md  # right and passing: they agree
    assert json.loads((tmp_path / "semantic_models.json").read_text())["runs"]["g"]["all"]["judged"] == 2
