"""params ``embed.model`` picks the English chain's encoder (issue 14 item 5): what each side embeds with, what the
gate and the KB cache record, and the errors for a bad choice."""
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from rag import config
from rag.io import read_params, sha256_of
from rag.retrieval import embed
from rag.retrieval.distributed import embed_passages
from rag.retrieval.e5 import E5Embedder
from rag.retrieval.kb_cache import fingerprint
from rag.voice.gate import Gate, GateMismatch
from rag.voice.pipeline import check_gate

ROOT = Path(__file__).resolve().parents[1]
P = read_params(ROOT / "params.yaml")


@pytest.fixture(autouse=True)
def _packaged_after():
    """Each test leaves the process on the packaged MiniLM, as every other test expects."""
    yield
    embed.use_encoder(embed.PACKAGED)


def with_model(name):
    return {**P, "embed": {**P["embed"], "model": name}}


def test_the_default_is_the_packaged_minilm_the_shipped_gate_was_fitted_on():
    enc = config.encoder(P, ROOT)
    assert P["embed"]["model"] == "minilm" and enc == embed.PACKAGED
    assert enc.id == json.loads((ROOT / "models" / "gate.json").read_text())["embedder"]
    assert embed.query_embedder() is embed.passage_embedder()  # one side for MiniLM


def test_each_encoder_file_is_committed_with_the_sha256_its_training_stage_recorded():
    e5 = json.loads((ROOT / "metrics/finetune/e5.json").read_text())["shipped"]["sha256"]
    q8 = json.loads((ROOT / "metrics/finetune/e5_q8.json").read_text())["shipped"]
    l10 = json.loads((ROOT / "metrics/finetune/e5_l10_query.json").read_text())
    records = {"minilm-heysquad": json.loads((ROOT / "metrics/finetune/train.json").read_text())["shipped"]["sha256"],
               "e5-heysquad": e5, "e5-heysquad-q8": e5, "e5-heysquad-l10-q8": e5,
               "e5-small": json.loads((ROOT / "models/ko-support.json").read_text())["e5_sha256"]}
    for name, entry in P["embed"]["encoders"].items():
        if "file" in entry:
            assert sha256_of(ROOT / entry["file"]) == entry["sha256"] == records[name], name
    assert set(records) | {"minilm"} == set(P["embed"]["encoders"])
    entry = P["embed"]["encoders"]["e5-heysquad-q8"]
    assert (entry["query_file"], entry["query_sha256"]) == (q8["path"], q8["sha256"]) == (
        entry["query_file"], sha256_of(ROOT / entry["query_file"]))
    assert q8["source_sha256"] == e5
    entry = P["embed"]["encoders"]["e5-heysquad-l10-q8"]   # the 10-layer student: the teacher's passages
    assert (entry["query_file"], entry["query_sha256"]) == (l10["shipped"]["path"], l10["shipped"]["sha256"]) == (
        entry["query_file"], sha256_of(ROOT / entry["query_file"]))
    assert l10["settings"]["teacher"] == P["embed"]["encoders"]["e5-heysquad"]["file"]


def test_an_encoder_with_a_query_file_embeds_questions_with_it_and_passages_with_its_file():
    enc = config.encoder(with_model("e5-heysquad-q8"), ROOT)
    assert (enc.file.name, enc.query_file.name) == ("e5-heysquad-asr.onnx", "e5-heysquad-asr-q8.onnx")
    embed.use_encoder(enc)
    text = "WHAT YEAR WAS CASSIMIR KOLOSKI BORN IN WARSAW"
    full, q8 = E5Embedder(enc.file), E5Embedder(enc.query_file)
    q, d = embed.query_embedder().embed_one(text), embed.passage_embedder().embed_one(text)
    assert np.allclose(q, q8.embed_queries([text])[0], atol=1e-6)
    assert np.allclose(d, full.embed_passages([text])[0], atol=1e-6)
    assert embed.query_embedder().embedder.tokenizer is embed.passage_embedder().embedder.tokenizer  # built once
    assert 0.97 < float(q @ full.embed_queries([text])[0]) < 0.99999   # int8 rounding (0.993 on average, stage log)
    assert embed.embedder_id() == (f"e5-heysquad-q8 e5 onnx sha256:{enc.sha256[:16]} "
                                   f"queries sha256:{enc.query_sha256[:16]}")


