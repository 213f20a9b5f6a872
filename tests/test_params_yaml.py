"""params.yaml is read the way DVC writes it (YAML 1.2), so `dvc exp run -S key=value` cannot change a value it
did not set (issue 18: DVC's writer drops the quotes around "on"/"off"/"yes"/"no", which a YAML 1.1 loader reads
as booleans)."""
import copy
import shutil

import pytest
from dvc.utils.hydra import apply_overrides  # the code path behind `dvc exp run -S`

from rag import config
from rag.io import InputError, read_params

from conftest import ROOT


@pytest.mark.parametrize("override, section, key, value", [
    ("retrieval.mode=dense", "retrieval", "mode", "dense"),
    ("abstain.signal=top1", "abstain", "signal", "top1"),
    ("threshold.epsilon=0.02", "threshold", "epsilon", 0.02),
    ("answer.min_sentence_cosine=0.3", "answer", "min_sentence_cosine", 0.3),
])
def test_dvc_set_param_changes_only_that_key(tmp_path, override, section, key, value):
    path = tmp_path / "params.yaml"
    shutil.copy(ROOT / "params.yaml", path)
    before = read_params(path)
    apply_overrides(str(path), [override])
    text = path.read_text(encoding="utf-8")
    assert '"on"' not in text and "- on\n" in text  # DVC's writer did drop the quotes (and reflowed the list)
    expected = copy.deepcopy(before)
    expected[section][key] = value
    after = read_params(path)
    assert after == expected
    assert {"on", "off", "no", "yes"} <= set(after["retrieval"]["stopwords"])
    assert "no" in after["verify"]["negations"]
    config.check(after)


def test_dvc_set_param_list_change(tmp_path):
    path = tmp_path / "params.yaml"
    shutil.copy(ROOT / "params.yaml", path)
    fillers = read_params(path)["rewrite"]["fillers"]
    apply_overrides(str(path), ["rewrite.fillers=[" + ",".join(f"'{f}'" for f in fillers + ["erm"]) + "]"])
    assert read_params(path)["rewrite"]["fillers"] == fillers + ["erm"]


def test_params_read_as_yaml_1_2(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("retrieval:\n  stopwords: [the, on, off, yes, no]\n  hours: 1:30\n")
    assert read_params(path) == {"retrieval": {"stopwords": ["the", "on", "off", "yes", "no"], "hours": "1:30"}}


@pytest.mark.parametrize("text, message", [
    ("a: 1\na: 2\n", "p.yaml:2: invalid YAML"),
    ("retrieval: [a: b\n", "p.yaml:2: invalid YAML"),
    ("- a\n", "expected a mapping of sections"),
    ("", "expected a mapping of sections"),
])
def test_bad_params_file_is_named(tmp_path, text, message):
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(InputError, match=message):
        read_params(path)


@pytest.mark.parametrize("section, key", [
    ("retrieval", "stopwords"), ("rewrite", "fillers"), ("rewrite", "openers"), ("verify", "negations"),
    ("verify", "function_words"),
])
def test_word_lists_hold_only_strings(params, section, key):
    bad = copy.deepcopy(params)
    bad[section][key] = ["the", True]
    with pytest.raises(ValueError, match=rf"{section}\.{key} must be a list of words, got True"):
        config.check(bad)


@pytest.mark.parametrize("section, key, value, message", [
    # a bad-input pass (session 41): each was accepted (max_tokens 0 truncated every answer; n_ctx -1 was a server
    # that did not start, naming no key)
    ("llm", "max_tokens", 0, r"llm\.max_tokens must be a finite number >= 1, got 0"),
    ("llm", "temperature", -1, r"llm\.temperature must be a finite number >= 0, got -1"),
    ("llm", "timeout_s", 0, r"llm\.timeout_s must be a finite number > 0, got 0"),
    ("llm", "n_ctx", -1, r"llm\.n_ctx must be a finite number >= 0, got -1"),
    ("llm", "threads", 0, r"llm\.threads must be a finite number >= 1, got 0"),
    ("retrieval", "bm25_floor", float("nan"), r"retrieval\.bm25_floor must be a finite number >= 0, got nan"),
    ("retrieval", "min_token_len", -2, r"retrieval\.min_token_len must be a finite number >= 0, got -2"),
])
def test_llm_and_retrieval_numbers_are_bounded(params, section, key, value, message):
    bad = copy.deepcopy(params)
    bad[section][key] = value
    with pytest.raises(ValueError, match=message):
        config.check(bad)


@pytest.mark.parametrize("key, value", [("voice.kb", ""), ("voice.queries", None),
                                        ("abstain.transfer_queries.clean", 1)])
def test_stage_paths_are_non_empty_strings(params, key, value):
    # a bad-input pass (session 41): `dvc exp run -S "voice.kb=''" chunk` chunked the checkout, README.md as the KB;
    # null was a TypeError inside the stage
    import sys

    sys.path.insert(0, str(ROOT / "stages"))
    import common

    bad = copy.deepcopy(params)
    *parents, last = key.split(".")
    node = bad
    for k in parents:
        node = node[k]
    node[last] = value
    with pytest.raises(ValueError, match=rf"{key} must be a path \(a non-empty string\), got {value!r}"):
        common.check_paths(bad)
    common.check_paths(params)