@pytest.mark.parametrize("change, message", [
    ({"family": "minilm", "file": None, "sha256": None}, "only an e5 encoder takes a query_file"),
    ({"query_sha256": None}, "a query_file and its query_sha256 go together"),
    ({"query_file": None}, "a query_file and its query_sha256 go together"),
])
def test_a_query_file_needs_the_e5_family_and_its_sha256(change, message):
    fields = {"name": "mine", "family": "e5", "file": ROOT / "models/e5-small.onnx", "sha256": "ab" * 32,
              "query_file": ROOT / "models/e5-small.onnx", "query_sha256": "cd" * 32}
    with pytest.raises(ValueError, match=message):
        embed.Encoder(**{**fields, **change})


def test_e5_embeds_questions_and_passages_with_their_own_prefixes_and_changes_what_is_recorded():
    enc = config.encoder(with_model("e5-heysquad"), ROOT)
    assert (enc.family, enc.file.name) == ("e5", "e5-heysquad-asr.onnx")
    embed.use_encoder(enc)
    text = "how much is boarding for a cat"
    e5 = E5Embedder(enc.file)
    q, d = embed.query_embedder().embed_one(text), embed.passage_embedder().embed_one(text)
    assert np.allclose(q, e5.embed_queries([text])[0], atol=1e-6)
    assert np.allclose(d, e5.embed_passages([text])[0], atol=1e-6)
    assert float(q @ d) < 0.999  # "query: " and "passage: " are different inputs
    assert embed.embedder_id() == f"e5-heysquad e5 onnx sha256:{enc.sha256[:16]}"
    with pytest.raises(GateMismatch, match="fitted on vectors of 'all-MiniLM-L6-v2"):
        check_gate(Gate.load(ROOT / "models" / "gate.json"), P)
    rows = embed_passages([text, "Boarding for a cat costs $28 a night."], batch_size=1, batches_per_task=1)
    assert np.allclose(rows[0], d, atol=1e-6)  # the batch job embeds with the passage side of the same encoder


def test_a_kb_embedded_by_one_encoder_is_not_served_to_another(tmp_path):
    (tmp_path / "a.md").write_text("# Hours\n\nWe open at 9 a.m.\n")
    packaged = fingerprint(tmp_path)
    embed.use_encoder(config.encoder(with_model("minilm-heysquad"), ROOT))
    tuned = fingerprint(tmp_path)
    assert packaged != tuned
    embed.use_encoder(embed.PACKAGED)
    assert fingerprint(tmp_path) == packaged


def test_a_fine_tuned_minilm_is_served_by_the_minilm_embedder():
    embed.use_encoder(config.encoder(with_model("minilm-heysquad"), ROOT))
    v = embed.query_embedder().embed_one("what time do you open on saturday")
    packaged = embed.MiniLMEmbedder().embed_one("what time do you open on saturday")
    assert v.shape == (384,) and abs(float(np.linalg.norm(v)) - 1) < 1e-5
    assert 0.5 < float(v @ packaged) < 0.999  # the same kind of vector, moved by the training


@pytest.mark.parametrize("change, message", [
    ({"model": "e5-large"}, r"embed.model must be one of embed.encoders \['e5-heysquad', 'e5-heysquad-l10-q8', 'e5-heysquad-q8', 'e5-small', "
                            r"'minilm', 'minilm-heysquad'\], got 'e5-large'"),
    ({"encoders": {"minilm": {"family": "bert"}}, "model": "minilm"}, r"family must be one of \('minilm', 'e5'\)"),
    ({"encoders": {"mine": {"family": "e5"}}, "model": "mine"}, "an e5 encoder or a sha256 needs a file"),
    ({"encoders": {"mine": {"file": "models/x.onnx"}}, "model": "mine"}, "give the expected sha256 of models/x.onnx"),
    ({"encoders": {"mine": {"file": "x.onnx", "sha": "ab"}}, "model": "mine"}, "a mapping of family, file, sha256"),
])
def test_a_bad_choice_is_named_before_anything_loads(change, message):
    with pytest.raises(ValueError, match=message):
        config.check({**P, "embed": {**P["embed"], **change}})


def test_a_file_whose_sha256_differs_fails_where_it_loads_in_a_turn_and_in_the_batch_job(tmp_path):
    from rag.io import InputError

    copy = tmp_path / "e5.onnx"
    copy.write_bytes((ROOT / "models" / "e5-small.onnx").read_bytes())
    wrong = embed.Encoder("mine", "e5", copy, "0" * 64)
    embed.use_encoder(wrong)
    with pytest.raises(InputError, match=r"embed.encoders.mine.sha256: .*e5.onnx has another sha256 \(22fa75d6"):
        embed.query_embedder()
    with pytest.raises(InputError, match=r"embed.encoders.mine.sha256: "):
        embed_passages(["hello"], encoder=wrong)  # the stage `embed` checks the e5 file too


@pytest.mark.parametrize("family, file, other", [("minilm", "e5-small", "e5"), ("e5", "minilm-heysquad", "minilm")])
def test_a_family_that_does_not_match_its_file_is_named_where_it_loads(family, file, other):
    from rag.io import InputError

    entry = P["embed"]["encoders"][file]
    embed.use_encoder(embed.Encoder("mine", family, ROOT / entry["file"], entry["sha256"]))
    with pytest.raises(InputError, match=rf"^embed.encoders.mine.family: '{family}' does not fit .*{entry['file']}: it "
                                         rf"takes inputs .*, not '{embed.INPUT_OF[family]}' \(family '{other}' does\)$"):
        embed.query_embedder()


def test_a_stage_whose_encoder_file_differs_stops_with_one_line(tmp_path, capsys):
    sys.path.insert(0, str(ROOT / "stages"))
    import common

    mine = tmp_path / "p.yaml"
    changed = with_model("e5-small")
    changed["embed"]["encoders"] = {**P["embed"]["encoders"], "e5-small": {**P["embed"]["encoders"]["e5-small"],
                                                                         "sha256": "ab" * 32}}
    mine.write_text(yaml.safe_dump(changed))
    with pytest.raises(SystemExit) as stop:
        try:
            common.main(lambda: (common.params(), embed.query_embedder()), argv=["--params", str(mine)])
        finally:
            common._ARGS = None
    assert stop.value.code == 1
    assert capsys.readouterr().err == (f"error: embed.encoders.e5-small.sha256: {ROOT / 'models/e5-small.onnx'} has "
                                       f"another sha256 ({P['embed']['encoders']['e5-small']['sha256']})\n")


def test_the_cli_reads_embed_model_from_a_users_params_file(tmp_path, capsys):
    from rag.__main__ import main

    mine = tmp_path / "mine.yaml"
    mine.write_text(yaml.safe_dump({"embed": {"model": "e5-heysquad"}}))
    # the shipped gate was fitted on MiniLM vectors: the CLI says so and how to fit one, and answers nothing
    assert main(["ask", "--params", str(mine), "--llm-url", "http://127.0.0.1:9", "what time do you open"]) == 2
    err = capsys.readouterr().err
    assert "the gate was fitted on vectors of 'all-MiniLM-L6-v2" in err and "e5-heysquad e5 onnx" in err
    mine.write_text(yaml.safe_dump({"embed": {"model": "nope"}}))
    assert main(["ask", "--params", str(mine), "what time do you open"]) == 2
    assert "embed.model must be one of embed.encoders" in capsys.readouterr().err


def test_a_stage_makes_embed_model_its_encoder(tmp_path):
    sys.path.insert(0, str(ROOT / "stages"))
    import common

    mine = tmp_path / "p.yaml"
    mine.write_text(yaml.safe_dump(with_model("e5-small")))
    seen = {}
    try:
        common.main(lambda: seen.update(p=common.params(), id=embed.embedder_id()), argv=["--params", str(mine)])
    finally:
        common._ARGS = None
    assert seen["id"].startswith("e5-small e5 onnx sha256:22fa75d633f8c83d")


def _ask(tmp_path, capsys, params, question="what time do you open"):
    from rag.__main__ import main

    mine = tmp_path / "mine.yaml"
    mine.write_text(yaml.safe_dump(params))
    code = main(["ask", "--params", str(mine), "--llm-url", "http://127.0.0.1:9", question])
    return code, capsys.readouterr().err, mine


def test_a_users_own_encoder_is_one_entry_in_their_params_file(tmp_path, capsys):
    sha = P["embed"]["encoders"]["minilm-heysquad"]["sha256"]
    (tmp_path / "enc").mkdir()
    (tmp_path / "enc" / "mine.onnx").write_bytes((ROOT / "models" / "minilm-heysquad-asr.onnx").read_bytes())
    code, err, _ = _ask(tmp_path, capsys, {"embed": {"model": "mine", "encoders": {
        "mine": {"family": "minilm", "file": "enc/mine.onnx", "sha256": sha.upper()}}}})
    # accepted (file relative to the params file, hex in either case), then stopped by the MiniLM-fitted gate
    assert code == 2 and f"this is 'mine minilm onnx sha256:{sha[:16]}'" in err
    assert "--save-gate FILE` on labelled questions, then `--gate FILE`" in err


@pytest.mark.parametrize("entry, message", [
    ({"file": "nope.onnx", "sha256": "ab" * 32}, r"embed.encoders.mine.file: .*nope.onnx: no such file"),
    ({"file": ".", "sha256": "ab" * 32}, r"embed.encoders.mine.file: .*: a folder, not an ONNX file"),
    ({"file": str(ROOT / "models/e5-small.onnx"), "sha256": "ab" * 32},
     r"embed.encoders.mine.sha256: .*e5-small.onnx has another sha256 \(22fa75d6"),
    ({"file": "x.onnx", "sha256": 12345}, r"embed.encoders.mine.sha256 must be 64 hex digits \(quote it\), got 12345"),
    ({"family": 1}, r"embed.encoders.mine.family must be minilm or e5, got 1"),
    ({"family": "e5", "file": str(ROOT / "models/e5-small.onnx"), "sha256": P["embed"]["encoders"]["e5-small"]["sha256"],
      "query_file": "nope.onnx", "query_sha256": "ab" * 32},
     r"embed.encoders.mine.query_file: .*nope.onnx: no such file"),
    ({"family": "e5", "file": str(ROOT / "models/e5-small.onnx"), "sha256": P["embed"]["encoders"]["e5-small"]["sha256"],
      "query_file": str(ROOT / "models/e5-small.onnx"), "query_sha256": "ab" * 32},
     r"embed.encoders.mine.query_sha256: .*e5-small.onnx has another sha256 \(22fa75d6"),
    ({"family": "e5", "file": str(ROOT / "models/e5-small.onnx"), "sha256": P["embed"]["encoders"]["e5-small"]["sha256"],
      "query_file": str(ROOT / "models/minilm-heysquad-asr.onnx"),
      "query_sha256": P["embed"]["encoders"]["minilm-heysquad"]["sha256"]},
     r"embed.encoders.mine.family: 'e5' does not fit .*minilm-heysquad-asr.onnx: it takes inputs"),
    ({"family": "e5", "file": "x.onnx", "sha256": "ab" * 32, "query_file": "y.onnx", "query_sha256": 7},
     r"embed.encoders.mine.query_sha256 must be 64 hex digits \(quote it\), got 7"),
    ({"family": "e5", "file": str(ROOT / "models/minilm-heysquad-asr.onnx"),
      "sha256": P["embed"]["encoders"]["minilm-heysquad"]["sha256"]},
     r"embed.encoders.mine.family: 'e5' does not fit .*minilm-heysquad-asr.onnx: it takes inputs \[.*'input_ids'.*\], "
     r"not 'inputs_embeds' \(family 'minilm' does\)"),
])
def test_a_bad_encoder_file_is_one_line_naming_the_key_before_any_work(tmp_path, capsys, entry, message):
    import re

    code, err, mine = _ask(tmp_path, capsys, {"embed": {"model": "mine", "encoders": {"mine": entry}}})
    assert code == 2 and err.startswith(f"error: {mine}: ") and re.search(message, err), err
    assert "Traceback" not in err
